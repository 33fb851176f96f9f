"""ResiliBench's library promises fresh results: its tools that pass data through return copies."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_resili.server.backend import SimulatedBackend
from mcp_resili.suites.resilibench.library import resilibench_library


def simulate(tool: str, arguments: dict[str, Any]) -> Any:
    lib = resilibench_library()
    return SimulatedBackend(lib)._simulate(lib.spec(tool), arguments, {})


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("network_router", {"destination": "api/out", "data": {"records": [{"id": 1, "tags": ["x"]}]}}),
        ("network_validator", {"data": {"records": [{"id": 1, "nested": {"k": [1]}}]}}),
        (
            "data_processing_transformer",
            {"data": {"records": [{"id": 1, "name": "a", "category": "c", "value": 2, "extra": [1]}]}},
        ),
        ("integration_mapper", {"data": {"records": [{"id": 1, "name": "a", "meta": {"k": 1}}]}}),
    ],
)
def test_resilibench_tools_that_pass_data_through_return_copies(tool: str, arguments: dict[str, Any]) -> None:
    assert resilibench_library().fresh_results
    outcome = simulate(tool, arguments)  # the check runs: a shared container raises
    assert outcome.error_code is None, outcome.message
