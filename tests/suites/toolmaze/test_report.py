"""ToolMaze's report section agrees with the suite's own metrics and draws its TSR charts."""

import re

import pytest

from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.registry.loader import find_suite
from mcp_resili.report.build import load_report


def test_toolmaze_section_agrees_with_the_suite_metrics_and_draws_tsr_charts(tmp_path):
    import anyio

    from mcp_resili.suites.toolmaze.report import toolmaze_metrics

    db = tmp_path / "tm.db"
    config = RunConfig(suite="toolmaze", db=db, trials=1, limit=4, faults=("none", "toolmaze:P1"))
    result = anyio.run(lambda: execute(config))
    report = load_report(db, find_suite=find_suite)
    section = next(s for s in report.sections if s.id == "toolmaze")
    ours = {(g["model"], g["mode"], g["level"]): g for g in section.data["groups"]}
    theirs = toolmaze_metrics(result.rows)
    assert len(ours) == len(theirs)
    for m in theirs:
        g = ours[(m["model"], m["mode"], m["level"])]
        assert g["tsr"]["rate"] == pytest.approx(m["tsr"], abs=1e-4)
        assert g["rc"]["mean"] == pytest.approx(m["rc"], abs=1e-4)
        assert (g["prr"] is None) == (m["prr"] is None)
        low, high = g["tsr"]["ci95"]
        assert low <= g["tsr"]["rate"] <= high
    kinds = [re.search(r'data-chart="(\w+)"', b.svg).group(1) for b in section.blocks if hasattr(b, "svg")]
    assert kinds == ["bars", "heatmap", "heatmap"]  # TSR by mode, then one heatmap per model
