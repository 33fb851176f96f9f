"""A synthetic results database of any size, written straight through the Store API (no episode is played).

For measuring reports and exports at scale (``bench/report_scale.py``, the report tests): a run of
ResiliBench-shaped episodes over the suite's default tasks, with traces that follow each task's
golden workflow (so workflow metrics are computed for real), injected faults of several types,
ResiliBench-shaped score components, a few infrastructure errors, tokens and costs. Everything is
drawn from ``random.Random(seed)``, so the same arguments give the same database.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from mcp_resili.store.sqlite import EpisodeRow, Store
from mcp_resili.suites.resilibench.tasks import default_tasks

DEFAULT_MODELS = (
    "scripted:oracle",
    "scripted:naive",
    "anthropic:claude-sonnet",
    "openai:gpt-mini",
    "openai:gpt",
)
DEFAULT_FAULTS = ("none", "resilibench")
DEFAULT_VARIANTS = ("baseline", "flawed:sequence_disorder")
_ERRORS = ("TIMEOUT", "RATE_LIMITED", "INVALID_INPUT", "SERVICE_UNAVAILABLE")


def _line(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"))


def _episode(
    rng: random.Random, episode: str, tools: Sequence[str], faulted: bool, header: dict[str, Any]
) -> tuple[str, int, int]:
    """(trace, faults injected, successful calls) of one synthetic episode."""
    lines = [_line({**header, "episode": episode})]
    seq = injected = ok = 0
    for turn, tool in enumerate(tools, 1):
        seq += 1
        fault = None
        if faulted and rng.random() < 0.3:
            code = rng.choice(_ERRORS)
            fault = {"type": "error", "code": code, "message": f"injected {code.lower()}", "explicit": True}
            injected += 1
        arguments = {"source": f"https://api.example.com/{tool}/{rng.randrange(1000)}"}
        lines.append(
            _line(
                {
                    "event": "model_turn",
                    "episode": episode,
                    "turn": turn,
                    "text": "",
                    "tool_calls": [{"id": f"call_{turn}", "name": tool, "arguments": arguments}],
                    "input_tokens": 0,
                    "output_tokens": 0,
                }
            )
        )
        rows = "".join(
            f"{i},{rng.choice(('ada', 'bob', 'cy'))},{rng.random() * 1000:.2f}\n" for i in range(12)
        )
        lines.append(
            _line(
                {
                    "event": "tool_call",
                    "episode": episode,
                    "seq": seq,
                    "tool": tool,
                    "arguments": arguments,
                    "fault": fault,
                    "decision": {
                        "plan": "resilibench",
                        "ordinal": seq - 1,
                        "roll": rng.random(),
                        "fault": fault,
                    },
                    "unmet_dependencies": [],
                    "is_error": fault is not None,
                    "error_code": None if fault is None else fault["code"],
                    "result": None if fault is not None else {"success": True, "data": {"content": rows}},
                }
            )
        )
        ok += fault is None
    lines.append(_line({"event": "finish", "episode": episode, "seq": seq + 1, "status": "completed"}))
    lines.append(
        _line(
            {"event": "episode_end", "episode": episode, "termination": "completed", "turns": len(tools) + 1}
        )
    )
    return "\n".join(lines) + "\n", injected, ok


def synthetic_rows(
    run_id: str,
    episodes: int,
    *,
    seed: int = 0,
    models: Sequence[str] = DEFAULT_MODELS,
    faults: Sequence[str] = DEFAULT_FAULTS,
    variants: Sequence[str] = DEFAULT_VARIANTS,
) -> Iterator[EpisodeRow]:
    """``episodes`` rows of a ResiliBench-shaped run: the matrix cells in turn, trials as needed."""
    rng = random.Random(seed)
    tasks = default_tasks()
    skill = {model: 0.35 + 0.6 * n / max(1, len(models) - 1) for n, model in enumerate(models)}
    cells = [(m, f, v, t) for m in models for f in faults for v in variants for t in tasks]
    for n in range(episodes):
        model, fault_spec, variant, task = cells[n % len(cells)]
        trial = n // len(cells)
        episode = f"{run_id}/{fault_spec}/{model}/{variant}/{task.id}/{trial}"
        header = {
            "event": "header",
            "format_version": 1,
            "suite": "resilibench",
            "task": task.id,
            "seed": seed,
            "fault_plan": {"kind": "resilibench"} if fault_spec != "none" else {"kind": "none"},
            "fault_key": f"{task.id}/{trial}",
            "model": model,
            "variant": variant,
            "trial": trial,
            "max_turns": None,
        }
        tools = [step.tool for step in task.workflow.steps]
        if rng.random() > skill[model]:
            tools = tools[: max(1, len(tools) // 2)]  # a weaker agent stops half-way
        trace, injected, ok = _episode(rng, episode, tools, fault_spec != "none", header)
        infra = rng.random() < 0.01
        coverage = ok / len(task.workflow.steps)
        label = None if infra else "full" if coverage == 1 else "partial" if coverage >= 0.5 else "failure"
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
            label=label,
            value=None if label is None else round(coverage, 4),
            score=None
            if label is None
            else {
                "suite": "resilibench",
                "task": task.id,
                "label": label,
                "value": round(coverage, 4),
                "components": {
                    "coverage": round(coverage, 4),
                    "order_ok": True,
                    "completion_signal": True,
                    "successful_calls": ok,
                    "tool_calls": len(tools),
                    "faults_injected": injected,
                    "termination_rule": None,
                    "bound_iii_full_probability": round(rng.uniform(0.5, 1.0), 6),
                    "bound_ii_full_possible": True,
                },
                "reasons": [] if label == "full" else [f"covered {ok} of {len(task.workflow.steps)} steps"],
            },
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
        store.add_run(run_id, f"2026-01-01T00:00:{seed % 60:02d}", "resilibench", seed, {"synthetic": True})
        store.add_episodes(synthetic_rows(run_id, episodes, seed=seed, **matrix))
    finally:
        store.close()
    return run_id
