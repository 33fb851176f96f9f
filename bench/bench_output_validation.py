"""Cost of checking a simulated tool's output: a validator built once vs jsonschema.validate per call.

Run: python bench/bench_output_validation.py. Both arms validate the same results in the same run.
"""

import copy
import time

import jsonschema

from mcp_resili.registry.loader import get_suite
from mcp_resili.suites.reliabilitybench.library import reliabilitybench_library

CALLS = 2000


def main():
    library = reliabilitybench_library()
    task = get_suite("reliabilitybench").tasks[0]
    state = copy.deepcopy(task.metadata["initial_state"])
    date = task.metadata["request"]["slots"]["date"]
    result = library.simulators["check_calendar"]({"date": date}, state)
    schema = library.spec("check_calendar").output_schema

    start = time.perf_counter()
    for _ in range(CALLS):
        jsonschema.validate(result, schema)
    baseline = (time.perf_counter() - start) / CALLS

    start = time.perf_counter()
    for _ in range(CALLS):
        library.simulate("check_calendar", {"date": date}, state)
    cached = (time.perf_counter() - start) / CALLS

    print(f"jsonschema.validate per call:            {baseline * 1e6:8.1f} µs")
    print(f"simulate (tool + cached validator) call: {cached * 1e6:8.1f} µs")
    print(f"speed-up: {baseline / cached:.1f}x")


if __name__ == "__main__":
    main()
