"""A synthetic results database of the tiny suite, of any size, written straight through the Store
(no episode is played): for the report and export tests that need hundreds of episodes.

Each episode follows its task's golden workflow (real arguments and results, so workflow metrics are
computed for real); a weaker model stops half-way; under faults a call fails now and then; about one
episode in a hundred is an infrastructure error. Every score is the tiny suite's own scorer's on the
episode's trace. Everything is drawn from ``random.Random(seed)``: the same arguments give the same
database.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from mcp_resili import EpisodeRow, Store, Trace
from tiny_suite.scoring import golden_arguments, score
from tiny_suite.tasks import tasks
from tiny_suite.tools import library

DEFAULT_MODELS = ("scripted:oracle", "scripted:naive", "openai:gpt-mini")
DEFAULT_FAULTS = ("none", "tiny")
DEFAULT_VARIANTS = ("baseline",)


def _line(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"))


def _trace(
    rng: random.Random, task: Any, episode: str, header: dict[str, Any], steps: int, faulted: bool
) -> str:
    golden = golden_arguments(task)
    tools = library()
    state: dict[str, Any] = {"records": []}
    lines = [_line({**header, "episode": episode})]
    seq = 0
    for turn, step in enumerate(task.workflow.steps[:steps], 1):
        seq += 1
        arguments = golden[step.id]
        call = {"id": f"call_{turn}", "name": step.tool, "arguments": arguments}
        lines.append(_line({"event": "model_turn", "episode": episode, "turn": turn, "tool_calls": [call]}))
        fault = None
        if faulted and rng.random() < 0.3:
            code = (tools.spec(step.tool).error_codes or ("UNAVAILABLE",))[0]
            fault = {
                "type": "error",
                "code": code,
                "message": f"{step.tool} failed ({code})",
                "transient": True,
            }
        event: dict[str, Any] = {
            "event": "tool_call",
            "episode": episode,
            "seq": seq,
            "tool": step.tool,
            "arguments": arguments,
            "fault": fault,
            "decision": {
                "plan": header["fault_plan"]["kind"],
                "ordinal": 0,
                "roll": rng.random(),
                "fault": fault,
            },
            "is_error": fault is not None,
            "error_code": None if fault is None else fault["code"],
            "result": {"code": fault["code"], "message": fault["message"]}
            if fault
            else tools.simulate(step.tool, arguments, state),
        }
        lines.append(_line(event))
    lines.append(_line({"event": "finish", "episode": episode, "seq": seq + 1, "status": "completed"}))
    lines.append(
        _line({"event": "episode_end", "episode": episode, "termination": "completed", "turns": seq + 1})
    )
    return "\n".join(lines) + "\n"


def synthetic_rows(
    run_id: str,
    episodes: int,
    *,
    seed: int = 0,
    models: Sequence[str] = DEFAULT_MODELS,
    faults: Sequence[str] = DEFAULT_FAULTS,
    variants: Sequence[str] = DEFAULT_VARIANTS,
) -> Iterator[EpisodeRow]:
    """``episodes`` rows: the matrix cells (model × faults × variant × task) in turn, trials as needed."""
    rng = random.Random(seed)
    skill = {model: 0.35 + 0.6 * n / max(1, len(models) - 1) for n, model in enumerate(models)}
    cells = [(m, f, v, t) for m in models for f in faults for v in variants for t in tasks()]
    for n in range(episodes):
        model, fault_spec, variant, task = cells[n % len(cells)]
        trial = n // len(cells)
        episode = f"{run_id}/{fault_spec}/{model}/{variant}/{task.id}/{trial}"
        header = {
            "event": "header",
            "format_version": 1,
            "suite": "tiny",
            "task": task.id,
            "seed": seed,
            "fault_plan": {"kind": "tiny", "failure": 0.3} if fault_spec != "none" else {"kind": "none"},
            "fault_key": f"{task.id}/{trial}",
            "model": model,
            "variant": variant,
            "trial": trial,
        }
        steps = len(task.workflow.steps)
        if rng.random() > skill[model]:
            steps = max(1, steps // 2)  # a weaker agent stops half-way
        trace = _trace(rng, task, episode, header, steps, fault_spec != "none")
        infra = rng.random() < 0.01
        scored = None if infra else score(task, Trace.from_lines(trace.splitlines()))
        hosted = not model.startswith("scripted:")
        tokens_in, tokens_out = (rng.randrange(2000, 9000), rng.randrange(100, 900)) if hosted else (0, 0)
        yield EpisodeRow(
            run_id=run_id,
            episode_id=episode,
            model=model,
            faults=fault_spec,
            variant=variant,
            task_id=task.id,
            trial=trial,
            termination="infrastructure_error" if infra else "completed",
            label=None if scored is None else scored.label,
            value=None if scored is None else scored.value,
            score=None if scored is None else scored.model_dump(mode="json"),
            trace=trace,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            cost_usd=round((tokens_in * 3 + tokens_out * 15) / 1e6, 6) if hosted else None,
        )


def write_synthetic_run(
    path: Path, episodes: int, *, run_id: str = "synthetic", seed: int = 0, **matrix: Any
) -> str:
    """Add a synthetic run of ``episodes`` episodes to the database at ``path``; returns its id.

    ``matrix``: ``models``, ``faults``, ``variants`` (sequences of names) to override the defaults.
    """
    store = Store(path)
    try:
        store.add_run(run_id, f"2026-01-01T00:00:{seed % 60:02d}", "tiny", seed, {"synthetic": True})
        store.add_episodes(synthetic_rows(run_id, episodes, seed=seed, **matrix))
    finally:
        store.close()
    return run_id
