"""ReliabilityBench's report section: pass^k curves and the (λ, ε) surface heatmap, in the page too."""

import re

import pytest
from browser import headless

from mcp_resili.cli import main
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.registry.loader import find_suite
from mcp_resili.report.build import load_report


@pytest.fixture(scope="module")
def reliability_db(tmp_path_factory):
    import anyio

    db = tmp_path_factory.mktemp("rel") / "r.db"
    config = RunConfig(
        suite="reliabilitybench",
        db=db,
        trials=2,
        limit=4,
        faults=("lambda=0.0", "lambda=0.2"),
        perturb=("eps=0", "eps=0.2"),
        time_scale=0,
        models=("scripted:oracle",),
    )
    anyio.run(lambda: execute(config))
    return db


def test_reliabilitybench_report_has_heatmap_and_passk_curves(reliability_db):
    report = load_report(reliability_db, find_suite=find_suite)
    section = next(s for s in report.sections if s.id == "reliabilitybench")
    kinds = [re.search(r'data-chart="(\w+)"', b.svg).group(1) for b in section.blocks if hasattr(b, "svg")]
    assert kinds == ["lines", "heatmap"]
    heat = next(b.svg for b in section.blocks if hasattr(b, "svg") and "heatmap" in b.svg)
    assert heat.count('class="mark"') == 4  # 2 λ × 2 ε cells
    assert next(s for s in section.data["surfaces"] if s["model"] == "scripted:oracle")["points"]


def test_reliabilitybench_page_draws_the_surface_heatmap_in_chromium(reliability_db, tmp_path, chromium):
    page = tmp_path / "rel.html"
    assert main(["report", "--db", str(reliability_db), "--html", str(page)]) == 0
    dom = headless(chromium, tmp_path, "--virtual-time-budget=3000", "--dump-dom", page.as_uri()).stdout
    heat = dom.split('data-chart="heatmap"', 1)[1].split("</svg>", 1)[0]
    assert heat.count('class="mark"') == 4
    curves = dom.split('data-chart="lines"', 1)[1].split("</svg>", 1)[0]
    assert "<path" in curves
