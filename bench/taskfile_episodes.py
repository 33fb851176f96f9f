"""Per-episode setup and teardown of task files on real servers: reused servers vs a cold start each time.

Usage: python bench/taskfile_episodes.py [EPISODES]. Plays no agent: each episode opens (fixture laid,
servers bound), then ends (end state observed, slot released). The baseline, measured in the same run,
starts the servers afresh for every episode (``reuse = false``).
"""

from __future__ import annotations

import statistics
import sys
import time

import anyio

from mcp_resili.server.episode import Episode
from mcp_resili.suites.realmcp import task_directory
from mcp_resili.taskfiles.environment import TaskEnvironment
from mcp_resili.taskfiles.load import load_directory
from mcp_resili.taskfiles.suite import locks_of

TASKS = ("csv_to_sqlite-01", "fs_git_commit-01", "memory_add-01", "quarter_pipeline-01")


async def measure(episodes: int, reuse: bool) -> list[float]:
    directory = load_directory(task_directory())
    tasks = [t for t in directory.tasks if t.id in TASKS]
    used = {n for t in tasks for n in t.servers}
    servers = {n: s.model_copy(update={"reuse": reuse}) for n, s in directory.servers.items() if n in used}
    times = []
    async with TaskEnvironment(tasks, servers, locks=locks_of(directory)) as env:
        for n in range(episodes):
            task = tasks[n % len(tasks)]
            episode = Episode(id=f"e{n}", task=task, fault_key=f"{task.id}/0", seed=0)
            started = time.perf_counter()
            await env.open_episode(episode)
            await env.end_episode(episode)
            times.append((time.perf_counter() - started) * 1000)
        phases = {k: round(v, 2) for k, v in env.timings.items()}
        print(f"  phases (s, summed): {phases}, server starts {env.starts}")
    return times


def main() -> None:
    episodes = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    for reuse in (True, False):
        times = anyio.run(measure, episodes, reuse)
        label = "reused servers" if reuse else "baseline: fresh servers per episode"
        print(
            f"{label}: {episodes} episodes, setup+teardown per episode mean {statistics.mean(times):.1f} ms, "
            f"median {statistics.median(times):.1f} ms, p90 {sorted(times)[int(0.9 * len(times))]:.1f} ms"
        )


if __name__ == "__main__":
    main()
