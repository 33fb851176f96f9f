"""One exploration episode driven by hand through MCP (as from Claude Desktop), then scored from its trace.

The server runs over stdio with the ResiliBench failure model and writes the episode's trace; we pick
the first task from the prompts list, work through its steps, retry what fails, call `finish`, and
score the trace file with `mcp-resili score`.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from mcp_resili import get_suite, resolve_arguments


async def main() -> None:
    traces = Path(tempfile.mkdtemp())
    serve = [
        "-m",
        "mcp_resili",
        "serve",
        "--faults",
        "resilibench",
        "--seed",
        "3",
        "--trace-dir",
        str(traces),
    ]
    async with Client(StdioServerParameters(command=sys.executable, args=serve)) as client:
        task_name = (await client.list_prompts()).prompts[0].name
        prompt = await client.get_prompt(task_name)  # picking a prompt binds this session to the task
        print(prompt.messages[0].content.text.splitlines()[0])
        # A person reads the task and works through its steps; we take them from the task's ground truth.
        task = get_suite("resilibench").task(task_name)
        results: dict = {}
        for step in task.workflow.steps:
            for attempt in range(1, 4):
                result = await client.call_tool(step.tool, resolve_arguments(step, task.inputs, results))
                status = "error: " + result.content[0].text if result.is_error else "ok"
                print(f"  {step.tool} (attempt {attempt}): {status}")
                if not result.is_error:
                    results[step.id] = result.structured_content
                    break
            if step.id not in results:
                break  # three failures: later steps need this one's result, so give up
        done = len(results) == len(task.workflow.steps)
        await client.call_tool("finish", {"status": "completed" if done else "aborted", "summary": "by hand"})
    (trace,) = traces.iterdir()
    score = subprocess.run(
        [sys.executable, "-m", "mcp_resili", "score", str(trace)], capture_output=True, text=True
    )
    print(score.stdout)


if __name__ == "__main__":
    anyio.run(main)
