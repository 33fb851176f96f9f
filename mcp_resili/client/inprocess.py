"""An MCP client for a server in this process, with a leaner hop than the SDK's direct dispatcher.

The server is served exactly as the SDK serves any in-process `Server` on a 2026-era connection: each
request goes to `modern_on_request` (a fresh per-request `Connection`, the server's middleware and
handlers, the protocol's request checks), and the client's `ClientSession` checks every answer. Only
the hop between the two is ours. The SDK's `DirectDispatcher` is general: either side may start first,
so every request waits for its peer to be ready; it opens a timer scope even without a timeout; and it
yields to the event loop after every request (a workaround for coverage tracing on Python 3.11). Here
the server is always ready, so a request just awaits the server's handler: about 10% less CPU per
episode (`bench/episode_cpu.py`). The answers are the same, error for error
(`tests/test_inprocess_client.py`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import anyio
import anyio.abc
import mcp_types as types
import sniffio
from mcp import Client
from mcp.client import session as mcp_client_session
from mcp.server import Server
from mcp.server.runner import modern_on_request
from mcp.shared.dispatcher import (
    CallOptions,
    Dispatcher,
    OnNotify,
    OnNotifyIntercept,
    OnRequest,
    ProgressFnT,
    run_notify_intercept,
)
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.shared.transport_context import TransportContext
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_PARAMS, REQUEST_TIMEOUT, RequestId
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from pydantic_core import to_jsonable_python

from mcp_resili.fastjson import jsonable
from mcp_resili.tools.validator import CompiledSchema

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: What the server's handlers see as their transport: in memory, and (2026-era) no server requests.
IN_PROCESS_TRANSPORT = TransportContext(kind="direct", can_send_request=False)

_Notify = Callable[[str, Mapping[str, Any] | None], Awaitable[None]]


class _RequestContext:
    """The `DispatchContext` of one request: its id, progress, and notifications back to the caller."""

    __slots__ = ("_cancel_requested", "_notify", "_on_progress", "request_id", "well_formed")

    transport = IN_PROCESS_TRANSPORT
    can_send_request = False
    message_metadata = None

    def __init__(
        self, request_id: RequestId | None, notify: _Notify, on_progress: ProgressFnT | None
    ) -> None:
        self.request_id = request_id
        self._notify = notify
        self._on_progress = on_progress
        self._cancel_requested: anyio.Event | None = None
        #: Whether `InProcessClient` built the request from checked parts (`well_formed_call`).
        self.well_formed = False

    @property
    def cancel_requested(self) -> anyio.Event:
        """Never set: cancelling the caller cancels the handler itself (it runs in the caller's task)."""
        if self._cancel_requested is None:
            self._cancel_requested = anyio.Event()
        return self._cancel_requested

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Hand a progress report to the caller's callback, if it gave one (its errors are logged)."""
        if self._on_progress is None:
            return
        try:
            await self._on_progress(progress, total, message)
        except Exception:
            logger.exception("progress callback raised")

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        """A notification to the peer that sent this request."""
        await self._notify(method, params)

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        """Refused: a 2026-era server sends no requests of its own."""
        raise NoBackChannelError(method)


class _Expired(Exception):
    """A request's deadline passed while its handler was suspended."""


def timed_if_suspended(handler: Coroutine[Any, Any, T], timeout: float) -> Awaitable[T]:
    """Await ``handler`` with a deadline ``timeout`` seconds from now, armed only if it suspends.

    A handler that answers without suspending (a quick tool) cannot be interrupted by any timer, so
    none is set for it: a timed scope set on each call cost a twenty-fifth of a scripted episode.
    From its first suspension on, the rest of the handler runs under `asyncio.timeout_at`, which can
    start in the middle (it keeps no stack of scopes, unlike anyio's), and `_Expired` means the
    deadline passed. Asyncio only.
    """
    deadline = asyncio.get_running_loop().time() + timeout
    return _FirstStep(handler, deadline)


class _FirstStep(Awaitable[T]):
    """Runs a coroutine's first step here; the rest, if any, under a deadline (`timed_if_suspended`)."""

    __slots__ = ("_coroutine", "_deadline")

    def __init__(self, coroutine: Coroutine[Any, Any, T], deadline: float) -> None:
        self._coroutine = coroutine
        self._deadline = deadline

    def __await__(self) -> Generator[Any, Any, T]:
        try:
            suspended_on = self._coroutine.send(None)
        except StopIteration as done:
            return cast(T, done.value)
        return (yield from _rest_before(self._coroutine, suspended_on, self._deadline).__await__())


async def _rest_before(coroutine: Coroutine[Any, Any, T], suspended_on: Any, deadline: float) -> T:
    timer = asyncio.timeout_at(deadline)
    try:
        async with timer:
            return await _Resumed(coroutine, suspended_on)
    except TimeoutError:
        if timer.expired():
            raise _Expired from None
        raise  # the handler's own


class _Resumed(Awaitable[T]):
    """A coroutine already suspended on ``suspended_on``, driven on by the task as ``await`` would."""

    __slots__ = ("_coroutine", "_suspended_on")

    def __init__(self, coroutine: Coroutine[Any, Any, T], suspended_on: Any) -> None:
        self._coroutine = coroutine
        self._suspended_on = suspended_on

    def __await__(self) -> Generator[Any, Any, T]:
        coroutine, suspended_on = self._coroutine, self._suspended_on
        while True:
            try:
                sent = yield suspended_on
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:  # cancellation, or the deadline: the handler sees it where it waits
                try:
                    suspended_on = coroutine.throw(exc)
                except StopIteration as done:
                    return cast(T, done.value)
            else:
                try:
                    suspended_on = coroutine.send(sent)
                except StopIteration as done:
                    return cast(T, done.value)


class InProcessDispatcher:
    """The client's `Dispatcher` to a server's `on_request` in this process.

    A request awaits the server's handler in the caller's task: cancelling the caller cancels it. A
    handler's `MCPError` reaches the caller as is; invalid parameters become ``INVALID_PARAMS`` and
    anything else ``INTERNAL_ERROR`` (its message kept only with ``raise_exceptions``), as over the
    wire. Notifications the server sends while handling a request reach the client's callbacks;
    a 2026-era server takes no notifications from the client, so those are dropped.
    """

    def __init__(self, on_server_request: OnRequest, *, raise_exceptions: bool = False) -> None:
        self._on_server_request = on_server_request
        self._raise_exceptions = raise_exceptions
        self._on_notify: OnNotify | None = None
        self._on_notify_intercept: OnNotifyIntercept | None = None
        self._next_id = 0
        self._closed = anyio.Event()
        #: Whether `run` runs on asyncio, where a request's timer is armed only if it suspends.
        self._on_asyncio = False

    async def run(
        self,
        on_request: OnRequest,
        on_notify: OnNotify,
        on_notify_intercept: OnNotifyIntercept | None = None,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Take the client's handlers and serve until `close` (once: a closed dispatcher stays closed)."""
        if self._closed.is_set():
            raise RuntimeError("InProcessDispatcher is closed; it cannot run again")
        self._on_notify = on_notify
        self._on_notify_intercept = on_notify_intercept
        self._on_asyncio = sniffio.current_async_library() == "asyncio"
        try:
            task_status.started()
            await self._closed.wait()
        finally:
            self._on_notify = None
            self._closed.set()

    def close(self) -> None:
        """Refuse requests from now on."""
        self._closed.set()

    async def send_raw_request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        opts: CallOptions | None = None,
        *,
        well_formed: bool = False,
    ) -> dict[str, Any]:
        """The server's answer to one request (see the class for errors).

        ``well_formed``: the request is known to pass the protocol's request checks (`well_formed_call`).
        """
        if self._closed.is_set():
            raise MCPError(code=CONNECTION_CLOSED, message="Connection closed")
        if self._on_notify is None:
            raise RuntimeError("InProcessDispatcher.send_raw_request called before run()")
        opts = opts or {}
        request_id = opts.get("request_id")
        if request_id is None:
            self._next_id += 1
            request_id = self._next_id
        context = _RequestContext(request_id, self._notify_client, opts.get("on_progress"))
        context.well_formed = well_formed
        timeout = opts.get("timeout")
        if timeout is None:
            return await self._answer(context, method, params)
        if self._on_asyncio:
            try:
                return await timed_if_suspended(self._answer(context, method, params), timeout)
            except _Expired:
                pass
        else:
            with anyio.CancelScope(deadline=anyio.current_time() + timeout) as scope:
                return await self._answer(context, method, params)
            assert scope.cancelled_caught  # only the deadline ends the scope without an answer
        raise MCPError(code=REQUEST_TIMEOUT, message=f"Timed out after {timeout}s waiting for {method!r}")

    async def _answer(
        self, context: _RequestContext, method: str, params: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        try:
            return await self._on_server_request(context, method, params)
        except MCPError:
            raise
        except ValidationError as exc:
            raise MCPError(code=INVALID_PARAMS, message="Invalid request parameters", data="") from exc
        except Exception as exc:
            if self._raise_exceptions:
                raise MCPError(code=INTERNAL_ERROR, message=str(exc)) from exc
            logger.exception("request handler raised")
            raise MCPError(code=INTERNAL_ERROR, message="Internal server error") from None

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        """Dropped: a 2026-era server defines no notifications from the client."""
        logger.debug("dropped client notification %r: the in-process server takes none", method)

    async def _notify_client(self, method: str, params: Mapping[str, Any] | None) -> None:
        on_notify = self._on_notify
        if on_notify is None or self._closed.is_set():
            logger.debug("dropped notification %r: the client is closed", method)
            return
        if run_notify_intercept(self._on_notify_intercept, method, params):
            return
        # Its context's notifications would go back to the server, which takes none (`notify`).
        await on_notify(_RequestContext(None, self.notify, None), method, params)


def call_params(name: str, arguments: dict[str, Any] | None, meta: Any) -> dict[str, Any]:
    """A ``tools/call``'s params as the SDK's request model dumps them (before the session's stamp)."""
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = to_jsonable_python(arguments)
    if meta is not None:
        params["_meta"] = jsonable(meta)
    return params


def well_formed_call(name: object, arguments: object, meta: object) -> bool:
    """Whether a ``tools/call`` `InProcessClient` builds from these passes the protocol's request checks.

    So it does by construction when the name is a string, the arguments a dict (their JSON form is an
    object) and the caller's ``_meta`` sets none of the keys the protocol types (a progress token, the
    reserved ``io.modelcontextprotocol/`` ones): the session stamps those itself. Held to the SDK's own
    checks by a property test (`tests/test_inprocess_well_formed.py`).
    """
    if type(name) is not str or not (arguments is None or type(arguments) is dict):
        return False
    if meta is None:
        return True
    return type(meta) is dict and all(
        type(key) is str and key != "progressToken" and not key.startswith(RESERVED_META_PREFIX)
        for key in meta
    )


#: The prefix of the ``_meta`` keys the protocol reserves (and types) for itself.
RESERVED_META_PREFIX = "io.modelcontextprotocol/"


#: How a request reaches the server, given its lifespan state (the SDK's `modern_on_request` by default).
OnRequestFactory = Callable[[Any], OnRequest]


def in_process_connector(
    server: Server[Any], on_request: OnRequestFactory | None = None
) -> Callable[[AsyncExitStack, str, bool], Awaitable[Dispatcher[Any]]]:
    """How `InProcessClient` connects: the server's lifespan entered, an `InProcessDispatcher` to it."""

    async def connect(exit_stack: AsyncExitStack, mode: str, raise_exceptions: bool) -> Dispatcher[Any]:
        lifespan_state = await exit_stack.enter_async_context(server.lifespan(server))
        if on_request is None:
            answer = modern_on_request(server, lifespan_state)
        else:
            answer = on_request(lifespan_state)
        dispatcher = InProcessDispatcher(answer, raise_exceptions=raise_exceptions)
        exit_stack.callback(dispatcher.close)
        return dispatcher

    return connect


@dataclass
class InProcessClient(Client):
    """`mcp.Client` for an in-process `Server`, connected by `InProcessDispatcher`.

    Everything else is the SDK's client. The handshake-era ``mode="legacy"`` (stream framing) and any
    other target keep the SDK's own connection, and so does an SDK whose client is built otherwise.
    """

    #: How requests reach the server (given its lifespan state); the SDK's own serving by default.
    on_request: OnRequestFactory | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        #: The session's stamp and the ``_meta`` entries it sets on a ``tools/call`` (`_envelope`).
        self._stamped: tuple[Any, dict[str, Any]] | None = None
        if isinstance(self.server, Server) and self.mode != "legacy" and hasattr(self, "_connect"):
            self._connect = in_process_connector(self.server, self.on_request)

    def _envelope(self, session: Any) -> dict[str, Any]:
        """The ``_meta`` entries the session's stamp sets on every ``tools/call``, read once per stamp.

        The stamp also makes HTTP headers from the tool's name and arguments, which an in-process
        request has no use for. Its ``_meta`` entries (the protocol version, the client's info and
        capabilities, a log level) do not depend on the call, so they are read once from a request
        that names no tool, and read again when the session changes its stamp (a new negotiation).
        """
        stamp = session._stamp  # private in the SDK
        if self._stamped is None or self._stamped[0] is not stamp:
            probe: dict[str, Any] = {"method": "tools/call", "params": {}}
            stamp(probe, {})
            self._stamped = (stamp, dict(probe["params"].get("_meta", {})))
        return self._stamped[1]

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        progress_callback: ProgressFnT | None = None,
        *,
        input_responses: types.InputResponses | None = None,
        request_state: str | None = None,
        meta: types.RequestParamsMeta | None = None,
    ) -> types.CallToolResult:
        """`Client.call_tool`, with one build and one check of the messages on a 2026-era connection.

        The SDK's path builds the request as a model and dumps it, then checks the answer twice
        (against the protocol surface, then as a model). Here the request is the dict the dump would
        give (arguments copied to their JSON form, the session's stamp on ``_meta``) and the answer is
        checked once, as the model the caller gets; the tool's output schema is checked as the SDK
        does. A first answer that asks for input goes on through the SDK's input-required driver; a
        call that seeds input, a handshake-era session or a client with extensions takes the SDK's
        path from the start. The answers are the same (`tests/test_inprocess_client.py`).
        """
        session = self.session
        dispatcher = session._dispatcher  # private in the SDK
        lean = (
            input_responses is None
            and request_state is None
            and session.protocol_version in MODERN_PROTOCOL_VERSIONS
            and not self.extensions
        )
        if not lean or not isinstance(dispatcher, InProcessDispatcher):
            return await super().call_tool(
                name,
                arguments,
                read_timeout_seconds,
                progress_callback,
                input_responses=input_responses,
                request_state=request_state,
                meta=meta,
            )
        params = call_params(name, arguments, meta)
        well_formed = well_formed_call(name, arguments, meta)
        opts: CallOptions = {}
        if well_formed:  # no key of the caller's that the stamp sets: its envelope, added as it adds it
            params.setdefault("_meta", {}).update(self._envelope(session))
        else:
            session._stamp({"method": "tools/call", "params": params}, opts)
        timeout = read_timeout_seconds if read_timeout_seconds is not None else self.read_timeout_seconds
        if timeout is not None:
            opts["timeout"] = timeout
        if progress_callback is not None:
            opts["on_progress"] = progress_callback
        raw = await dispatcher.send_raw_request("tools/call", params, opts, well_formed=well_formed)
        first = _call_result(session._call_tool_adapter, raw)
        if isinstance(first, types.CallToolResult):
            if not first.is_error and not _conforms_as_known(session, name, first):
                await session.validate_tool_result(name, first)
            return first

        async def retry(
            responses: types.InputResponses | None, state: str | None
        ) -> types.CallToolResult | types.InputRequiredResult | types.Result:
            return await session.call_tool(
                name,
                arguments,
                read_timeout_seconds=read_timeout_seconds,
                progress_callback=progress_callback,
                input_responses=responses,
                request_state=state,
                meta=meta,
                allow_input_required=True,
                allow_claimed=True,
            )

        # The server asks for input (2026's sampling or elicitation round): the SDK's driver answers.
        result = await self._drive_input_required(first, retry)
        if not isinstance(result, types.CallToolResult):  # a claimed shape: this client claims none
            raise MCPError(code=INTERNAL_ERROR, message=f"{name} answered with an unclaimed result shape")
        return result


def _call_result(adapter: Any, raw: dict[str, Any]) -> Any:
    """``adapter.validate_python(raw, by_name=False)``, the session's reading of a call's answer.

    The SDK's own adapter reads a ``CallToolResult`` or an ``InputRequiredResult``. An answer that
    does not say ``input_required`` can only be the first: it is read as that alone, which spares
    trying the second. A failure is read again by the adapter, for the error it gives.
    """
    if adapter is _SDK_CALL_RESULT and raw.get("resultType") != "input_required":
        try:
            return _read_call_tool_result(raw, by_name=False)
        except ValidationError:
            pass
    return adapter.validate_python(raw, by_name=False)


_SDK_CALL_RESULT = getattr(mcp_client_session, "_CallToolResultAdapter", None)  # private in the SDK
_read_call_tool_result = types.CallToolResult.__pydantic_validator__.validate_python


def _conforms_as_known(session: Any, name: str, result: types.CallToolResult) -> bool:
    """Whether the session's own check of ``result`` would pass, known without running that check.

    True only when the session already holds ``name``'s output schema (it lists no tools again) and
    either the tool has none or ``result``'s structured content passes the compiled validator the
    session keeps for it (`compile_output_checks` fills that cache). Otherwise the session's
    ``validate_tool_result`` decides, with its own refreshes and errors.
    """
    schemas = getattr(session, "_tool_output_schemas", None)  # private in the SDK
    if not isinstance(schemas, dict) or name not in schemas:
        return False
    if schemas[name] is None:
        return True
    validators = getattr(session, "_tool_output_validators", None)
    validator = validators.get(name) if isinstance(validators, dict) else None
    return (
        isinstance(validator, CompiledSchema)
        and result.structured_content is not None
        and validator.is_valid(result.structured_content)
    )
