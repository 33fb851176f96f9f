"""A call the in-process client marks well formed passes the SDK's request checks: skipping them is safe.

The in-process client builds a ``tools/call`` from a name, arguments and ``_meta``; when
`well_formed_call` says those parts make a request the protocol accepts, our server answers it without
checking it again. Here the SDK's checks themselves (`validate_client_request`) judge random parts,
with the session's real stamp on them; and a request the client did not build is still checked.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import anyio
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from mcp import MCPError
from mcp_types import INVALID_PARAMS, methods
from mcp_types.version import LATEST_MODERN_VERSION
from pydantic import ValidationError

from mcp_resili.client.inprocess import InProcessClient, InProcessDispatcher, call_params, well_formed_call
from mcp_resili.faults import parse_fault_spec
from mcp_resili.registry.loader import get_suite
from mcp_resili.server.app import ResiliServer
from mcp_resili.server.direct import _request_meta, direct_on_request

SUITE = get_suite("resilibench")
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
KEYS = st.text(max_size=12) | st.sampled_from(["progressToken", "io.modelcontextprotocol/protocolVersion"])
ANYTHING = JSON | st.sets(st.integers(), max_size=2) | st.tuples(st.integers())


async def _stamped_meta() -> dict[str, Any]:
    """The ``_meta`` a real session stamps on a ``tools/call`` (version, client info, capabilities)."""
    server = ResiliServer(SUITE, parse_fault_spec("none", SUITE.spec_scope))
    async with InProcessClient(server.mcp) as client:
        data: dict[str, Any] = {"method": "tools/call", "params": {"name": "x"}}
        client.session._stamp(data, {})
        return dict(data["params"]["_meta"])


@functools.cache
def stamped_meta() -> dict[str, Any]:
    return anyio.run(_stamped_meta)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(
    name=st.text(max_size=20) | st.integers(),
    arguments=st.none()
    | st.dictionaries(st.text(max_size=8), ANYTHING, max_size=4)
    | st.lists(JSON, max_size=2),
    meta=st.none() | st.dictionaries(KEYS, ANYTHING, max_size=3),
)
def test_a_call_marked_well_formed_passes_the_sdks_request_checks(
    name: Any, arguments: Any, meta: Any
) -> None:
    assume(well_formed_call(name, arguments, meta))
    params = call_params(name, arguments, meta)
    params.setdefault("_meta", {}).update(stamped_meta())  # as the session stamps it
    methods.validate_client_request("tools/call", LATEST_MODERN_VERSION, params)
    # And its ``_meta`` reads as the dict it is (what the direct answer takes without validating it).
    assert _request_meta(params) == params["_meta"]


@pytest.mark.parametrize(
    ("name", "arguments", "meta"),
    [
        (7, {}, None),  # a name that is no string
        ("t", ["a"], None),  # arguments that are no object
        ("t", {}, {"progressToken": math.pi}),  # a progress token is a string or an integer
        ("t", {}, {"io.modelcontextprotocol/protocolVersion": 3}),  # a reserved key, typed
    ],
)
def test_parts_the_sdk_may_refuse_are_never_marked_well_formed(name: Any, arguments: Any, meta: Any) -> None:
    assert not well_formed_call(name, arguments, meta)
    params = call_params(name, arguments, meta)
    params.setdefault("_meta", {}).update({k: v for k, v in stamped_meta().items() if k not in (meta or {})})
    with pytest.raises(ValidationError):
        methods.validate_client_request("tools/call", LATEST_MODERN_VERSION, params)


@pytest.mark.anyio
async def test_a_request_the_client_did_not_build_is_still_checked() -> None:
    server = ResiliServer(SUITE, parse_fault_spec("none", SUITE.spec_scope))
    async with server.mcp.lifespan(server.mcp) as state:
        dispatcher = InProcessDispatcher(direct_on_request(server, state))
        async with anyio.create_task_group() as tg:

            async def on_request(*_: Any) -> dict[str, Any]:
                return {}

            async def on_notify(*_: Any) -> None:
                return None

            await tg.start(dispatcher.run, on_request, on_notify)
            params = {"name": 7, "arguments": {}, "_meta": stamped_meta()}
            with pytest.raises(MCPError) as raised:
                await dispatcher.send_raw_request("tools/call", params)
            assert raised.value.error.code == INVALID_PARAMS
            assert "name" in raised.value.error.message
            dispatcher.close()
