"""Run two scripted agents on five ResiliBench tasks under the paper's failure model, in-process."""

import tempfile
from pathlib import Path

import anyio

from mcp_resili import RunConfig, execute, summarize


async def main() -> None:
    db = Path(tempfile.mkdtemp()) / "quickstart.db"
    config = RunConfig(
        models=("scripted:oracle", "scripted:naive"), faults=("resilibench",), limit=5, trials=2, db=db
    )
    result = await execute(config)  # every episode is in the store as it finishes
    for group in summarize(result.iter_rows(traces=False)):  # read back one row at a time
        full = group.levels["full"]
        print(f"{group.model:16} full {full.value:.0%} (95% CI {full.low:.0%}-{full.high:.0%}) over {full.n}")


if __name__ == "__main__":
    anyio.run(main)
