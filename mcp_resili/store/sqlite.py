"""Results in SQLite: one row per run, one row per finished episode (written atomically)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from mcp_resili.errors import UserError
from mcp_resili.fastjson import loads

DEFAULT_DB = Path("mcp-resili.db")

_MIGRATIONS = (
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        suite TEXT NOT NULL,
        seed INTEGER NOT NULL,
        config TEXT NOT NULL
    );
    CREATE TABLE episodes (
        run_id TEXT NOT NULL REFERENCES runs(id),
        episode_id TEXT NOT NULL,
        model TEXT NOT NULL,
        faults TEXT NOT NULL,
        variant TEXT NOT NULL,
        task_id TEXT NOT NULL,
        trial INTEGER NOT NULL,
        termination TEXT NOT NULL,
        label TEXT,
        value REAL,
        score TEXT,
        trace TEXT NOT NULL,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (run_id, episode_id)
    );
    """,
    # 2: cost per episode (USD; NULL when the model has no known price).
    """
    ALTER TABLE episodes ADD COLUMN cost_usd REAL;
    """,
    # 3: the agent architecture (react, reflexion) and the stop rule that ended the episode, if any.
    """
    ALTER TABLE episodes ADD COLUMN architecture TEXT NOT NULL DEFAULT 'react';
    ALTER TABLE episodes ADD COLUMN stop_rule TEXT;
    """,
)

_COLUMNS = (
    "run_id, episode_id, model, faults, variant, task_id, trial, termination, label, value, score, "
    "trace, input_tokens, output_tokens, cost_usd, architecture, stop_rule"
)
_PLACEHOLDERS = ", ".join("?" for _ in _COLUMNS.split(","))
#: The columns read when traces are not wanted (the trace reads as empty, SQLite never copies it).
_LIGHT_COLUMNS = _COLUMNS.replace("trace, ", "'', ")


#: Distinct score texts `Store.iter_episodes` keeps parsed when sharing them.
_SHARED_SCORES = 4096


@dataclass(frozen=True)
class RunRow:
    """One run as stored."""

    id: str
    created_at: str
    suite: str
    seed: int
    config: dict[str, Any]


@dataclass(frozen=True)
class EpisodeRow:
    """One finished episode as stored."""

    run_id: str
    episode_id: str
    model: str
    faults: str
    variant: str
    task_id: str
    trial: int
    termination: str
    label: str | None
    value: float | None
    score: dict[str, Any] | None
    trace: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    #: The agent architecture the episode ran under (``react``, ``reflexion``).
    architecture: str = "react"
    #: The stop rule that ended the episode (``too_many_calls``...), None when none did.
    stop_rule: str | None = None


class StoreError(UserError):
    """A results database that cannot be used (not SQLite, another program's, unknown run)."""


def _values(row: EpisodeRow) -> tuple[Any, ...]:
    return (
        row.run_id,
        row.episode_id,
        row.model,
        row.faults,
        row.variant,
        row.task_id,
        row.trial,
        row.termination,
        row.label,
        row.value,
        None if row.score is None else json.dumps(row.score),
        row.trace,
        row.input_tokens,
        row.output_tokens,
        row.cost_usd,
        row.architecture,
        row.stop_rule,
    )


@dataclass(frozen=True)
class StoredKey:
    """What a resume needs of a stored episode: which cell it is, how it ended, what it cost."""

    episode_id: str
    model: str
    faults: str
    variant: str
    task_id: str
    trial: int
    termination: str
    cost_usd: float | None
    architecture: str


class Store:
    """A results database. Schema changes go through numbered migrations (``PRAGMA user_version``).

    Opening a file that is not SQLite, or a SQLite database of another program, raises `StoreError`
    (one line, nothing written to it).
    """

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        """Open (or create) the database at ``path``; ``read_only`` neither creates nor changes it.

        Read-only (reports, exports), a database of an older schema is upgraded in a copy in memory:
        the file stays as the mcp-resili that wrote it can read it.
        """
        self.path = path
        try:
            if read_only:
                self._db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            else:
                self._db = sqlite3.connect(path)
        except sqlite3.Error as exc:  # e.g. a directory, or a folder that does not exist
            raise StoreError(f"cannot open results database {path}: {exc}") from None
        try:
            if read_only:
                self._open_read_only()
            else:
                self._db.execute("PRAGMA journal_mode=WAL")
                # WAL + NORMAL: a commit survives the process being killed (even SIGKILL); only an OS
                # crash can lose the last commits. FULL would fsync every episode on the event loop.
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._migrate()
        except sqlite3.DatabaseError as exc:  # "file is not a database", a locked or unreadable file
            self._db.close()
            raise StoreError(f"{path} is not a usable mcp-resili results database (SQLite): {exc}") from None
        except StoreError:
            self._db.close()
            raise

    def _open_read_only(self) -> None:
        version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        tables = self._db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
        if version == 0 and not tables:
            raise StoreError(f"{self.path} holds no mcp-resili results (an empty database)")
        if version < len(_MIGRATIONS):
            memory = sqlite3.connect(":memory:")
            self._db.backup(memory)
            self._db.close()
            self._db = memory
        self._migrate()  # checks the schema; upgrades only the copy in memory

    def _migrate(self) -> None:
        version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        if version > len(_MIGRATIONS):
            raise StoreError(f"{self.path} was written by a newer mcp-resili (schema {version})")
        if version == 0:
            # A SQLite file with tables but no schema version is another program's: never write into it.
            tables = [r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            if tables:
                names = ", ".join(sorted(tables))
                raise StoreError(
                    f"{self.path} is a SQLite database of another program (tables: {names}), "
                    "not mcp-resili results"
                )
        for number in range(version, len(_MIGRATIONS)):
            with self._db:
                self._db.executescript(_MIGRATIONS[number])
                self._db.execute(f"PRAGMA user_version = {number + 1}")

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._db:
            yield self._db

    def add_run(self, run_id: str, created_at: str, suite: str, seed: int, config: dict[str, Any]) -> None:
        """Record a new run."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
                (run_id, created_at, suite, seed, json.dumps(config, sort_keys=True)),
            )

    def add_episode(self, row: EpisodeRow) -> None:
        """Record one finished episode (all or nothing)."""
        with self._tx() as db:
            db.execute(
                f"INSERT INTO episodes ({_COLUMNS}) VALUES ({_PLACEHOLDERS})",
                _values(row),
            )

    def _json(self, text: str, what: str) -> dict[str, Any]:
        """A stored JSON object; a damaged one is a `StoreError` naming it, not a traceback."""
        try:
            value = loads(text)
            if not isinstance(value, dict):
                raise TypeError(f"a JSON {type(value).__name__}, not an object")
            return value
        except (TypeError, ValueError):
            raise StoreError(
                f"{self.path}: {what} is damaged (not a JSON object); the database was edited or corrupted"
            ) from None

    def _score(self, text: str, episode_id: str) -> dict[str, Any]:
        """A stored score: a JSON object whose ``components`` is an object and ``reasons`` a list."""
        what = f"the score of episode {episode_id}"
        score = self._json(text, what)
        if not isinstance(score.get("components", {}), dict) or not isinstance(
            score.get("reasons", []), list
        ):
            raise StoreError(f"{self.path}: {what} is damaged (components or reasons of the wrong type)")
        return score

    def episodes(self, run_id: str) -> list[EpisodeRow]:
        """All stored episodes of a run, in a stable order."""
        return list(self.iter_episodes(run_id))

    def iter_episodes(
        self, run_id: str, *, traces: bool = True, shared_scores: bool = False
    ) -> Iterator[EpisodeRow]:
        """The stored episodes of a run one at a time, in the order of `episodes` (for big runs).

        Without ``traces`` each row's trace is left empty and never read (summaries need none). With
        ``shared_scores`` rows whose stored scores are the same text share one score object, parsed
        once (most of a scripted run's are): for readers that do not change them.
        """
        cursor = self._db.execute(
            f"SELECT {_COLUMNS if traces else _LIGHT_COLUMNS} FROM episodes WHERE run_id = ? "
            "ORDER BY model, architecture, faults, variant, task_id, trial",
            (run_id,),
        )
        parsed: dict[str, dict[str, Any]] = {}
        for r in cursor:
            score: dict[str, Any] | None = None
            if r[10] is not None:
                score = parsed.get(r[10]) if shared_scores else None
                if score is None:
                    score = self._score(r[10], r[1])
                    if shared_scores:
                        if len(parsed) >= _SHARED_SCORES:
                            parsed.clear()
                        parsed[r[10]] = score
            yield EpisodeRow(
                run_id=r[0],
                episode_id=r[1],
                model=r[2],
                faults=r[3],
                variant=r[4],
                task_id=r[5],
                trial=r[6],
                termination=r[7],
                label=r[8],
                value=r[9],
                score=score,
                trace=r[11],
                input_tokens=r[12],
                output_tokens=r[13],
                cost_usd=r[14],
                architecture=r[15],
                stop_rule=r[16],
            )

    def fault_specs(self, run_id: str) -> set[str]:
        """The distinct fault specs of ``run_id``'s stored episodes."""
        cursor = self._db.execute("SELECT DISTINCT faults FROM episodes WHERE run_id = ?", (run_id,))
        return {faults for (faults,) in cursor}

    def any_score_component(self, run_id: str, name: str) -> bool:
        """Whether a stored score of ``run_id`` has the component ``name`` (a key of its ``components``).

        SQLite reads the scores' JSON itself; a score it cannot read counts as having it (the caller's
        own pass over the rows then decides).
        """
        path = "$.components." + json.dumps(name)
        try:
            found = self._db.execute(
                "SELECT 1 FROM episodes WHERE run_id = ? AND json_type(score, ?) IS NOT NULL LIMIT 1",
                (run_id, path),
            ).fetchone()
        except sqlite3.OperationalError:  # malformed JSON in some score
            return True
        return found is not None

    def episode_count(self, run_id: str) -> int:
        """How many episodes of ``run_id`` are stored."""
        return int(
            self._db.execute("SELECT COUNT(*) FROM episodes WHERE run_id = ?", (run_id,)).fetchone()[0]
        )

    def add_episodes(self, rows: Iterable[EpisodeRow], *, replacing: frozenset[str] = frozenset()) -> int:
        """Record many finished episodes in one transaction (imports, synthetic stores); returns the count.

        An episode id already stored is an error, except the ids in ``replacing``: those rows (a
        resume's replay of an infrastructure error) take the stored one's place.
        """
        rows = list(rows)
        with self._tx() as db:
            count = 0
            for verb, group in (
                ("INSERT", [r for r in rows if r.episode_id not in replacing]),
                ("INSERT OR REPLACE", [r for r in rows if r.episode_id in replacing]),
            ):
                if group:
                    cursor = db.executemany(
                        f"{verb} INTO episodes ({_COLUMNS}) VALUES ({_PLACEHOLDERS})",
                        (_values(r) for r in group),
                    )
                    count += cursor.rowcount
        return count

    def stored_keys(self, run_id: str) -> Iterator[StoredKey]:
        """Every stored episode of ``run_id`` as a `StoredKey` (no score, no trace read)."""
        cursor = self._db.execute(
            "SELECT episode_id, model, faults, variant, task_id, trial, termination, cost_usd, architecture "
            "FROM episodes WHERE run_id = ?",
            (run_id,),
        )
        for r in cursor:
            yield StoredKey(*r)

    def traces_of(self, run_id: str, episode_ids: Iterable[str]) -> Iterator[tuple[str, str]]:
        """(episode id, trace) of the given stored episodes."""
        for episode_id in episode_ids:
            row = self._db.execute(
                "SELECT trace FROM episodes WHERE run_id = ? AND episode_id = ?",
                (run_id, episode_id),
            ).fetchone()
            if row is not None:
                yield episode_id, row[0]

    def episode_ids(self, run_id: str) -> set[str]:
        """Ids of the episodes of ``run_id`` already stored (what a resume skips)."""
        rows = self._db.execute("SELECT episode_id FROM episodes WHERE run_id = ?", (run_id,)).fetchall()
        return {str(r[0]) for r in rows}

    def run_config(self, run_id: str) -> dict[str, Any] | None:
        """The stored configuration of ``run_id``, or ``None`` when there is no such run."""
        row = self._db.execute("SELECT config FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            return None
        config: dict[str, Any] = self._json(row[0], f"the configuration of run {run_id}")
        return config

    def run(self, run_id: str) -> RunRow | None:
        """The stored run ``run_id``, if any."""
        row = self._db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            return None
        config = self._json(row[4], f"the configuration of run {run_id}")
        return RunRow(id=row[0], created_at=row[1], suite=row[2], seed=row[3], config=config)

    def run_ids(self, limit: int | None = None) -> list[str]:
        """The ids of the most recent runs, newest first (all of them without ``limit``)."""
        rows = self._db.execute(
            "SELECT id FROM runs ORDER BY created_at DESC LIMIT ?", (-1 if limit is None else limit,)
        ).fetchall()
        return [str(r[0]) for r in rows]

    def require_run(self, run_id: str | None) -> RunRow:
        """The stored run ``run_id`` (``None``: the latest); `StoreError` naming the recent runs if absent."""
        if run_id is None:
            run_id = self.latest_run()
            if run_id is None:
                raise StoreError(f"{self.path} holds no runs yet")
        run = self.run(run_id)
        if run is None:
            recent = ", ".join(self.run_ids(limit=10)) or "none"
            raise StoreError(f"no run {run_id!r} in {self.path}; recent runs: {recent}")
        return run

    def latest_run(self) -> str | None:
        """The id of the most recent run, if any."""
        row = self._db.execute("SELECT id FROM runs ORDER BY created_at DESC LIMIT 1").fetchone()
        return None if row is None else str(row[0])


class StoredRows(Sequence[EpisodeRow]):
    """A run's stored rows as a sequence read from the store each time it is gone through.

    Nothing is held: a summary that goes through it once (or a few times) takes the same memory for
    ten episodes or 200,000. Without ``traces`` (the default) traces are neither read nor shown.
    Rows with the same stored score share one score object: read, never change, a row's score.
    """

    def __init__(self, db: Path, run_id: str, *, traces: bool = False, hold: int = 0) -> None:
        """The rows of ``run_id`` in the store at ``db`` (with their traces when ``traces``).

        ``hold``: a run of at most this many episodes is kept in memory once gone through whole (read
        from the store once, not at every pass); a bigger one is read at every pass.
        """
        self.db = db
        self.run_id = run_id
        self.traces = traces
        self.hold = hold
        self._count: int | None = None
        self._held: list[EpisodeRow] | None = None

    def __iter__(self) -> Iterator[EpisodeRow]:
        if self._held is not None:
            yield from self._held
            return
        keep: list[EpisodeRow] | None = [] if self.hold and len(self) <= self.hold else None
        store = Store(self.db, read_only=True)
        try:
            for row in store.iter_episodes(self.run_id, traces=self.traces, shared_scores=True):
                if keep is not None:
                    keep.append(row)
                yield row
        finally:
            store.close()
        self._held = keep  # only a pass gone through to its end is kept

    def fault_specs(self) -> set[str]:
        """The fault specs of the run's episodes, asked of the store (no pass over the rows)."""
        if self._held is not None:
            return {row.faults for row in self._held}
        store = Store(self.db, read_only=True)
        try:
            return store.fault_specs(self.run_id)
        finally:
            store.close()

    def any_score_component(self, name: str) -> bool:
        """Whether some episode's stored score has the component ``name``, asked of the store."""
        if self._held is not None:
            return any(_has_component(row, name) for row in self._held)
        store = Store(self.db, read_only=True)
        try:
            return store.any_score_component(self.run_id, name)
        finally:
            store.close()

    def __len__(self) -> int:
        if self._count is None:
            store = Store(self.db, read_only=True)
            try:
                self._count = store.episode_count(self.run_id)
            finally:
                store.close()
        return self._count

    @overload
    def __getitem__(self, index: int) -> EpisodeRow: ...

    @overload
    def __getitem__(self, index: slice) -> list[EpisodeRow]: ...

    def __getitem__(self, index: int | slice) -> EpisodeRow | list[EpisodeRow]:
        # Rarely wanted (the sequence is gone through): each access reads the store.
        if isinstance(index, slice):
            return list(self)[index]
        count = len(self)
        position = index + count if index < 0 else index
        if not 0 <= position < count:
            raise IndexError(index)
        for n, row in enumerate(self):
            if n == position:
                return row
        raise IndexError(index)


def fault_specs(rows: Iterable[EpisodeRow]) -> set[str]:
    """The fault specs of ``rows``: for `StoredRows`, asked of the store instead of read from every row."""
    if isinstance(rows, StoredRows):
        return rows.fault_specs()
    return {row.faults for row in rows}


def may_have_score_component(rows: Iterable[EpisodeRow], name: str) -> bool:
    """False only when no row's score has the component ``name``, known without a pass over `StoredRows`.

    For other rows it is True: the caller's own pass decides.
    """
    return rows.any_score_component(name) if isinstance(rows, StoredRows) else True


def _has_component(row: EpisodeRow, name: str) -> bool:
    components = (row.score or {}).get("components")
    return isinstance(components, dict) and name in components
