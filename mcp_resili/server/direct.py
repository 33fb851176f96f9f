"""Our server's answer to an in-process request: a 2026-era ``tools/call`` without the SDK's kernel.

The SDK serves every in-process request with `serve_one`: a `ServerRunner` per request, its
context, its middleware chain composed anew, the request checked against the protocol surface, and
a shielded teardown of the request's `Connection`. For a modern ``tools/call`` on a server whose
only middleware is our wire-form answer (`ResiliServer.answer_tools_call`, which checks the request
against the surface itself), that kernel does nothing the answer needs: here the request's context
is built as the kernel builds it (its envelope read into a `Connection`, its ``_meta``, a
`ServerSession` for notifications; the in-process dispatcher's request context already refuses
server-initiated requests) and handed straight to that middleware. Anything else — another
method, a handshake-era version, a server with more middleware (the protocol-fault layer, tracing)
— takes the SDK's path. The answers are the same, error for error (`tests/test_inprocess_client.py`).

A request `InProcessClient` built from parts that pass the surface's checks by construction
(`well_formed_call`, held to the SDK's checks by `tests/test_inprocess_well_formed.py`) is not
checked a second time; any other request is. Its arguments were built in this process, so the
pipeline measures them without first walking them for size (`CallPipeline.call_with_outcome`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.runner import modern_on_request
from mcp.server.session import ServerSession
from mcp.shared.dispatcher import DispatchContext, OnRequest
from mcp.shared.transport_context import TransportContext
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    RequestParams,
    RequestParamsMeta,
)
from mcp_types.version import LATEST_MODERN_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

if TYPE_CHECKING:
    from mcp_resili.server.app import ResiliServer


def _request_meta(params: Mapping[str, Any]) -> RequestParamsMeta | None:
    """A request's ``_meta`` as the SDK's kernel reads it: None when absent or malformed."""
    if "_meta" not in params:
        return None
    try:  # only ``_meta`` (the model ignores other fields): a call's arguments are not walked again
        return RequestParams.model_validate({"_meta": params["_meta"]}, by_name=False).meta
    except ValidationError:
        return None


class _ClientIdentity:
    """A connection's typed client identity, read from its envelope once while the envelope stays the same.

    A client stamps the same client info and capabilities on every request; the SDK's kernel reads
    them into models anew each time (`Connection.from_envelope`). Each request still gets a fresh
    `Connection` (its own state and exit stack), built as that factory builds it.
    """

    def __init__(self) -> None:
        self._envelope: tuple[str, Any, Any] | None = None
        self._template: Connection | None = None

    def connection(self, version: str, client_info: Any, capabilities: Any) -> Connection:
        """A born-ready `Connection` for a request with this envelope."""
        template = self._template
        if template is None or self._envelope != (version, client_info, capabilities):
            template = Connection.from_envelope(version, client_info, capabilities)
            # Copies: a client may change its dicts in place after this request.
            self._envelope = (version, copy.deepcopy(client_info), copy.deepcopy(capabilities))
            self._template = template
        connection = Connection(
            template.outbound, protocol_version=version, client_params=template.client_params
        )
        connection.client_capabilities = template.client_capabilities
        connection.initialized.set()
        return connection


class _LazySessionContext(ServerRequestContext[Any, Any]):
    """A request's context whose `ServerSession` (and the `Connection` under it) is built when first used.

    Only a call that sends something back to its client (a log message, progress) needs one; most
    calls never touch it, and building both was a twentieth of a scripted call. Copies made with
    `dataclasses.replace` get the session itself.
    """

    def __init__(self, new_session: Callable[[], ServerSession] | None = None, **fields: Any) -> None:
        self._new_session = new_session
        self._session: ServerSession | None = None
        super().__init__(**{"session": None, **fields})

    @property
    def session(self) -> ServerSession:
        """The request's session, built on first use."""
        if self._session is None:
            assert self._new_session is not None, "a request context without a session"
            self._session = self._new_session()
        return self._session

    @session.setter
    def session(self, session: ServerSession | None) -> None:
        self._session = session


def direct_on_request(server: ResiliServer, lifespan_state: Any) -> OnRequest:
    """The in-process `OnRequest` of ``server``: modern ``tools/call`` directly, the rest by the SDK."""
    sdk = modern_on_request(server.mcp, lifespan_state)
    only_ours = [server.answer_tools_call]
    identity = _ClientIdentity()

    async def handle(
        dctx: DispatchContext[TransportContext], method: str, params: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        envelope = (params or {}).get("_meta")
        if method != "tools/call" or params is None or not isinstance(envelope, dict):
            return await sdk(dctx, method, params)
        version = envelope.get(PROTOCOL_VERSION_META_KEY, LATEST_MODERN_VERSION)
        # Read at every request: a server may gain middleware (tracing) after the client connected.
        if version not in MODERN_PROTOCOL_VERSIONS or server.mcp.middleware != only_ours:
            return await sdk(dctx, method, params)
        well_formed = getattr(dctx, "well_formed", False)
        # A well-formed request's ``_meta`` holds no key the model types: it reads as the dict it is.
        meta = cast(RequestParamsMeta, dict(envelope)) if well_formed else _request_meta(params)
        connections: list[Connection] = []  # the one built with the session, if anything asked for it

        def new_session() -> ServerSession:
            connection = identity.connection(
                version, envelope.get(CLIENT_INFO_META_KEY), envelope.get(CLIENT_CAPABILITIES_META_KEY)
            )
            connections.append(connection)
            return ServerSession(dctx, connection, request_meta=meta if dctx.request_id is not None else None)

        ctx = _LazySessionContext(
            new_session,
            lifespan_context=lifespan_state,
            method=method,
            params=params,
            request_id=dctx.request_id,
            meta=meta,
            protocol_version=version,
        )

        async def by_the_sdk(_: ServerRequestContext[Any, Any]) -> Any:
            # Only a request the wire form leaves to the SDK (a version the surface does not
            # know) comes here, before anything was done: the SDK serves it from the start.
            return await sdk(dctx, method, params)

        result: Any
        try:
            if well_formed:  # built by our client from parts that pass the checks: no second check
                result = await server.answer_checked_call(ctx, in_process=True)
            else:
                result = await server.answer_tools_call(ctx, by_the_sdk)
        finally:
            for connection in connections:  # as the kernel's teardown (nothing registers on it)
                await connection.exit_stack.aclose()
        if isinstance(result, BaseModel):  # as the kernel dumps what a handler returns
            return result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return {} if result is None else dict(result)

    return handle
