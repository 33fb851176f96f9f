"""Which harness survives which model-API fault: each example harness meets each fault once, measured.

For every fault variant, a rules file injects it into model call 2 (the second) of one short
ResiliBench task (no tool faults, so the model API alone is tested), and each harness of
examples/harnesses, plus mcp-resili's own loop (``scripted:oracle`` through the gateway), plays it
with ``run --agent-cmd`` (``run --llm-faults`` for the built-in loop). Delays are real (time scale 1)
and every episode has a 20 s time limit, so a model API that never answers shows what each client's
own timeout does. A fault is survived when the episode went on past it (a later call answered, or
the agent finished: `mcp_resili.scoring.model_coping`).

Run: ``python bench/harness_survival.py [--out results.json]``; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from mcp_resili.client.plan import RunConfig
from mcp_resili.client.runner import execute, local_executor
from mcp_resili.harness import session_factory

ROOT = Path(__file__).resolve().parents[1]
HARNESSES = ("openai_loop.py", "anthropic_loop.py", "openai_agents_agent.py", "pydantic_ai_agent.py")
BUILT_IN = "mcp-resili loop"
TASK = "task_9af2daab"  # three steps: the oracle needs four model calls, so call 2 is mid-task
FAULTS: dict[str, dict[str, Any]] = {
    "rate_limit 2 s": {"type": "rate_limit", "retry_after": 2.0},
    "rate_limit, no retry-after": {"type": "rate_limit"},
    "server_error 500": {"type": "server_error", "status": 500},
    "server_error 529": {"type": "server_error", "status": 529},
    "context_length": {"type": "context_length"},
    "content_filter": {"type": "content_filter"},
    "connection_reset": {"type": "connection_reset"},
    "hang (no answer)": {"type": "hang"},
    "slow_first_token 5 s": {"type": "slow_first_token", "seconds": 5.0},
    "slow_tokens 0.2 s": {"type": "slow_tokens", "seconds": 0.2},
    "stream_cut mid-event": {"type": "stream_cut", "at": "mid_event"},
    "stream_cut mid-tool-call": {"type": "stream_cut", "at": "mid_tool_call"},
    "malformed_sse": {"type": "malformed_sse"},
    "tool_arguments truncated": {"type": "tool_arguments", "mode": "truncated"},
    "tool_arguments invalid": {"type": "tool_arguments", "mode": "invalid"},
    "empty_completion": {"type": "empty_completion"},
    "max_tokens": {"type": "max_tokens"},
}


async def one(work: Path, harness: str, name: str, fault: dict[str, Any]) -> dict[str, Any]:
    rules = work / f"{abs(hash((harness, name)))}.json"
    rules.write_text(json.dumps({"rules": [{"calls": [2], "fault": fault}]}))
    config = RunConfig(
        suite="resilibench",
        models=("scripted:oracle",),
        faults=("none",),
        tasks=(TASK,),
        trials=1,
        time_limit=20.0,
        llm_faults=str(rules),
        agent_cmd=None
        if harness == BUILT_IN
        else shlex.join([sys.executable, str(ROOT / "examples" / "harnesses" / harness)]),
        db=work / f"{abs(hash((harness, name)))}.db",
    )
    started = time.monotonic()
    result = await execute(config, executor=local_executor(session_factory=session_factory))
    (row,) = result.rows
    components = (row.score or {}).get("components", {})
    kind = fault["type"]
    return {
        "harness": harness,
        "fault": name,
        "met": components.get(f"llm_{kind}_met"),
        "survived": components.get(f"llm_{kind}_survived"),
        "label": row.label,
        "termination": row.termination,
        "seconds": round(time.monotonic() - started, 1),
    }


def cell(result: dict[str, Any]) -> str:
    if not result["met"]:
        return "not met"
    mark = "survived" if result["survived"] else "**failed**"
    return f"{mark} ({result['label'] or 'void'}, {result['termination']})"


async def main(out: Path | None) -> None:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, fault in FAULTS.items():
            for harness in (*HARNESSES, BUILT_IN):
                results.append(await one(Path(tmp), harness, name, fault))
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    if out is not None:
        out.write_text(json.dumps(results, indent=1))
    columns = (*HARNESSES, BUILT_IN)
    print("| fault at model call 2 | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name in FAULTS:
        row = {r["harness"]: r for r in results if r["fault"] == name}
        print(f"| {name} | " + " | ".join(cell(row[h]) for h in columns) + " |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path)
    anyio.run(main, parser.parse_args().out)
