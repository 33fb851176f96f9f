"""Suite metrics as inspect metrics: pass^k over epochs, and each suite's own summary (TSR, PRR, RC...).

Both read every epoch's score (``scores="unreduced"``): inspect reduces a sample's epochs to one score
before other metrics see it, and keeps only the first epoch's metadata. The per-sample means of the
score's ``value``/``full``/``partial`` keys are plain `mean` metrics on the reduced scores.

inspect also calls metrics while the eval runs, with some or no scores yet: both return ``{}`` then.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from inspect_ai.scorer import Metric, SampleScore, metric

if TYPE_CHECKING:
    from mcp_resili.store import EpisodeRow


def _is_full(sample: SampleScore) -> bool:
    value = sample.score.value
    return isinstance(value, Mapping) and value.get("full") == 1.0


@metric(scores="unreduced")
def pass_hat_k() -> Metric:
    """pass^1 … pass^K over the epochs (K: the most epochs a sample has), ``mcp-resili run``'s estimator.

    A task passes a draw of k trials only if all k are full; every k averages the same tasks, those
    with K scored epochs (`mcp_resili.scoring.passk.pass_k_curve`).
    """

    def compute(scores: list[SampleScore]) -> dict[str, float]:
        from mcp_resili.scoring.passk import TaskTrials, pass_k_curve

        by_task: dict[str, list[bool]] = defaultdict(list)
        for sample in scores:
            by_task[str(sample.sample_id)].append(_is_full(sample))
        trials = [TaskTrials(task, sum(full), len(full)) for task, full in sorted(by_task.items())]
        return {f"pass^{p.k}": p.value for p in pass_k_curve(trials) if p.value is not None}

    return compute


def episode_row(sample: SampleScore) -> EpisodeRow | None:
    """The stored-episode row ``mcp-resili run`` would have written for one scored epoch."""
    from mcp_resili.store import EpisodeRow

    meta = sample.score.metadata or {}
    if "score" not in meta:
        return None
    return EpisodeRow(
        run_id="inspect",
        episode_id=str(meta["episode"]),
        model=str(meta.get("model", "")),
        faults=str(meta.get("faults") or ""),
        variant=str(meta.get("variant", "baseline")),
        task_id=str(meta["task"]),
        trial=int(meta.get("trial", 0)),
        termination=str(meta.get("termination")),
        label=meta["score"]["label"],
        value=meta["score"]["value"],
        score=meta["score"],
        trace="",
        stop_rule=meta.get("stop_rule"),
    )


#: Path parts a summary number may have (``cells.recovery.recovery_rate``); deeper ones are breakdowns
#: within breakdowns (per domain, per surface point), too many to show as metrics.
MAX_PATH_PARTS = 3


def numbers(summary: object, prefix: str = "") -> dict[str, float]:
    """The numeric leaves of a suite summary, named by their path (``toolmaze.tsr``).

    In a list of records, each record is named after the text fields that tell it apart, else after
    an integer field that does, as ``key=value`` (a single record adds nothing to the path). When records pool
    others (a text field ``all``), only the most pooled ones are kept, named without their ``all``s
    (``toolmaze.NP.tsr``: mode NP over all levels). Booleans, text, None, lists of plain values
    (intervals) and paths of more than `MAX_PATH_PARTS` parts are left out.
    """
    found: dict[str, float] = {}
    if prefix.count(".") >= MAX_PATH_PARTS:
        return found
    if isinstance(summary, Mapping):
        for key, value in summary.items():
            found.update(numbers(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(summary, list) and summary and all(isinstance(item, Mapping) for item in summary):
        for name, record in _named_records(summary):
            found.update(numbers(record, ".".join(p for p in (prefix, name) if p)))
    elif isinstance(summary, int | float) and not isinstance(summary, bool) and prefix:
        found[prefix] = float(summary)
    return found


def _named_records(records: list[Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, record) pairs: see `numbers`."""
    if len(records) == 1:
        return [("", records[0])]
    text = [
        key
        for key in records[0]
        if all(isinstance(r.get(key), str) for r in records) and len({r[key] for r in records}) > 1
    ]
    # Records told apart by no text field may be by a counter (pass^k's ``k``).
    counters = [
        key
        for key in records[0]
        if all(isinstance(r.get(key), int) and not isinstance(r.get(key), bool) for r in records)
        and len({r[key] for r in records}) == len(records)
    ]
    keys = text or counters[:1]

    def pooled(record: Mapping[str, Any]) -> int:
        return sum(record[k] == "all" for k in text)

    overall: list[tuple[str, Mapping[str, Any]]] = []
    levels = sorted({pooled(r) for r in records} - {0})
    if levels:
        # Breakdowns that also pool (ToolMaze: per mode over all levels, per level over all modes, and
        # all of both): the records pooling one field stand for the list, named by what they do not
        # pool; one pooling every field is the overall value, named by the list alone.
        if len(levels) > 1 and levels[-1] == len(text):
            overall = [
                ("", {k: v for k, v in r.items() if k not in keys}) for r in records if pooled(r) == len(text)
            ]
        records = [r for r in records if pooled(r) == levels[0]]

    def name(record: Mapping[str, Any]) -> str:
        return ".".join(
            (str(record[k]) if k in text else f"{k}={record[k]}")
            for k in keys
            if record[k] != "all" or k not in text
        )

    names = [name(r) for r in records]
    if len(set(names)) != len(names) or (len(names) > 1 and "" in names):
        return [(str(n), r) for n, r in enumerate(records)]
    # The fields that name a record are in its name already.
    named = [(n, {k: v for k, v in r.items() if k not in keys}) for n, r in zip(names, records, strict=True)]
    return named + overall[:1]


@metric(scores="unreduced")
def suite_metrics() -> Metric:
    """The suite's own summary (``Suite.summarize``, e.g. ToolMaze's TSR/PRR/RC), one metric per number."""

    def compute(scores: list[SampleScore]) -> dict[str, float]:
        from mcp_resili.registry.loader import get_suite

        rows = [row for row in map(episode_row, scores) if row is not None]
        suites = {str((s.score.metadata or {}).get("suite")) for s in scores if s.score.metadata}
        if not rows or len(suites) != 1:
            return {}
        summarize = get_suite(suites.pop()).summarize
        summary = summarize(rows) if summarize is not None else None
        return numbers(summary) if summary is not None else {}

    return compute
