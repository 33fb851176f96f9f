"""Regenerate the embedded default ResiliBench task set (mcp_resili/tasks/resilibench/default.json)."""

from pathlib import Path

from mcp_resili.tasks.resilibench.generate import TASK_TYPES, generate_tasks

DEFAULT_SEED = 2026
PER_TYPE = 8


def render() -> str:
    """The default task set as stored (pretty JSON)."""
    task_set = generate_tasks(DEFAULT_SEED, dict.fromkeys(TASK_TYPES, PER_TYPE))
    return task_set.model_dump_json(indent=1, exclude={"tasks": {"__all__": {"instance_id"}}}) + "\n"


if __name__ == "__main__":
    target = Path(__file__).resolve().parents[1] / "mcp_resili" / "tasks" / "resilibench" / "default.json"
    target.write_text(render(), encoding="utf-8")
    print(f"wrote {target}")
