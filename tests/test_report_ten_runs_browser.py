"""A ten-run comparison report opens in headless chromium: tables, charts and the episode browser drawn,
no script error, and a screenshot that is a real picture of it (never a timing assert)."""

from browser import open_in_chromium, probe_copy
from test_report import decode_png
from tiny_suite.synthetic import write_synthetic_run

from mcp_resili.cli import main

RUNS = 10
#: Episodes per run: 2 models x 6 tasks, one trial each.
EPISODES = 12


def test_a_ten_run_comparison_opens_in_chromium_with_its_tables_charts_and_browser(tmp_path, chromium):
    db = tmp_path / "ten.db"
    matrix = {"models": ("scripted:oracle", "scripted:naive"), "faults": ("tiny",), "variants": ("baseline",)}
    runs = [write_synthetic_run(db, EPISODES, run_id=f"run-{n:02d}", seed=n, **matrix) for n in range(RUNS)]
    folder = tmp_path / "compare"
    assert main(["report", *runs, "--db", str(db), "--html", str(folder)]) == 0

    shot = tmp_path / "ten-runs.png"
    seen, errors = open_in_chromium(chromium, tmp_path, probe_copy(folder / "index.html"), screenshot=shot)

    assert errors == [], f"script errors in the page: {errors}"
    assert seen["status"] == "", seen["status"]  # the browser read its index (no "Could not read ...")
    total = RUNS * EPISODES
    assert seen["info"] == f"episodes 1–50 of {total} · page 1 of {-(-total // 50)}"
    assert seen["rows"] == 50
    assert seen["tables"] >= 4 and seen["charts"] >= 1  # runs, side by side, paired, cost; a bar chart
    width, height, rows = decode_png(shot.read_bytes())
    pixels = [p for row in rows for p in row]
    assert width == 1200 and height > 1000  # the window, less what headless keeps for itself
    assert len(set(pixels)) > 50, "the screenshot is (nearly) blank"
    # The comparison's first bar colour (Okabe-Ito blue) is on screen: a chart was drawn, not only text.
    assert sum(1 for p in pixels if p == (0x00, 0x72, 0xB2)) > 200
