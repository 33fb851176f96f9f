"""Classified retries for model APIs, with exponential backoff that honours ``retry-after``.

Only model-API calls are retried here. Tool results (including injected faults) go back to the agent
untouched: recovering from them is what the benchmark measures.

A provider turns each failed attempt into a `ProviderFailure` with a ``kind``:

* ``rate_limit`` (429), ``overloaded`` (5xx, 529), ``timeout`` (408, client timeouts), ``connection``:
  retried, waiting ``retry-after`` when the server sent one, else ``base_delay * 2**n`` (capped);
* ``context``: the conversation no longer fits; the episode ends as ``context_exceeded`` (the agent's
  doing, so it is scored);
* ``fatal`` (bad key, unknown model, malformed request): not retried.

When retries run out, or the failure is fatal, the call raises `InfrastructureError`: the episode is
void and excluded from agent scores.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

import anyio

from mcp_resili.agents.model import HARNESS_WAIT, ContextWindowExceededError, InfrastructureError
from mcp_resili.client.providers.keys import API_KEY_ENV, redact

logger = logging.getLogger(__name__)

FailureKind = Literal["rate_limit", "overloaded", "timeout", "connection", "context", "fatal"]
RETRYABLE: frozenset[FailureKind] = frozenset({"rate_limit", "overloaded", "timeout", "connection"})

#: Phrases providers use when a request no longer fits the context window (OpenAI, Anthropic, vLLM).
CONTEXT_MARKERS = (
    "context_length",
    "context length",
    "context window",
    "maximum context length",
    "prompt is too long",
    "too many tokens",
)
#: Sleeps for the given seconds; tests inject one that records and returns at once.
Sleeper = Callable[[float], Awaitable[None]]
T = TypeVar("T")


class ProviderFailure(Exception):
    """One failed attempt at a model API, classified."""

    def __init__(
        self, kind: FailureKind, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        # Provider messages end up in traces and logs: strip anything key-shaped first.
        super().__init__(redact(message))
        self.kind = kind
        self.status = status
        self.retry_after = retry_after

    def __str__(self) -> str:
        status = f"HTTP {self.status} " if self.status is not None else ""
        return f"{status}{self.kind}: {self.args[0]}"


def classify_status(status: int, message: str = "") -> FailureKind:
    """The failure kind of an HTTP error answer."""
    lowered = message.lower()
    if status == 429:
        return "rate_limit"
    if status == 408:
        return "timeout"
    if status in (400, 413) and any(marker in lowered for marker in CONTEXT_MARKERS):
        return "context"
    if status >= 500:
        return "overloaded"
    return "fatal"


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms``, or ``retry-after`` (seconds or an HTTP date)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    parsed = email.utils.parsedate_to_datetime(raw) if raw.strip() else None
    if parsed is None:
        return None
    return max(0.0, parsed.timestamp() - (time.time() if now is None else now))


@dataclass(frozen=True)
class RetryPolicy:
    """How many attempts a model call gets and how long to wait between them."""

    max_attempts: int = 6
    base_delay: float = 1.0
    max_delay: float = 60.0
    #: A ``retry-after`` longer than this is capped (a provider asking for an hour would stall the run).
    max_retry_after: float = 300.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError(f"delays must be non-negative, got {self.base_delay}, {self.max_delay}")

    def delay(self, attempt: int, failure: ProviderFailure) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if failure.retry_after is not None:
            return min(failure.retry_after, self.max_retry_after)
        return float(min(self.max_delay, self.base_delay * 2 ** (attempt - 1)))


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    sleeper: Sleeper = anyio.sleep,
    what: str = "model call",
    on_retry: Callable[[ProviderFailure, float], None] | None = None,
) -> T:
    """Run ``attempt`` until it succeeds, retrying retryable `ProviderFailure` s per ``policy``.

    Raises `ContextWindowExceededError` for ``context`` failures and `InfrastructureError` for fatal
    ones or when attempts run out.
    """
    wait = HARNESS_WAIT.get()
    for number in range(1, policy.max_attempts + 1):
        try:
            result = await attempt()
        except ProviderFailure as failure:
            if failure.kind == "context":
                raise ContextWindowExceededError(f"{what}: {failure}") from None
            if failure.kind not in RETRYABLE:
                raise InfrastructureError(f"{what} failed (not retried): {failure}") from None
            if number == policy.max_attempts:
                raise InfrastructureError(
                    f"{what} failed after {policy.max_attempts} attempts: {failure}"
                ) from None
            if wait is not None and wait.overdue():
                raise InfrastructureError(
                    f"{what} failed after the episode's time limit ran out (not retried): {failure}"
                ) from None
            delay = policy.delay(number, failure)
            logger.info("%s: attempt %d failed (%s); retrying in %.2fs", what, number, failure, delay)
            if on_retry is not None:
                on_retry(failure, delay)
            if wait is not None:  # until an attempt succeeds, the episode waits on the provider
                wait.hold(f"{what} was being retried ({failure})")
            await sleeper(delay)
        else:
            if wait is not None:
                wait.reason = None
            return result
    raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover


def explain_failure(detail: str) -> str:
    """A provider failure as a person reads it: what happened and what to check.

    ``detail`` is an episode's infrastructure-error detail (as `with_retries` words it, e.g.
    ``openai:gpt-4o failed (not retried): HTTP 401 fatal: Incorrect API key``).
    """
    provider = detail.partition(":")[0]
    variable = API_KEY_ENV.get(provider, "the provider's API key variable")
    hints = {
        "HTTP 401": f"401 from the provider: check the API key ({variable})",
        "HTTP 403": "403 from the provider: the key may not use this model or endpoint",
        "HTTP 404": "404 from the provider: check the model name and --base-url",
        "HTTP 429": "429 from the provider after every retry: "
        "lower --concurrency or set --requests-per-minute",
        " connection: ": "the provider could not be reached: check --base-url and the network",
        " timeout: ": "the provider timed out after every retry: check --base-url or raise the timeout",
    }
    for marker, hint in hints.items():
        if marker in detail:
            return f"{hint} ({detail})"
    return detail or "no detail was recorded"
