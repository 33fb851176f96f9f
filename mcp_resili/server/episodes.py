"""Which episode a request belongs to, and the table of live episodes.

One episode per MCP session, on every transport:

1. a request that names its episode (``_meta["mcp-resili/episode"]``, else the ``x-mcp-resili-episode``
   HTTP header) belongs to that episode: our runner plays many episodes over one connection this way;
2. a Streamable HTTP session (handshake era, ``mcp-session-id``) is one episode;
3. a stdio (or in-memory) connection is one episode (``serve --episode ID`` names it);
4. an HTTP request with neither (the stateless 2026-07-28 era) belongs to the episode ``serve --episode``
   pins, else to the episode whose server-minted handle it passes as a tool argument (`HANDLE_ARGUMENT`,
   obtained from the ``start_episode`` tool; `mcp_resili.server.handles`). Sharing one fallback episode
   would mix every client's state, ordinals and fault draws.

An episode belongs to whoever opened it (`ClientIdentity`: the auth principal, and the stdio connection,
the HTTP client cookie or the HTTP session). A request naming someone else's episode is refused
(`NotYourEpisodeError`). Where the server cannot tell clients apart (stateless HTTP, no token, no cookie)
only a server-minted handle opens an episode that already exists. A handle is bound to the principal
that obtained it (an HMAC under a per-process secret), so a leaked handle is inert for anyone else.

An episode's fault key is ``TASK/TRIAL`` (``untasked/TRIAL`` without a task): exactly the key of trial
TRIAL of TASK in ``mcp-resili run``, so an external agent meets the same fault draws as our runner. The
trial is the one the request names, else the server's ``--trial``, else the number of earlier episodes of
that task on this server. Every trace header records seed, task and trial.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import secrets
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError

from mcp_resili.constants import EPISODE_HEADER, META_EPISODE
from mcp_resili.server.episode import Episode
from mcp_resili.tasks.model import Task

__all__ = [
    "EPISODE_HEADER",
    "ClientIdentity",
    "EpisodeRefusedError",
    "EpisodeRequest",
    "EpisodeTable",
    "HandleError",
    "NoEpisodeError",
    "NotYourEpisodeError",
    "client_identity",
    "episode_request",
    "fault_key_of",
]

#: Episodes kept in memory at once; past it the least recently used one is closed (its trace file,
#: if any, is complete) and later calls naming it are refused.
MAX_EPISODES = 4096
#: Seconds without a call after which an episode is closed (the SDK's HTTP session idle timeout).
EPISODE_IDLE_SECONDS = 30 * 60.0
#: Ids of closed episodes remembered (so that a call to one is refused rather than starting afresh).
MAX_CLOSED = 100_000
#: Longest episode id accepted (it names the trace file).
MAX_EPISODE_ID = 512
#: Fault-key prefix of episodes bound to no task.
UNTASKED = "untasked"
_LIFESPAN_KEY = "mcp-resili/connection"
#: Lifespan key of a stdio or in-memory connection's client identity (one per connection).
_LIFESPAN_CLIENT = "mcp-resili/client"
#: ASGI scope keys the HTTP layer fills (`mcp_resili.server.transports`): the hash of the bearer token
#: the request presented, and the client's cookie (a server-minted id; see `EpisodeTable.mint_client`).
SCOPE_PRINCIPAL = "mcp-resili/principal"
SCOPE_CLIENT = "mcp-resili/client"
#: Name of the cookie that tells stateless HTTP clients apart (clients that keep cookies: httpx, the SDK).
CLIENT_COOKIE = "mcp-resili-client"
#: Prefix of a server-minted episode handle (``eh-RANDOM-TAG``).
HANDLE_PREFIX = "eh-"
#: Handles remembered after their episode closed, to say "expired" rather than "unknown".
MAX_HANDLES = 100_000
_MISSING = (
    "no episode for this request: a stateless HTTP request must name its episode in "
    f'_meta["{META_EPISODE}"] or the {EPISODE_HEADER} header (an id, or {{"id", "task", "trial", '
    '"seed"}), or use a Streamable HTTP session (mcp-session-id)'
)


@dataclass(frozen=True)
class EpisodeRequest:
    """What a client said (or we inferred) about the episode a call belongs to."""

    id: str
    task: str | None = None
    trial: int | None = None
    seed: int | None = None
    #: An explicit fault key (our runner sends ``TASK/TRIAL``); None derives it from task and trial.
    fault_key: str | None = None


def fault_key_of(task: str | None, trial: int) -> str:
    """The fault key of trial ``trial`` of ``task``: the runner's key, so both meet the same draws."""
    return f"{task if task is not None else UNTASKED}/{trial}"


class NoEpisodeError(MCPError):
    """An HTTP request without a session that names no episode (invalid params)."""

    def __init__(self) -> None:
        super().__init__(types.INVALID_PARAMS, _MISSING)


def _invalid(message: str) -> MCPError:
    return MCPError(types.INVALID_PARAMS, message)


class EpisodeRefusedError(MCPError):
    """A request refused because of the episode it names; ``code`` is the one-word reason.

    A ``tools/call`` gets it as an ``isError`` result (the model can read it and act), any other
    request as a JSON-RPC error (invalid params).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(types.INVALID_PARAMS, message)
        self.reason = code


class NotYourEpisodeError(EpisodeRefusedError):
    """The request names an episode another client opened."""

    def __init__(self, episode_id: str) -> None:
        super().__init__(
            "NOT_YOUR_EPISODE",
            f"episode {episode_id!r} belongs to another client: it cannot be joined. Start an episode "
            "of your own (a new id, or the start_episode tool) and use that.",
        )


class HandleError(EpisodeRefusedError):
    """A missing, unknown, expired or forged episode handle."""


class SeedRefusedError(EpisodeRefusedError):
    """A client chose a seed or fault key on a server that decides them itself."""

    def __init__(self, what: str, given: object, own: object) -> None:
        super().__init__(
            "CLIENT_SEED_REFUSED",
            f"this server decides seeds and fault keys itself (its {what} is {own!r}); the episode asked "
            f"for {given!r}: leave {what} out",
        )


@dataclass(frozen=True)
class ClientIdentity:
    """Who sent a request, as far as the server can tell.

    ``principal``: a hash of the bearer token the request presented (None without one).
    ``channel``: its stdio or in-memory connection, its HTTP client cookie, else its HTTP session
    (None for a stateless HTTP request that carries neither).
    """

    principal: str | None = None
    channel: str | None = None

    def may_open(self, owner: ClientIdentity) -> bool:
        """Whether this client may use an episode ``owner`` opened, named by a client-chosen id.

        Another principal never may. Where either side has a channel, the channels must match. Two
        stateless requests are told apart only by their principal: without a token, never (only a
        server-minted handle opens an existing episode then).
        """
        if self.principal != owner.principal:
            return False
        if self.channel is not None or owner.channel is not None:
            return self.channel == owner.channel
        return self.principal is not None


def client_identity(ctx: ServerRequestContext[Any]) -> ClientIdentity:
    """The identity of the client that sent ``ctx`` (see `ClientIdentity`)."""
    request = ctx.request
    scope = getattr(request, "scope", None)
    if scope is not None and isinstance(scope, Mapping):  # in process there is none: no ABC check
        principal = scope.get(SCOPE_PRINCIPAL)
        channel = scope.get(SCOPE_CLIENT)
        if channel is None:
            headers = getattr(request, "headers", None)
            session = headers.get("mcp-session-id") if headers is not None else None
            channel = f"session:{session}" if session else None
        return ClientIdentity(
            principal=str(principal) if principal else None,
            channel=str(channel) if channel else None,
        )
    lifespan = ctx.lifespan_context
    if isinstance(lifespan, dict):
        channel = lifespan.get(_LIFESPAN_CLIENT)
        if channel is None:  # this connection's first request: it names itself once
            channel = lifespan[_LIFESPAN_CLIENT] = f"conn:{uuid.uuid4().hex}"
        return ClientIdentity(channel=str(channel))
    return ClientIdentity()


_EPISODE_KEYS = frozenset({"id", "task", "trial", "seed", "fault_key"})
#: Where an episode named in a request's ``_meta`` is, in errors about it.
_META_WHERE = f"_meta[{META_EPISODE!r}]"


def parse_episode(raw: object, where: str) -> EpisodeRequest:
    """An episode named by ``raw`` (an id, or ``{"id", "task", "trial", "seed", "fault_key"}``)."""
    if isinstance(raw, str):
        return EpisodeRequest(id=_checked_id(raw, where))
    if type(raw) is not dict and not isinstance(raw, Mapping):
        raise _invalid(f"{where} must be an episode id or an object with an 'id', got {raw!r:.100}")
    episode_id = _checked_id(raw.get("id"), f"{where}.id")
    if not _EPISODE_KEYS.issuperset(raw):
        unknown = sorted(set(raw) - _EPISODE_KEYS)
        raise _invalid(f"{where} has unknown keys {unknown}; known: id, task, trial, seed, fault_key")
    task, fault_key, seed, trial = raw.get("task"), raw.get("fault_key"), raw.get("seed"), raw.get("trial")
    if (
        (task is None or type(task) is str)
        and (fault_key is None or type(fault_key) is str)
        and (seed is None or type(seed) is int)
        and (trial is None or (type(trial) is int and trial >= 0))
    ):  # every call names its episode: the well-formed case without the loops that explain errors
        return EpisodeRequest(id=episode_id, task=task, trial=trial, seed=seed, fault_key=fault_key)
    for name, value in (("task", task), ("fault_key", fault_key)):
        if value is not None and not isinstance(value, str):
            raise _invalid(f"{where}.{name} must be a string, got {value!r:.100}")
    for name, value, minimum in (("seed", seed, None), ("trial", trial, 0)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum)
        ):
            what = "a non-negative integer" if minimum is not None else "an integer"
            raise _invalid(f"{where}.{name} must be {what}, got {value!r:.100}")
    return EpisodeRequest(id=episode_id, task=task, trial=trial, seed=seed, fault_key=fault_key)


def _checked_id(episode_id: object, where: str) -> str:
    if not isinstance(episode_id, str) or not episode_id or len(episode_id) > MAX_EPISODE_ID:
        raise _invalid(f"{where} must be a non-empty string of at most {MAX_EPISODE_ID} characters")
    return episode_id


def _from_header(value: str) -> EpisodeRequest:
    """The episode header: a plain id, or the JSON object form (for clients that cannot set ``_meta``)."""
    if not value.lstrip().startswith("{"):
        return parse_episode(value, EPISODE_HEADER)
    try:
        raw = json.loads(value)
    except ValueError:
        raise _invalid(f"the {EPISODE_HEADER} header is neither an id nor a JSON object") from None
    return parse_episode(raw, EPISODE_HEADER)


def named_episode(ctx: ServerRequestContext[Any]) -> EpisodeRequest | None:
    """The episode a request names in ``_meta`` or the episode header, if it names one."""
    raw = (ctx.meta or {}).get(META_EPISODE)
    if raw is not None:
        return parse_episode(raw, _META_WHERE)
    headers = getattr(ctx.request, "headers", None)
    named = headers.get(EPISODE_HEADER) if headers is not None else None
    return _from_header(str(named)) if named else None


def episode_request(
    ctx: ServerRequestContext[Any], connection_episode: str | None = None, *, pinned: bool = False
) -> EpisodeRequest:
    """The episode of a request: ``_meta``, the episode header, the HTTP session, else the connection.

    ``connection_episode`` names the episode of a stdio or in-memory connection (``serve --episode``);
    by default each connection gets a fresh random id. With ``pinned`` it is also the episode of every
    HTTP request that names none (a single agent's server). Raises `MCPError` (invalid params) for a
    malformed episode, or an HTTP request that has no session and names no episode (`NoEpisodeError`:
    the handle mode's business).
    """
    named = named_episode(ctx)
    if named is not None:
        return named
    headers = getattr(ctx.request, "headers", None)
    if headers is not None:
        if pinned and connection_episode is not None:
            return EpisodeRequest(id=connection_episode)
        session = headers.get("mcp-session-id")
        if session:
            return EpisodeRequest(id=str(session))
        raise NoEpisodeError
    # stdio and in-memory: one lifespan context per connection, so one episode per connection.
    lifespan = ctx.lifespan_context
    if not isinstance(lifespan, dict):
        raise NoEpisodeError
    connection = lifespan.setdefault(_LIFESPAN_KEY, connection_episode or f"conn-{uuid.uuid4().hex[:12]}")
    return EpisodeRequest(id=str(connection))


@dataclass
class _Live:
    episode: Episode
    request: EpisodeRequest
    #: Who opened it (None: no check, e.g. an episode the server pinned for everyone).
    owner: ClientIdentity | None = None
    #: The handle minted for it, if it was opened by ``start_episode``.
    handle: str | None = None


def _b32(data: bytes) -> str:
    return base64.b32encode(data).decode("ascii").rstrip("=").lower()


@dataclass
class HandleMint:
    """Server-minted ids: episode handles and HTTP client cookies, unguessable and verifiable.

    A value is ``PREFIX + RANDOM + "-" + TAG``; the tag is an HMAC (per-process secret) over the
    random part and, for a handle, the principal it was issued to: a forged value, one of an earlier
    server process, or a handle presented by another principal fails `verify`.
    """

    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    def _tag(self, kind: str, random_part: str, principal: str | None) -> str:
        message = f"{kind}|{random_part}|{principal or ''}".encode()
        return _b32(hmac.new(self.secret, message, hashlib.sha256).digest()[:10])

    def mint(self, kind: str, prefix: str, principal: str | None = None) -> str:
        """A fresh value of ``kind`` (bound to ``principal``)."""
        random_part = _b32(secrets.token_bytes(10))
        return f"{prefix}{random_part}-{self._tag(kind, random_part, principal)}"

    def verify(self, kind: str, prefix: str, value: str, principal: str | None = None) -> bool:
        """Whether ``value`` was minted here as ``kind`` for ``principal``."""
        if not value.startswith(prefix):
            return False
        random_part, _, tag = value[len(prefix) :].partition("-")
        if not random_part or not tag:
            return False
        return hmac.compare_digest(tag, self._tag(kind, random_part, principal))


def looks_like_handle(value: object) -> bool:
    """Whether ``value`` has the form of an episode handle (minted here or not)."""
    return isinstance(value, str) and value.startswith(HANDLE_PREFIX)


class EpisodeTable:
    """Live episodes by id, created on first use, closed on request, when idle, or past the bound.

    A closed episode's id is remembered: calls naming it are refused (`MCPError`), never given a
    fresh episode that would replay its draws from ordinal 0.
    """

    def __init__(
        self,
        default_seed: int,
        max_episodes: int = MAX_EPISODES,
        *,
        idle_seconds: float = EPISODE_IDLE_SECONDS,
        trial: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        client_seeds: bool = True,
    ) -> None:
        if max_episodes < 1 or idle_seconds <= 0:
            raise ValueError(f"need max_episodes >= 1, idle_seconds > 0; got {max_episodes}, {idle_seconds}")
        if trial is not None and trial < 0:
            raise ValueError(f"trial must be >= 0, got {trial}")
        self.default_seed = default_seed
        self.max_episodes = max_episodes
        self.idle_seconds = idle_seconds
        #: The trial every episode plays unless it names its own (``serve --trial``).
        self.trial = trial
        self._clock = clock
        self._live: OrderedDict[str, _Live] = OrderedDict()  # least recently used first
        #: No live episode expires before this time (`_expire` skips its walk until then).
        self._first_expiry = -math.inf
        self._closed: OrderedDict[str, str] = OrderedDict()  # id -> why
        self._started: Counter[str | None] = Counter()  # episodes started per task
        #: Whether a client may choose its episode's seed and fault key (``serve`` may forbid it).
        self.client_seeds = client_seeds
        #: Server-minted handles and cookies; handle -> episode id (kept past the episode's end).
        self.mint = HandleMint()
        self._handles: OrderedDict[str, str] = OrderedDict()
        #: Client channel -> the episode it started last (what its un-named listings show).
        self._latest: OrderedDict[str, str] = OrderedDict()
        #: (client, task) -> the live episode whose handle a fault revoked: ``start`` resumes it.
        self._revoked: OrderedDict[tuple[str, str | None], str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._live)

    def get(
        self,
        request: EpisodeRequest,
        task: Callable[[], Task | None] = lambda: None,
        *,
        owner: ClientIdentity | None = None,
    ) -> Episode:
        """The episode ``request`` names; ``task`` is asked only when the episode is new.

        With ``owner`` (who sends the request) a new episode belongs to it, and an existing one must
        (`NotYourEpisodeError` otherwise; see `ClientIdentity.may_open`). A request naming a handle
        is checked as one (`by_handle`).
        """
        if looks_like_handle(request.id):
            return self.by_handle(request.id, owner.principal if owner is not None else None)
        now = self._clock()
        self._expire(now)
        live = self._live.get(request.id)
        if live is None:
            why = self._closed.get(request.id)
            if why is not None:
                raise _invalid(f"episode {request.id!r} is {why}; start a new episode under another id")
            live = self._open(request, task(), owner)
        else:
            if owner is not None and live.owner is not None and not owner.may_open(live.owner):
                if not self._adoptable(live):
                    raise NotYourEpisodeError(request.id)
                live.owner = owner  # its session was expired by a fault: the client's new one takes it
            self._live.move_to_end(request.id)
        live.episode.last_used = now
        return live.episode

    def owned(self, request: EpisodeRequest, owner: ClientIdentity | None) -> Episode | None:
        """The live episode ``request`` names if ``owner`` may use it, else None; creates nothing."""
        if looks_like_handle(request.id):
            try:
                return self.by_handle(request.id, owner.principal if owner is not None else None)
            except EpisodeRefusedError:
                return None
        live = self._live.get(request.id)
        if live is None:
            return None
        if owner is not None and live.owner is not None and not owner.may_open(live.owner):
            if not self._adoptable(live):
                return None
            live.owner = owner
        return live.episode

    @staticmethod
    def _adoptable(live: _Live) -> bool:
        """An episode whose session a protocol fault ended continues in its client's next session."""
        state = live.episode.protocol
        return state.expired is not None or state.revoked is not None

    def _open(self, request: EpisodeRequest, task: Task | None, owner: ClientIdentity | None) -> _Live:
        live = _Live(self._new(request, task), request, owner)
        self._live[request.id] = live
        while len(self._live) > self.max_episodes:
            oldest, _ = self._live.popitem(last=False)
            self._remember(oldest, f"closed: more than {self.max_episodes} episodes were live")
        return live

    def start(self, request: EpisodeRequest, task: Task | None, owner: ClientIdentity) -> tuple[str, Episode]:
        """Open a new episode for ``owner`` under a server-minted handle; returns (handle, episode).

        ``request.id`` must be new. The handle is bound to ``owner.principal``.
        """
        self._expire(self._clock())
        handle = self.mint.mint("handle", HANDLE_PREFIX, owner.principal)
        resumed = self._resumable(owner, task, request.trial)
        live = resumed if resumed is not None else self._open(request, task, owner)
        live.handle = handle
        live.episode.last_used = self._clock()
        self._handles[handle] = live.episode.id  # a resumed episode keeps its id
        while len(self._handles) > MAX_HANDLES:
            self._handles.popitem(last=False)
        if owner.channel is not None:
            self._latest[owner.channel] = live.episode.id
            self._latest.move_to_end(owner.channel)
            while len(self._latest) > self.max_episodes:
                self._latest.popitem(last=False)
        return handle, live.episode

    def revoke_handle(self, episode_id: str, unknown: bool = False) -> bool:
        """Revoke a live episode's handle (a `HandleExpired` fault); False when it has none.

        The old handle then reads as expired (``unknown``: as never issued). The same client calling
        ``start`` again for the same task resumes the episode under a new handle.
        """
        live = self._live.get(episode_id)
        if live is None or live.handle is None:
            return False
        if unknown:
            self._handles.pop(live.handle, None)
        live.handle = None
        owner = live.owner or ClientIdentity()
        client = owner.channel or owner.principal
        if client is None:
            return True  # a client no one can tell apart cannot be recognised when it comes back
        task_id = live.episode.task.id if live.episode.task is not None else None
        self._revoked[(client, task_id)] = episode_id
        while len(self._revoked) > self.max_episodes:
            self._revoked.popitem(last=False)
        return True

    def _resumable(self, owner: ClientIdentity, task: Task | None, trial: int | None) -> _Live | None:
        """The episode of ``owner`` and ``task`` whose handle was revoked, if it is live (and that trial)."""
        client = owner.channel or owner.principal
        if client is None:
            return None
        key = (client, task.id if task is not None else None)
        episode_id = self._revoked.get(key)
        live = self._live.get(episode_id) if episode_id is not None else None
        if live is None or (trial is not None and live.episode.trial != trial):
            return None
        del self._revoked[key]
        return live

    def latest(self, owner: ClientIdentity) -> Episode | None:
        """The live episode the client on ``owner``'s channel started last with ``start``, if any."""
        episode_id = self._latest.get(owner.channel) if owner.channel is not None else None
        live = self._live.get(episode_id) if episode_id is not None else None
        return None if live is None else live.episode

    def by_handle(self, handle: str, principal: str | None) -> Episode:
        """The live episode of ``handle`` presented by ``principal``; `HandleError` saying what to do."""
        again = "Call start_episode to begin a new episode and pass the handle it returns."
        if not self.mint.verify("handle", HANDLE_PREFIX, handle, principal):
            raise HandleError(
                "INVALID_HANDLE",
                f"the episode handle {handle[:60]!r} was not issued to you by this server (mistyped, "
                f"forged, issued to another client, or from before the server restarted). {again}",
            )
        now = self._clock()
        self._expire(now)
        episode_id = self._handles.get(handle)
        if episode_id is None:
            raise HandleError(
                "INVALID_HANDLE", f"the episode handle {handle[:60]!r} is unknown to this server. {again}"
            )
        live = self._live.get(episode_id)
        if live is None or live.handle != handle:
            why = self._closed.get(episode_id, "expired") if live is None else "its handle expired"
            raise HandleError(
                "EPISODE_EXPIRED",
                f"the episode of handle {handle[:60]!r} is no longer reachable by it ({why}). {again} "
                "To continue the same task, call start_episode with the same task.",
            )
        self._live.move_to_end(live.episode.id)
        live.episode.last_used = now
        return live.episode

    def handle_of(self, episode_id: str) -> str | None:
        """The handle of a live episode opened by ``start_episode``, if any."""
        live = self._live.get(episode_id)
        return None if live is None else live.handle

    def peek(self, episode_id: str) -> Episode | None:
        """The live episode ``episode_id``, or None; neither creates nor touches it."""
        live = self._live.get(episode_id)
        return None if live is None else live.episode

    def bind_task(self, episode: Episode, task: Task) -> None:
        """Bind a not yet started episode to ``task`` (a person picked its prompt): new trial and key."""
        live = self._live.get(episode.id)
        if live is None or episode.seq > 0:
            return
        episode.task = task
        episode.trial, episode.fault_key = self._identity(live.request, task)

    def close(self, episode_id: str, why: str = "closed") -> Episode | None:
        """Close an episode (later calls naming it are refused, told ``why``); it, or None if not live."""
        live = self._live.pop(episode_id, None)
        if live is None:
            return None
        self._remember(episode_id, why)
        return live.episode

    def _new(self, request: EpisodeRequest, task: Task | None) -> Episode:
        if not self.client_seeds:
            self._check_chosen(request, task)
        trial, fault_key = self._identity(request, task)
        return Episode(
            id=request.id,
            task=task,
            fault_key=fault_key,
            seed=self.default_seed if request.seed is None else request.seed,
            trial=trial,
        )

    def _check_chosen(self, request: EpisodeRequest, task: Task | None) -> None:
        """Refuse a seed or fault key of the client's own choosing (`SeedRefusedError`)."""
        if request.seed is not None and request.seed != self.default_seed:
            raise SeedRefusedError("seed", request.seed, self.default_seed)
        if request.fault_key is not None:
            task_id = task.id if task is not None else request.task
            own = fault_key_of(task_id, self._trial(request, task_id))
            if request.fault_key != own:
                raise SeedRefusedError("fault key", request.fault_key, own)

    def _trial(self, request: EpisodeRequest, task_id: str | None) -> int:
        return next(t for t in (request.trial, self.trial, self._started[task_id]) if t is not None)

    def _identity(self, request: EpisodeRequest, task: Task | None) -> tuple[int, str]:
        # A server with no tasks of its own (the proxy) still keys the draws by the task named.
        task_id = task.id if task is not None else request.task
        trial = self._trial(request, task_id)
        self._started[task_id] += 1
        return trial, request.fault_key or fault_key_of(task_id, trial)

    def _expire(self, now: float) -> None:
        # Nothing can have expired before the least recently used episode could: its time is kept, and
        # stays a safe lower bound (episodes are only used again, added at ``now``, or removed).
        if now < self._first_expiry:
            return
        while self._live:
            episode_id, oldest = next(iter(self._live.items()))
            if now - oldest.episode.last_used < self.idle_seconds:
                self._first_expiry = oldest.episode.last_used + self.idle_seconds
                return
            del self._live[episode_id]
            self._remember(episode_id, f"closed: idle for more than {self.idle_seconds:g} s")
        self._first_expiry = -math.inf  # none live: the next new episode sets it on the next call

    def _remember(self, episode_id: str, why: str) -> None:
        self._closed[episode_id] = why
        while len(self._closed) > MAX_CLOSED:
            self._closed.popitem(last=False)
