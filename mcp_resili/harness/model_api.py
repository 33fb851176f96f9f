"""The model API an episode's agent reaches: the fault gateway before the model server or a real API.

`ModelApiHost` hosts, in the runner's process and on loopback only:

* the model server (`mcp_resili.modelserver`: the scripted agents behind both APIs), when a model of
  the run is scripted, handed the run's suite;
* one fault gateway (`mcp_resili.modelapi.ModelGateway`) per upstream (the model server, ``--base-url``,
  or a vendor's API), with the run's ``--llm-faults`` plan (none: it only keeps the ledger);
* for agent programs, a front with one path per live episode, ``/episodes/TOKEN/``: OPENAI_BASE_URL is
  that path plus ``/v1``, ANTHROPIC_BASE_URL the path. The front names the episode to the gateway
  (the ``x-mcp-resili-episode`` header, replacing any the client sent), which forwards it to the model
  server (which reads the task from it). Built-in models reach their gateway directly and name the
  episode themselves (`mcp_resili.client.providers.options.REQUEST_HEADERS`).

Every call's ledger entry (a `ModelFaultEvent`) goes to its episode's `EpisodeLink` as the call ends,
after the MCP events recorded before it (so the joined trace keeps the order things happened in).
For agent programs the front also enforces the run's limits per call: the cost cap and rate limits
(the run's `Allowance`, before the call) and the episode's token budget (after it, from the answer's
usage, or its size at 4 bytes a token when it reports none).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from aiohttp import web
from anyio.abc import TaskGroup
from multidict import CIMultiDict
from yarl import URL

from mcp_resili.client.limits import Allowance, BudgetExhaustedError
from mcp_resili.client.plan import RunPlan
from mcp_resili.client.pricing import CHARS_PER_TOKEN, PriceTable
from mcp_resili.client.providers import provider_of
from mcp_resili.client.session import StackedResources
from mcp_resili.constants import EPISODE_HEADER
from mcp_resili.faults.model_api import ModelFaultPlan
from mcp_resili.modelapi.formats import Api, ApiError, api_error, api_of
from mcp_resili.modelapi.gateway import CallWatch, GatewaySettings, ModelGateway
from mcp_resili.modelapi.hosting import bind, serve_app
from mcp_resili.modelapi.ledger import CallEpisode
from mcp_resili.modelapi.probe import probe_upstream
from mcp_resili.modelserver import ModelServer
from mcp_resili.trace import ModelFaultEvent, TraceEvent

logger = logging.getLogger(__name__)

#: The path prefix of every episode's model API.
PREFIX = "/episodes/"
#: Vendors' own endpoints, for hosted models without ``--base-url``.
VENDOR_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
#: The upstream key of the in-process model server.
MODEL_SERVER = "model-server"
#: Bytes of one answer kept to read its usage (past it, only the tail is kept).
USAGE_HEAD_BYTES = 64 * 1024
USAGE_TAIL_BYTES = 64 * 1024
#: Seconds the end of an episode waits for the ledger entries of its calls still under way.
SETTLE_SECONDS = 10.0
#: The plan of a gateway that only keeps the ledger (no ``--llm-faults``).
NO_FAULTS = ModelFaultPlan(name="none")


def upstream_key(model: str, base_url: str | None) -> str:
    """Which upstream a model's calls go to: ``--base-url``, the model server, or its vendor's API."""
    model = model.removeprefix("text:")
    if base_url is not None:
        return base_url
    provider = provider_of(model)
    return MODEL_SERVER if provider == "scripted" else VENDOR_URLS[provider]


def model_name(model: str) -> str:
    """The model name an agent program asks for (``MCP_RESILI_MODEL``): the spec less its vendor."""
    provider, _, name = model.partition(":")
    return name if provider in VENDOR_URLS else model


@dataclass
class Usage:
    """Tokens one call used: from the answer's own usage, else estimated from sizes."""

    input_tokens: int = 0
    output_tokens: int = 0


def usage_of(stream: bool, head: bytes, tail: bytes, *, contiguous: bool) -> Usage | None:
    """The usage an answer reports (OpenAI or Anthropic, whole or streamed), or None.

    ``head`` and ``tail`` are the answer's first and last bytes; ``contiguous`` when nothing was
    dropped between them (then they are the whole answer). A stream reports usage in its first event
    (Anthropic's ``message_start``) and its last ones; a whole answer is read only when whole.
    """
    if not stream:
        if not contiguous:
            return None
        try:
            body = json.loads(head + tail)
        except ValueError:
            return None
        return _usage_fields(body.get("usage") if isinstance(body, dict) else None, Usage())
    found = Usage()
    seen = False
    data = head + tail if contiguous else head + b"\n" + tail
    for raw in data.split(b"\n"):
        if not raw.startswith(b"data:"):
            continue
        try:
            data = json.loads(raw[5:])
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        if data.get("type") == "message_start" and isinstance(data.get("message"), dict):
            seen = _usage_fields(data["message"].get("usage"), found) is not None or seen
        elif isinstance(data.get("usage"), dict):
            seen = _usage_fields(data["usage"], found) is not None or seen
    return found if seen else None


def _usage_fields(usage: Any, into: Usage) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    known = False
    for names, attribute in (
        (("prompt_tokens", "input_tokens"), "input_tokens"),
        (("completion_tokens", "output_tokens"), "output_tokens"),
    ):
        for name in names:
            value = usage.get(name)
            if isinstance(value, int) and value >= 0:
                # Anthropic's message_delta counts output cumulatively: the largest figure is the total.
                setattr(into, attribute, max(getattr(into, attribute), value))
                known = True
    return into if known else None


class _Watch:
    """One model call of an episode (a `CallWatch`): its answer's head and tail, then its ledger entry."""

    def __init__(self, link: EpisodeLink, request_size: int) -> None:
        self.link = link
        self.request_size = request_size
        self.size = 0
        self._head = bytearray()
        self._tail = bytearray()
        #: Whether bytes between the head and the tail were dropped (a long answer).
        self._dropped = False
        self.event: ModelFaultEvent | None = None
        link.in_flight += 1
        if link.in_flight == 1:
            link.quiet = anyio.Event()

    def sent(self, data: bytes) -> None:
        self.size += len(data)
        room = USAGE_HEAD_BYTES - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            if len(self._tail) > USAGE_TAIL_BYTES:
                del self._tail[:-USAGE_TAIL_BYTES]
                self._dropped = True

    def recorded(self, event: ModelFaultEvent) -> None:
        self.event = event
        self.link.add_model_event(event)
        self.link.in_flight -= 1
        if self.link.in_flight == 0:
            self.link.quiet.set()

    def usage(self) -> Usage:
        """What the call used; estimated from the request's and the answer's sizes when not reported."""
        stream = self.event.stream if self.event is not None else False
        reported = (
            usage_of(stream, bytes(self._head), bytes(self._tail), contiguous=not self._dropped)
            if self.size
            else None
        )
        if reported is not None:
            return reported
        return Usage(self.request_size // CHARS_PER_TOKEN, self.size // CHARS_PER_TOKEN)


@dataclass
class EpisodeLink:
    """One live episode as the model-API side sees it: its header, its joined events, its tokens."""

    id: str
    #: The episode header's JSON (``{"id", "task", "trial", "seed", "fault_key"}``).
    header: str
    #: The model spec the episode plays (its calls' price and rate-limit key), and its upstream.
    model: str
    upstream: str
    #: The MCP events recorded so far for the episode (taken before each model event, for the order).
    pull_mcp: Callable[[], list[TraceEvent]] | None = None
    token: str | None = None
    #: The MCP events and model-API ledger entries, in the order they happened.
    events: list[TraceEvent] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    max_tokens: int | None = None
    in_flight: int = 0
    quiet: anyio.Event = field(default_factory=anyio.Event)
    #: Why the runner must end the episode now (``budget_stopped``, ``max_tokens``), once set.
    stop_reason: str | None = None
    stopped: anyio.Event = field(default_factory=anyio.Event)

    def __post_init__(self) -> None:
        self.quiet.set()

    def add_model_event(self, event: ModelFaultEvent) -> None:
        """A call's ledger entry, after whatever the MCP server recorded before it ended."""
        if self.pull_mcp is not None:
            self.events.extend(self.pull_mcp())
        self.events.append(event)

    @property
    def model_events(self) -> list[ModelFaultEvent]:
        """The ledger entries so far."""
        return [e for e in self.events if isinstance(e, ModelFaultEvent)]

    def stop(self, reason: str) -> None:
        """Ask the runner to end the episode (the first reason stands)."""
        if self.stop_reason is None:
            self.stop_reason = reason
            self.stopped.set()

    async def settled(self, seconds: float = SETTLE_SECONDS) -> None:
        """Wait (bounded) until no call of the episode is under way: every ledger entry is in."""
        with anyio.move_on_after(seconds):
            await self.quiet.wait()


#: The watch of the call the current front request is making (the gateway creates it in this task).
_CURRENT_WATCH: contextvars.ContextVar[list[_Watch] | None] = contextvars.ContextVar(
    "mcp_resili_current_watch", default=None
)


class ModelApiHost(StackedResources):
    """The model server, gateways and front of one run's session (see the module docstring).

    Enter it in the task that leaves it (it holds a task group).
    """

    def __init__(
        self,
        plan: RunPlan,
        *,
        front: bool,
        allowance: Allowance,
        limited: bool,
        prices: PriceTable,
        env: Mapping[str, str],
        host: str = "127.0.0.1",
    ) -> None:
        config = plan.config
        self.plan = plan
        self._front = front
        self._allowance = allowance
        self._limited = limited
        self._prices = prices
        self._env = env
        self._host = host
        self._fault_plan = plan.model_fault_plan or NO_FAULTS
        self.upstreams = {m: upstream_key(m, config.base_url) for m in config.models}
        self._gateways: dict[str, ModelGateway] = {}
        #: Built-in models: the URL of each upstream's gateway.
        self.gateway_urls: dict[str, str] = {}
        self.front_url: str | None = None
        self._by_id: dict[str, EpisodeLink] = {}
        self._by_token: dict[str, EpisodeLink] = {}

    @property
    def offline(self) -> bool:
        """Whether every model is the model server's (no real API, so no real key is needed)."""
        return all(u == MODEL_SERVER for u in self.upstreams.values())

    async def _open(self) -> None:
        group = await self._stack.enter_async_context(anyio.create_task_group())
        self._stack.callback(group.cancel_scope.cancel)  # left first: the servers stop, then the group
        resolved: dict[str, str] = {}
        for upstream in sorted(set(self.upstreams.values())):
            if upstream == MODEL_SERVER:
                resolved[upstream] = await self._start_model_server(group)
            else:
                await probe_upstream(upstream, self._env)  # unreachable, not a model API, key refused: exit 2
                resolved[upstream] = upstream
        for upstream, url in resolved.items():
            settings = GatewaySettings(
                upstream=url if upstream != MODEL_SERVER else f"{url}/v1",
                plan=self._fault_plan,
                seed=self.plan.config.seed,
                time_scale=self.plan.config.time_scale,
                watch=self._watch,
            )
            gateway = ModelGateway(settings)
            self._stack.push_async_callback(gateway.aclose)
            self._gateways[upstream] = gateway
            if not self._front:
                self.gateway_urls[upstream] = await self._serve_aiohttp(gateway.handle)
        if self._front:
            self.front_url = await self._serve_aiohttp(self._handle)

    async def _start_model_server(self, group: TaskGroup) -> str:
        suite = self.plan.suite
        server = ModelServer({suite.name: suite})
        server.prepare()
        sock = bind(self._host, 0)
        started = anyio.Event()
        urls: list[str] = []

        def on_started(url: str) -> None:
            urls.append(url)
            started.set()

        group.start_soon(lambda: serve_app(server.app, sock, on_started=on_started))
        with anyio.fail_after(30):
            await started.wait()
        return urls[0]

    async def _serve_aiohttp(self, handler: Callable[[web.BaseRequest], Any]) -> str:
        """Serve ``handler`` on a free loopback port until the host is left; its base URL."""
        sock = bind(self._host, 0)
        server = web.Server(handler, handler_cancellation=True, access_log=None)
        loop = asyncio.get_running_loop()
        listener = await loop.create_server(server, sock=sock)

        async def stop() -> None:
            with anyio.CancelScope(shield=True):
                listener.close()
                await server.shutdown(2.0)

        self._stack.push_async_callback(stop)
        host, port = sock.getsockname()[:2]
        return f"http://{host}:{port}"

    # --- episodes ----------------------------------------------------------------------------------

    def link(
        self,
        episode_id: str,
        named: Mapping[str, Any],
        model: str,
        *,
        token: str | None = None,
        pull_mcp: Callable[[], list[TraceEvent]] | None = None,
        max_tokens: int | None = None,
    ) -> EpisodeLink:
        """Open the model-API side of an episode (``named``: its header's fields)."""
        link = EpisodeLink(
            id=episode_id,
            header=json.dumps(dict(named), separators=(",", ":")),
            model=model,
            upstream=self.upstreams[model],
            pull_mcp=pull_mcp,
            token=token,
            max_tokens=max_tokens,
        )
        self._by_id[episode_id] = link
        if token is not None:
            self._by_token[token] = link
        return link

    def unlink(self, link: EpisodeLink) -> None:
        """Close the episode's side: later calls through its path get 404, its entries are no longer kept."""
        self._by_id.pop(link.id, None)
        if link.token is not None:
            self._by_token.pop(link.token, None)

    def base_url(self, link: EpisodeLink) -> str:
        """An agent program's model API base (Anthropic's form; OpenAI's adds ``/v1``)."""
        assert self.front_url is not None and link.token is not None
        return f"{self.front_url}{PREFIX}{link.token}"

    def _watch(self, episode: CallEpisode, body: bytes) -> CallWatch | None:
        link = self._by_id.get(episode.id)
        if link is None:
            return None
        watch = _Watch(link, len(body))
        holder = _CURRENT_WATCH.get()
        if holder is not None:
            holder.append(watch)
        return watch

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """The front: an episode's path, named to its upstream's gateway."""
        path = request.path
        token, _, rest = path.removeprefix(PREFIX).partition("/")
        link = self._by_token.get(token) if path.startswith(PREFIX) else None
        shape: Api = (
            "anthropic" if "/messages" in path or "anthropic-version" in request.headers else "openai"
        )
        if link is None:
            return await _answer(
                request,
                api_error(shape, 404, "no such episode: it ended, or this URL was never one", key="front"),
            )
        headers = CIMultiDict(request.headers)
        headers[EPISODE_HEADER] = link.header
        target = (
            URL(f"/{rest}")
            if not request.query_string
            else URL(f"/{rest}?{request.query_string}", encoded=True)
        )
        forwarded = request.clone(rel_url=target, headers=headers)
        api = api_of(f"/{rest}") if request.method == "POST" else None
        if api is None:
            return await self._gateways[link.upstream].handle(forwarded)
        return await self._model_call(forwarded, link, api)

    async def _model_call(self, request: web.BaseRequest, link: EpisodeLink, api: Api) -> web.StreamResponse:
        key = provider_of(link.model)
        limited = self._limited and key != "scripted"  # scripted agents are not limited (docs/providers.md)
        estimated = (request.content_length or 0) // CHARS_PER_TOKEN + 256
        if limited:
            try:
                if not await self._allowance.is_open():
                    raise BudgetExhaustedError("the run's --max-cost is reached")
                await self._allowance.admit(key, estimated)
            except BudgetExhaustedError:
                link.stop("budget_stopped")
                return await _answer(
                    request, api_error(api, 503, "the run's cost cap is reached", key="budget")
                )
        watches: list[_Watch] = []
        reset = _CURRENT_WATCH.set(watches)
        try:
            return await self._gateways[link.upstream].handle(request)
        finally:
            _CURRENT_WATCH.reset(reset)
            with anyio.CancelScope(shield=True):
                await self._charge(link, watches, key if limited else None, estimated)

    async def _charge(
        self, link: EpisodeLink, watches: list[_Watch], key: str | None, estimated: int
    ) -> None:
        """Count the call's tokens; charge it to the run's allowance (``key``) when limited."""
        for watch in watches:
            usage = watch.usage()
            link.input_tokens += usage.input_tokens
            link.output_tokens += usage.output_tokens
            if key is not None:
                cost = self._prices.cost(link.model, usage.input_tokens, usage.output_tokens) or 0.0
                await self._allowance.settle(key, estimated, usage.input_tokens + usage.output_tokens, cost)
        if link.max_tokens is not None and link.input_tokens + link.output_tokens >= link.max_tokens:
            link.stop("max_tokens")


async def _answer(request: web.BaseRequest, error: ApiError) -> web.StreamResponse:
    headers = CIMultiDict([("content-type", "application/json"), *error.headers])
    response = web.Response(status=error.status, body=error.body, headers=headers)
    await response.prepare(request)
    await response.write_eof()
    return response
