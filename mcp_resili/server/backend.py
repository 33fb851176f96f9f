"""Where a call goes after the fault decision: a simulated library, or a real upstream MCP server."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import anyio
import pydantic_core

from mcp_resili.faults import ToolOutcome
from mcp_resili.server.budget import larger_than, result_too_large
from mcp_resili.server.numbers import non_finite_number, non_finite_number_of_any
from mcp_resili.server.wire import result_json_text
from mcp_resili.tools import ToolFailure, ToolLibrary, ToolSpec, ToolState
from mcp_resili.trace.codes import RESULT_TOO_LARGE, TOOL_CRASHED

logger = logging.getLogger(__name__)

#: Arguments a tool marked inline (`ToolLibrary.inline`) may run on the event loop with: at most this
#: many JSON values, and this many characters in all their strings. Anything larger takes the thread.
INLINE_MAX_VALUES = 2_000
INLINE_MAX_CHARS = 100_000


class ToolBackend(Protocol):
    """Runs a validated call and reports its outcome; a tool's own failure is an error outcome."""

    @property
    def specs(self) -> Sequence[ToolSpec]:
        """The tools this backend serves."""
        ...

    async def run(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        state: ToolState,
        meta: Mapping[str, Any] | None = None,
    ) -> ToolOutcome:
        """Run the tool; ``meta`` is the request's ``_meta`` (a proxy forwards it)."""
        ...

    def run_inline(
        self, spec: ToolSpec, arguments: dict[str, Any], state: ToolState, json_bytes: int | None = None
    ) -> ToolOutcome | None:
        """The outcome of a call that can finish without awaiting (no timer armed), else None.

        ``json_bytes``: the arguments' JSON length when the caller has encoded them already.
        """
        ...


def small_arguments(arguments: Any, json_bytes: int | None = None) -> bool:
    """Whether ``arguments`` stay within `INLINE_MAX_VALUES` values and `INLINE_MAX_CHARS` characters.

    ``json_bytes``: the length of ``arguments`` as compact JSON (``pydantic_core.to_json``), if known.
    """
    # JSON text of n values is at least 2n - 1 bytes long (each value but the first brings a separator
    # or bracket of its own) and holds every key and string: short text settles both bounds at C speed.
    if json_bytes is None:
        with contextlib.suppress(pydantic_core.PydanticSerializationError, ValueError):
            json_bytes = len(pydantic_core.to_json(arguments))
    if json_bytes is not None and json_bytes < min(2 * INLINE_MAX_VALUES, INLINE_MAX_CHARS):
        return True
    return _counted_small(arguments)


def _counted_small(arguments: Any) -> bool:
    """`small_arguments` by counting; stops as soon as either bound is passed."""
    values, chars = 0, 0
    pending = [arguments]
    while pending:
        value = pending.pop()
        values += 1
        if values > INLINE_MAX_VALUES:
            return False
        if isinstance(value, str):
            chars += len(value)
            if chars > INLINE_MAX_CHARS:
                return False
        elif isinstance(value, dict):
            for key, item in value.items():
                chars += len(key) if isinstance(key, str) else 0
                pending.append(item)
            if chars > INLINE_MAX_CHARS:
                return False
        elif isinstance(value, list | tuple):
            pending.extend(value)
    return True


class SimulatedBackend:
    """A `ToolLibrary`'s deterministic simulators, run in a worker thread unless provably quick.

    A slow call must delay no other session (not even its pings), so tool code runs in a worker
    thread, except a tool the library marks inline (bounded work per argument) called with small
    arguments (`small_arguments`): it runs on the event loop, which saves the thread hop (most of a
    call's server cost in memory) and blocks the loop no longer than parsing the request did.
    A call abandoned at the server's time limit keeps its thread until the simulator returns; the
    episode's next call waits for it first, so no two calls ever touch one episode's state at once.
    Anything a simulator raises besides its declared `ToolFailure` becomes a `TOOL_CRASHED` outcome.
    """

    def __init__(self, library: ToolLibrary) -> None:
        self.library = library
        #: The largest result sent (bytes of JSON; None: any). A larger one is never encoded: that alone
        #: would hold the interpreter for as long as a megabyte takes, every other client waiting.
        self.result_limit: int | None = None
        #: Threads still running a call that was abandoned, keyed by ``id()`` of the episode's state.
        self._unfinished: dict[int, threading.Event] = {}

    @property
    def specs(self) -> Sequence[ToolSpec]:
        """The library's specs."""
        return self.library.specs

    async def run(
        self,
        spec: ToolSpec,
        arguments: dict[str, Any],
        state: ToolState,
        meta: Mapping[str, Any] | None = None,
    ) -> ToolOutcome:
        """Simulate the call; declared failures become error outcomes, anything else `TOOL_CRASHED`."""
        earlier = self._unfinished.pop(id(state), None)
        if earlier is not None and not earlier.is_set():
            try:
                await anyio.to_thread.run_sync(earlier.wait, abandon_on_cancel=True)
            except anyio.get_cancelled_exc_class():
                self._unfinished[id(state)] = earlier
                raise
        quick = self.run_inline(spec, arguments, state)
        if quick is not None:
            return quick
        done = threading.Event()

        def simulate() -> ToolOutcome:
            try:
                return self._simulate(spec, arguments, state)
            finally:
                done.set()

        try:
            return await anyio.to_thread.run_sync(simulate, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            if not done.is_set():  # the thread goes on: the episode's next call must wait for it
                self._unfinished[id(state)] = done
            raise

    def run_inline(
        self, spec: ToolSpec, arguments: dict[str, Any], state: ToolState, json_bytes: int | None = None
    ) -> ToolOutcome | None:
        """The call's outcome when it may run on the event loop now, else None (then `run` it).

        It may when the library marks the tool inline, its arguments are small, and no abandoned call
        of the episode still holds the state. Such a call never awaits, so no time limit can end it.
        """
        if spec.name not in self.library.inline or id(state) in self._unfinished:
            return None
        if not small_arguments(arguments, json_bytes):
            return None
        return self._simulate(spec, arguments, state)

    def _simulate(self, spec: ToolSpec, arguments: dict[str, Any], state: ToolState) -> ToolOutcome:
        try:
            result = self.library.simulate(spec.name, arguments, state)
            if self.result_limit is not None and larger_than(result, self.result_limit):
                message = result_too_large(spec.name, None, self.result_limit)
                return ToolOutcome(structured=None, error_code=RESULT_TOO_LARGE, message=message)
            if not self.library.fresh_results:
                # A result may share objects with the episode's state (a record the tool keeps): the
                # recorded event must show it as it was at this call, not as later calls change it. A
                # JSON round trip is the copy (what the wire does anyway), four times cheaper than
                # deepcopy.
                return ToolOutcome(structured=pydantic_core.from_json(_finite_json(result)))
            # A fresh result is recorded as it is; its text, made now, checks it is finite JSON.
            text = _finite_text(result)
        except ToolFailure as failure:
            return ToolOutcome(structured=None, error_code=failure.code, message=failure.message)
        except Exception as exc:  # a bug in the tool: the call fails, the server does not
            logger.exception("tool %s crashed on %.300r", spec.name, arguments)
            return ToolOutcome(
                structured=None,
                error_code=TOOL_CRASHED,
                message=f"{spec.name} failed unexpectedly ({type(exc).__name__}); the tool is at fault, "
                "not the arguments",
            )
        if verify_fresh_results:
            copy = pydantic_core.from_json(text)
            _check_fresh(spec.name, result, copy)
        return ToolOutcome(structured=result, text=text)


def _finite_text(result: Any) -> str:
    """The text of ``result`` (`result_json_text`); raises unless every number and string fits JSON."""
    text = result_json_text(result)
    # Written as bare NaN / Infinity: a text without those has none (with them, maybe only in a string:
    # the exact walk decides).
    if "NaN" in text or "Infinity" in text:
        _refuse_non_finite(result)
    # The text escapes every surrogate as \udXXX; a lone one, which UTF-8 cannot carry, fails here.
    if "\\ud" in text:
        pydantic_core.to_json(result)
    return text


def _finite_json(result: Any) -> bytes:
    """``result`` as JSON; ValueError when it holds NaN or an infinity (JSON has neither)."""
    try:
        encoded = pydantic_core.to_json(result)
    except Exception:
        # What cannot be encoded may contain itself: only a walk that such a value ends may name a NaN.
        _refuse_non_finite(result, non_finite_number_of_any)
        raise
    # The encoder writes NaN and infinities as bare NaN / Infinity, so a result without those bytes
    # has none (with them, maybe only in a text: the exact walk decides).
    if encoded.find(b"NaN") >= 0 or encoded.find(b"Infinity") >= 0:
        _refuse_non_finite(result)
    return encoded


#: When set (``MCP_RESILI_CHECK_FRESH_RESULTS=1``; the test suite sets it), every result of a library
#: that declares `ToolLibrary.fresh_results` is checked: a list or dict that anything else holds, or a
#: value JSON would change, raises `NotFreshError` out of the call, wherever the library's tools run.
verify_fresh_results = os.environ.get("MCP_RESILI_CHECK_FRESH_RESULTS") == "1"


class NotFreshError(AssertionError):
    """A library that declares fresh results returned a shared container or a non-JSON value."""


def _check_fresh(tool: str, result: Any, copy: Any) -> None:
    """Raise `NotFreshError` unless ``result`` is plain JSON whose lists and dicts nothing else holds.

    ``copy`` is ``result``'s JSON round trip, bound as ``result`` is (one name in the caller): a twin
    is held only by its parent and this walk, so a container held anywhere else (the tool state, the
    arguments, a cache) has a higher reference count than its twin (CPython's counts).
    """
    if type(result) is not dict or sys.getrefcount(result) != sys.getrefcount(copy):
        where: str | None = "(result)"
    else:
        where = _first_not_fresh(result, copy, "")
    if where is not None:
        raise NotFreshError(
            f"{tool} returned a result whose {where} is held elsewhere too or is not plain JSON, "
            "but its library declares fresh results"
        )


def _first_not_fresh(value: Any, twin: Any, path: str) -> str | None:
    if value.keys() != twin.keys() if type(value) is dict else len(value) != len(twin):
        return path or "(result)"
    # Indexing (not .items() or zip, whose tuples hold a reference) binds an item and its twin alike.
    for key in list(value) if type(value) is dict else range(len(value)):
        item = value[key]
        twin_item = twin[key]
        where = f"{path}/{key}"
        if type(item) is not type(twin_item):
            return where
        if type(item) is dict or type(item) is list:
            if sys.getrefcount(item) != sys.getrefcount(twin_item):
                return where
            found = _first_not_fresh(item, twin_item, where)
            if found is not None:
                return found
    return None


def _refuse_non_finite(result: Any, find: Callable[[Any], str | None] = non_finite_number) -> None:
    problem = find(result)
    if problem is not None:
        raise ValueError(f"non-finite number at {problem} in the result")
