"""Reports: statistics, the generic sections with a suite's own, HTML (in headless chromium too), SVG
figures and run comparisons. Runs and synthetic runs of the tiny suite (tests/tiny_suite); its report
section is one table. Each benchmark's own section is tested in tests/suites/<name>/."""

import json
import re
import struct
import zlib
from html import unescape as html_unescape
from urllib.parse import quote

import pytest
from browser import headless
from tiny_suite import suite as tiny_suite
from tiny_suite.synthetic import write_synthetic_run

from mcp_resili.cli import main
from mcp_resili.client.runner import RunConfig, execute
from mcp_resili.registry.loader import find_suite
from mcp_resili.report.build import load_report
from mcp_resili.report.compare import load_comparison
from mcp_resili.report.episodes import CHUNK_SIZE, unpack
from mcp_resili.report.html import PACKED_TYPE, render_html
from mcp_resili.report.section import ChartBlock
from mcp_resili.report.stats import mcnemar_exact, mean_interval
from mcp_resili.store import Store


@pytest.fixture(scope="module")
def tiny_db(tmp_path_factory):
    """The oracle and the naive agent, 2 trials of the tiny suite's 6 tasks under its faults: 24 episodes."""
    import anyio

    db = tmp_path_factory.mktemp("report") / "r.db"
    anyio.run(lambda: execute(RunConfig(suite="tiny", db=db, trials=2, seed=3), suite=tiny_suite()))
    return db


def test_levels_sort_in_their_natural_order_not_alphabetically():
    from mcp_resili.report.summary import summarize
    from mcp_resili.store import EpisodeRow
    from mcp_resili.suites.resilibench.report import resilibench_sections
    from mcp_resili.tasks.order import natural_sorted

    assert natural_sorted(["hard", "easy", "medium"]) == ["easy", "medium", "hard"]
    assert natural_sorted(["L10", "L2", "L1"]) == ["L1", "L2", "L10"]
    assert natural_sorted(["protocol:heavy", "none", "protocol:light", "protocol:medium"]) == [
        "none",
        "protocol:light",
        "protocol:medium",
        "protocol:heavy",
    ]
    complexity = {"t1": "hard", "t2": "easy", "t3": "medium"}
    rows = [
        EpisodeRow(
            "r",
            f"r/{task}/{faults}",
            "m",
            faults,
            "baseline",
            task,
            0,
            "completed",
            "full",
            1.0,
            {"components": {}, "reasons": []},
            "",
        )
        for task in complexity
        for faults in ("protocol:medium", "protocol:heavy", "protocol:light")
    ]
    groups = summarize(rows, ["complexity"], lambda task: {"complexity": complexity[task]})
    assert [(g.faults, g.breakdown["complexity"]) for g in groups[:3]] == [
        ("protocol:light", "easy"),
        ("protocol:light", "medium"),
        ("protocol:light", "hard"),
    ]
    assert [g.faults for g in groups[::3]] == ["protocol:light", "protocol:medium", "protocol:heavy"]

    class Known:
        def __init__(self, task_id):
            self.task_type, self.complexity = "t", complexity[task_id]

    (section,) = resilibench_sections(rows, Known)
    assert list(section.data["by_complexity"]) == ["m · easy", "m · medium", "m · hard"]


def test_mcnemar_exact_by_hand():
    pairs = [(True, True)] * 9 + [(False, True)] * 7
    test = mcnemar_exact(pairs)
    assert (test.both, test.only_a, test.only_b, test.neither) == (9, 0, 7, 0)
    assert test.p_value == pytest.approx(2 / 2**7)
    # 3 vs 1 discordant: p = 2 · (C(4,0) + C(4,1)) / 16 = 0.625.
    assert mcnemar_exact([(True, False)] * 3 + [(False, True)]).p_value == pytest.approx(0.625)
    assert mcnemar_exact([(True, True), (False, False)]).p_value == 1.0


def test_mean_interval_is_wilsons_on_the_rescaled_mean_and_never_collapses_to_a_point():
    mean, low, high = mean_interval([0.0, 1.0, 1.0, 1.0])
    assert low < mean == 0.75 < high
    # By hand, Wilson at p = 0, n = 3, z² = 3.8415: centre = (z²/6)/(1 + z²/3) = 0.64025/2.28049 =
    # 0.28075 and half-width = z·√(z²/36)/2.28049 = 0.28075, so [0, 0.5615]; all ones mirror it.
    assert mean_interval([0.0, 0.0, 0.0]) == pytest.approx((0.0, 0.0, 0.5615), abs=1e-4)
    assert mean_interval([1.0, 1.0, 1.0]) == pytest.approx((1.0, 0.4385, 1.0), abs=1e-4)
    # Kendall's τ lives in [-1, 1]: three reversed orders give [-1, -1 + 2 · 0.5615].
    assert mean_interval([-1.0] * 3, (-1.0, 1.0)) == pytest.approx((-1.0, -1.0, 0.1230), abs=1e-4)
    # One value: p = 0.4, n = 1: centre = (0.4 + z²/2)/(1 + z²) = 0.47934, half = 0.44354.
    assert mean_interval([0.4]) == pytest.approx((0.4, 0.0358, 0.9229), abs=1e-4)
    assert mean_interval([]) is None


def test_a_suites_report_has_levels_its_own_section_workflow_metrics_pairs_and_cost(tiny_db):
    report = load_report(tiny_db, find_suite=find_suite)
    data = report.to_dict()["sections"]
    assert list(data) == ["outcomes", "tiny", "workflow", "paired", "cost"]  # the suite's own second
    groups = {g["model"]: g for g in data["outcomes"]["groups"]}
    assert groups["scripted:oracle"]["levels"]["full"]["n"] == 12
    low, high = groups["scripted:naive"]["levels"]["full"]["ci95"]
    assert 0 <= low <= groups["scripted:naive"]["levels"]["full"]["rate"] <= high <= 1
    assert data["tiny"]["steps_done"]["scripted:oracle"] == 1.0 > data["tiny"]["steps_done"]["scripted:naive"]
    assert len(data["workflow"]["episodes"]) == 24  # every scored episode has workflow metrics
    oracle_wf = data["workflow"]["cells"]["scripted:oracle · tiny · baseline"]
    assert oracle_wf["chain_f1"]["mean"] == 1.0
    naive_wf = data["workflow"]["cells"]["scripted:naive · tiny · baseline"]
    assert naive_wf["chain_f1"]["mean"] < 1.0
    (pair,) = data["paired"]["pairs"]
    assert pair["pairs"] == 12
    # Counts agree with the stored labels cell by cell.
    store = Store(tiny_db)
    rows = store.episodes(report.run.id)
    store.close()
    full = {(r.model, r.task_id, r.trial): r.label == "full" for r in rows}
    only_oracle = sum(
        1
        for (m, t, k), ok in full.items()
        if m == "scripted:oracle" and ok and not full[("scripted:naive", t, k)]
    )
    assert pair["only_b"] == only_oracle
    assert data["cost"]["scripted:oracle"]["infrastructure_errors"]["count"] == 0


def test_report_cli_json_and_errors(tiny_db, tmp_path, capsys):
    assert main(["report", "--db", str(tiny_db), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["suite"] == "tiny" and payload["episodes"] == 24
    assert main(["report", "nope", "--db", str(tiny_db)]) == 2
    assert payload["run_id"] in capsys.readouterr().err  # recent runs are listed
    missing = tmp_path / "none.db"
    assert main(["report", "--db", str(missing)]) == 2
    assert not missing.exists()
    assert main(["report", "--db", str(tiny_db)]) == 0
    assert "Paired comparison" in capsys.readouterr().out


def inline_episodes(html):
    """(index, episode details in index order) embedded in a one-file page."""
    index = unpack(html.split('id="episode-index">', 1)[1].split("</script>", 1)[0])
    chunks = re.findall(rf'<script type="{PACKED_TYPE}" id="chunk-(\d+)">(.*?)</script>', html, re.S)
    details = [d for _, text in sorted(chunks, key=lambda c: int(c[0])) for d in unpack(text)]
    return index, details


def test_html_is_self_contained_and_embeds_every_episode_once(tiny_db):
    html = render_html(load_report(tiny_db, find_suite=find_suite))
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert "<script src" not in html
    index, details = inline_episodes(html)
    assert len(index["rows"]) == len(details) == 24
    ids = [row[index["fields"].index("id")] for row in index["rows"]]
    assert ids == [d["id"] for d in details] and len(set(ids)) == 24


def decode_png(data):
    """(width, height, rows of RGB tuples) of an 8-bit RGB/RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert depth == 8 and colour in (2, 6)
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = prev[i]
            up_left = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)) & 255
        rows.append([tuple(line[x * bpp : x * bpp + 3]) for x in range(width)])
        prev = line
    return width, height, rows


def test_html_report_renders_in_headless_chromium_with_charts_drawn_and_an_episode_open(
    tiny_db, tmp_path, chromium
):
    page = tmp_path / "report.html"
    assert main(["report", "--db", str(tiny_db), "--html", str(page)]) == 0
    _, details = inline_episodes(page.read_text())
    faulted = next(
        e for e in details if any(ev.get("event") == "tool_call" and ev.get("fault") for ev in e["events"])
    )
    url = f"{page.as_uri()}#episode={quote(faulted['id'], safe='')}"
    dom = headless(chromium, tmp_path, "--virtual-time-budget=5000", "--dump-dom", url).stdout
    charts = page.read_text().count('<svg class="chart"')
    # The generic sections' charts: outcome bars and stacked levels, workflow metrics, cost.
    assert charts == 4 and dom.count('<svg class="chart"') == charts
    marks = page.read_text().count('class="mark"')
    assert marks >= 8 and dom.count('class="mark"') == marks
    opened = re.search(
        r'<div id="episode" data-episode="([^"]+)">(.*?)</div>\s*<div class="pager">', dom, re.S
    )
    assert opened is not None, "the episode view did not open from the URL hash"
    assert opened.group(1) == faulted["id"]
    body = opened.group(2)
    assert "injected fault" in body and "Judge reasons" in body
    assert body.count('class="event call') == sum(1 for ev in faulted["events"] if ev["event"] == "tool_call")
    turns = sum(1 for ev in faulted["events"] if ev["event"] == "model_turn")
    assert turns > 0 and body.count('class="event turn"') == turns

    shot = tmp_path / "shot.png"
    headless(chromium, tmp_path, "--window-size=1000,1400", f"--screenshot={shot}", page.as_uri())
    width, height, rows = decode_png(shot.read_bytes())
    pixels = [p for row in rows for p in row]
    assert (width, height) == (1000, 1400)
    assert len(set(pixels)) > 50, "the screenshot is (nearly) blank"
    # The bar charts' fills (Okabe–Ito blue and green) are on screen: the SVG was drawn.
    assert sum(1 for p in pixels if p == (0x00, 0x72, 0xB2)) > 500
    assert sum(1 for p in pixels if p == (0x00, 0x9E, 0x73)) > 500


def synthetic_trace(episode, result_text):
    from mcp_resili.trace import ToolCallEvent, Trace, TraceHeader

    header = TraceHeader(
        suite="elsewhere", task="t1", episode=episode, seed=0, fault_plan={}, fault_key="t1/0"
    )
    call = ToolCallEvent(
        episode=episode, seq=0, tool="lookup", arguments={}, is_error=False, result={"text": result_text}
    )
    return Trace(header=header, events=(call,)).to_jsonl()


HOSTILE = "</script><script>document.title='pwned'</script><b>bold</b>"


def hostile_db(tmp_path):
    """A run of a suite with no report hook: one valid episode and one infrastructure error."""
    from mcp_resili.store import EpisodeRow

    db = tmp_path / "s.db"
    store = Store(db)
    store.add_run("run1", "2026-01-01T00:00:00", "elsewhere", 0, {})
    hostile = HOSTILE
    for model, label in (("m1", "full"), ("m2", None)):
        store.add_episode(
            EpisodeRow(
                run_id="run1",
                episode_id=f"run1/{model}/t1/0",
                model=model,
                faults="none",
                variant="baseline",
                task_id="t1",
                trial=0,
                termination="completed" if label else "infrastructure_error",
                label=label,
                value=1.0 if label else None,
                score={"reasons": [hostile], "components": {}} if label else None,
                trace=synthetic_trace(f"run1/{model}/t1/0", hostile),
            )
        )
    store.close()
    return db


def test_a_suite_without_a_hook_gets_generic_sections_and_hostile_text_stays_data(tmp_path):
    hostile = HOSTILE
    report = load_report(hostile_db(tmp_path), "run1")
    assert [s.id for s in report.sections] == ["outcomes", "workflow", "paired", "cost"]
    assert report.to_dict()["sections"]["cost"]["m2"]["infrastructure_errors"]["count"] == 1
    assert report.to_dict()["sections"]["paired"]["pairs"] == []  # m2 has no valid outcome to pair
    html = render_html(report)
    assert hostile not in html and "<b>bold</b>" not in html
    _, details = inline_episodes(html)
    assert details[0]["reasons"] == [hostile]


def test_hostile_episode_text_is_shown_not_run_in_chromium(tmp_path, chromium):
    page = tmp_path / "hostile.html"
    assert main(["report", "run1", "--db", str(hostile_db(tmp_path)), "--html", str(page)]) == 0
    url = f"{page.as_uri()}#episode={quote('run1/m1/t1/0', safe='')}"
    dom = headless(chromium, tmp_path, "--virtual-time-budget=5000", "--dump-dom", url).stdout
    assert "pwned" not in dom.split("</title>", 1)[0]
    view = dom.split('<div id="episode"', 1)[1].split('<div class="pager">', 1)[0]
    assert "&lt;/script&gt;&lt;script&gt;document.title" in view


def test_the_episode_view_shows_numbers_for_people_not_float_noise(tmp_path, chromium):
    from mcp_resili.store import EpisodeRow

    db = tmp_path / "n.db"
    store = Store(db)
    store.add_run("run1", "2026-01-01T00:00:00", "elsewhere", 0, {})
    noisy = 0.1 * 7.2  # 0.7200000000000001
    assert repr(noisy) == "0.7200000000000001"
    store.add_episode(
        EpisodeRow(
            run_id="run1",
            episode_id="run1/m1/t1/0",
            model="m1",
            faults="none",
            variant="baseline",
            task_id="t1",
            trial=0,
            termination="completed",
            label="partial",
            value=noisy,
            score={"reasons": [], "components": {"share": 0.1 + 0.2, "calls": 3}},
            trace=synthetic_trace("run1/m1/t1/0", "ok"),
        )
    )
    store.close()
    page = tmp_path / "numbers.html"
    assert main(["report", "run1", "--db", str(db), "--html", str(page)]) == 0
    url = f"{page.as_uri()}#episode={quote('run1/m1/t1/0', safe='')}"
    dom = headless(chromium, tmp_path, "--virtual-time-budget=5000", "--dump-dom", url).stdout
    view = dom.split('<div id="episode"', 1)[1].split('<div class="pager">', 1)[0]
    assert "outcome: partial (0.72)" in view
    assert 'score components: {"share":0.3,"calls":3}' in html_unescape(view)
    assert "0000000" not in view


LONG_MODEL = "anthropic:claude-sonnet-4-5-20250929-served-through-a-very-long-named-gateway-deployment"


@pytest.fixture(scope="module")
def two_runs_db(tmp_path_factory):
    """Two synthetic runs of the same matrix (two models, one with a very long name), other seeds."""
    db = tmp_path_factory.mktemp("compare") / "c.db"
    matrix = {"models": (LONG_MODEL, "scripted:naive"), "faults": ("tiny",), "variants": ("baseline",)}
    # 2 models x 6 tasks = 12 cells: 20 trials of each, then 12.
    write_synthetic_run(db, 240, run_id="run-a", seed=1, **matrix)
    write_synthetic_run(db, 144, run_id="run-b", seed=2, **matrix)
    return db


def test_two_runs_are_compared_side_by_side_and_paired_where_tasks_match(two_runs_db, capsys):
    assert main(["report", "run-a", "run-b", "--db", str(two_runs_db), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in data["runs"]] == ["run-a", "run-b"] and data["episodes"] == 384
    assert list(data["sections"]) == ["runs", "side-by-side", "paired-runs", "cost"]
    cell = data["sections"]["side-by-side"]["cells"][f"{LONG_MODEL} · tiny · baseline"]
    assert cell["run-a"]["episodes"] == 120 and cell["run-b"]["episodes"] == 72
    store = Store(two_runs_db)
    rows = {run: store.episodes(run) for run in ("run-a", "run-b")}
    store.close()
    for pair in data["sections"]["paired-runs"]["pairs"]:
        assert pair["model_a"] == pair["model_b"] and pair["same_seed"] is False

        def full(run, model=pair["model_a"]):
            return {
                (r.task_id, r.trial, r.faults, r.variant): r.label == "full"
                for r in rows[run]
                if r.model == model and r.label is not None
            }

        a, b = full("run-a"), full("run-b")
        shared = set(a) & set(b)
        assert pair["pairs"] == len(shared) > 0  # run-b's 12 trials per task are run-a's first 12
        assert pair["only_a"] == sum(1 for c in shared if a[c] and not b[c])
        assert pair["only_b"] == sum(1 for c in shared if b[c] and not a[c])
        assert 0 <= pair["p_value"] <= 1


def test_comparing_a_run_with_itself_or_breaking_a_comparison_down_is_refused(two_runs_db, capsys):
    assert main(["report", "run-a", "run-a", "--db", str(two_runs_db)]) == 2
    assert main(["report", "run-a", "run-b", "--by", "flaw", "--db", str(two_runs_db)]) == 2
    assert capsys.readouterr().err.count("\n") == 2


def test_the_report_folder_page_does_not_grow_with_the_number_of_episodes(tmp_path):
    from mcp_resili.report.html import write_folder

    matrix = {"models": ("scripted:oracle", "scripted:naive"), "faults": ("none",), "variants": ("baseline",)}
    sizes = {}
    for episodes in (72, 432):  # 6 and 36 trials of the same 12 cells (2 models x 6 tasks)
        db = tmp_path / f"{episodes}.db"
        write_synthetic_run(db, episodes, **matrix)
        folder = tmp_path / f"report-{episodes}"
        page = write_folder(load_report(db, find_suite=find_suite), folder)
        (generation,) = (folder / "episodes").iterdir()  # the one the page loads: episodes/GEN/
        assert f'data-source="episodes/{generation.name}/"' in page.read_text()
        chunks = sorted(generation.glob("chunk-*.js"))
        assert len(chunks) == -(-episodes // CHUNK_SIZE)  # every episode's detail is in a chunk
        sizes[episodes] = (page.stat().st_size, (generation / "index.js").stat().st_size)
    (small_page, small_index), (big_page, big_index) = sizes[72], sizes[432]
    assert abs(big_page - small_page) < 0.02 * small_page  # only the numbers in the tables change
    assert (big_index - small_index) / 360 < 150  # the index costs ~100 bytes per episode


def test_a_one_file_page_past_the_size_limit_is_refused_and_the_folder_works(
    tiny_db, tmp_path, capsys, monkeypatch
):
    import mcp_resili.report.html as html_module

    # The 24 episodes need ~38 kB in one page (packed), its page without them ~28 kB.
    monkeypatch.setattr(html_module, "PAGE_LIMIT", 33_000)
    page = tmp_path / "report.html"
    assert main(["report", "--db", str(tiny_db), "--html", str(page)]) == 2
    assert "--html DIR" in capsys.readouterr().err and not page.exists()
    assert main(["report", "--db", str(tiny_db), "--html", str(tmp_path / "folder")]) == 0
    assert (tmp_path / "folder" / "index.html").stat().st_size < 33_000


def test_svg_figures_are_standalone_documents_with_axis_titles_and_legends(tiny_db, tmp_path):
    from xml.etree import ElementTree

    figures = tmp_path / "figures"
    assert main(["report", "--db", str(tiny_db), "--svg", str(figures)]) == 0
    report = load_report(tiny_db, find_suite=find_suite)
    charts = [b for s in report.sections for b in s.blocks if isinstance(b, ChartBlock)]
    files = sorted(figures.glob("*.svg"))
    assert len(files) == len(charts) == 4
    svg = "{http://www.w3.org/2000/svg}"
    for path in files:
        root = ElementTree.parse(path).getroot()
        assert root.tag == f"{svg}svg" and root.get("font-family")
        texts = [t.text for t in root.iter(f"{svg}text")]
        if root.get("data-chart") == "bars":
            assert any(t and "(%" in t for t in texts) or "Chain F1" in texts  # an axis title with its unit
            assert "95% interval" in texts  # the whiskers are explained
        if root.get("data-chart") == "stacked":
            assert {"full", "partial", "failure"} <= set(texts)


def test_no_heading_repeats_its_section_in_the_terminal_or_the_page(tiny_db, capsys):
    assert main(["report", "--db", str(tiny_db)]) == 0
    out = capsys.readouterr().out
    report = load_report(tiny_db, find_suite=find_suite)
    for section in report.sections:
        assert f"{section.title}: {section.title}" not in out
    html = render_html(report)
    h2 = re.findall(r"<h2>(.*?)</h2>", html)
    assert len(h2) == len(set(h2))
    for section in re.findall(r"<section id=[^>]*><h2>(.*?)</h2>(.*?)</section>", html, re.S):
        title, body = section
        h3 = re.findall(r"<h3>(.*?)</h3>", body)
        assert len(h3) == len(set(h3)) and not any(h.startswith(title) for h in h3)


#: Injected into a copy of a report page: once the browser shows its rows (and the episode named in
#: the URL, if any), measure every rendered box and drive the episode browser, then write the
#: results into the DOM as JSON for --dump-dom to carry out.
MEASURE = r"""<script>
window.addEventListener('load', function(){
  const start = Date.now();
  const info = () => document.getElementById('page-info').textContent;
  function column(key){
    const at = [...document.querySelectorAll('#episode-table th')].findIndex(th => th.dataset.key === key);
    return [...document.querySelectorAll('#episode-table tbody tr')].map(tr => tr.children[at].textContent);
  }
  function settle(){
    const rows = document.querySelectorAll('#episode-table tbody tr').length;
    const opened = !location.hash || document.querySelector('#episode h3');
    if((!rows || !opened) && Date.now() - start < 10000) return setTimeout(settle, 50);
    measure();
  }
  function measure(){
    const out = {clipped: [], overflow: [], invisible: [], texts: 0, marks: 0};
    for(const svg of document.querySelectorAll('svg.chart')){
      const box = svg.viewBox.baseVal;
      for(const t of svg.querySelectorAll('text')){
        const b = t.getBBox(); out.texts++;
        if(b.x < -0.5 || b.y < -0.5 || b.x + b.width > box.width + 0.5 || b.y + b.height > box.height + 0.5)
          out.clipped.push(t.textContent + ' at ' + [b.x, b.y, b.width, b.height].map(Math.round) +
            ' in ' + box.width + 'x' + box.height);
      }
      for(const mark of svg.querySelectorAll('rect.mark')){
        out.marks++;
        const r = mark.getBoundingClientRect(), style = getComputedStyle(mark);
        const blank = ['none', 'rgb(255, 255, 255)'].includes(style.fill) && style.stroke === 'none';
        if(r.width < 1 || r.height < 1 || blank) out.invisible.push(mark.textContent);
      }
    }
    for(const e of document.querySelectorAll('h1,h2,h3,p,li,td,th,pre,div,label,figure,section,nav')){
      if(e.closest('svg') || !e.getClientRects().length || e.clientWidth === 0) continue;
      if(getComputedStyle(e).overflowX === 'auto') continue;  // a wide table's box: it scrolls
      if(e.scrollWidth > e.clientWidth + 1)
        out.overflow.push(e.tagName + ' ' + e.textContent.slice(0, 60) + ' ' + e.scrollWidth + '>' +
          e.clientWidth);
    }
    // A word of a table cell drawn on two lines was broken mid-way ("neithe/r"): words are runs of
    // letters, digits and colons (a long name may still wrap at its hyphens, dots or spaces).
    out.broken = [];
    for(const cell of document.querySelectorAll('td,th')){
      if(cell.closest('svg')) continue;
      const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
      for(let node = walker.nextNode(); node; node = walker.nextNode()){
        for(const m of node.data.matchAll(/[\p{L}\p{N}:]+/gu)){
          const range = document.createRange();
          range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
          const boxes = [...range.getClientRects()].filter(r => r.width > 0);
          const tops = new Set(boxes.map(r => Math.round(r.top)));
          if(tops.size > 1) out.broken.push(m[0]);
        }
      }
    }
    out.page_overflow = document.documentElement.scrollWidth - window.innerWidth;
    out.headings = [...document.querySelectorAll('h2,h3')].map(h => h.tagName + ' ' + h.textContent);
    out.episode = document.querySelector('#episode h3') ? {
      title: document.querySelector('#episode h3').textContent,
      calls: document.querySelectorAll('#episode .event.call').length,
      faults: document.querySelectorAll('#episode .event.fault').length} : null;
    out.first = {rows: column('model').length, info: info()};
    const sort = document.querySelector('th[data-key="chain_f1"] button');
    sort.click(); out.up = column('chain_f1');
    sort.click(); out.down = column('chain_f1');
    out.sorted = document.querySelector('th[data-key="chain_f1"]').getAttribute('aria-sort');
    const facet = document.querySelector('select[data-facet="model"]');
    facet.value = facet.options[2].value; facet.dispatchEvent(new Event('change'));
    out.facet = {value: facet.value, models: [...new Set(column('model'))], info: info()};
    document.getElementById('next').click();
    out.next = {info: info(), rows: column('model').length};
    out.facets = [...document.querySelectorAll('select[data-facet]')].map(s => s.dataset.facet);
    const pre = document.createElement('pre'); pre.id = 'measured'; pre.textContent = JSON.stringify(out);
    document.body.append(pre);
  }
  settle();
});
</script>"""


def measured(chromium, tmp_path, page, fragment=""):
    """Load a copy of ``page`` with `MEASURE` in it; the measurements as a dict."""
    probe = page.with_name("probe-" + page.name)
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    url = probe.as_uri() + fragment
    dom = headless(
        chromium, tmp_path, "--window-size=1000,1200", "--virtual-time-budget=15000", "--dump-dom", url
    )
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom.stdout, re.S)
    assert found is not None, "the measuring script did not finish"
    return json.loads(html_unescape(found.group(1)))


def assert_nothing_clipped(seen):
    assert seen["texts"] > 10 and seen["marks"] > 2  # charts were drawn and measured
    assert seen["clipped"] == [], "chart text outside its SVG"
    assert seen["invisible"] == [], "a chart mark with no visible box (a zero drawn as nothing?)"
    assert seen["overflow"] == [], "text wider than its box"
    assert seen["page_overflow"] <= 0, "the page is wider than the window"
    assert seen["broken"] == [], "words of table cells broken mid-way"
    assert len(seen["headings"]) == len(set(seen["headings"]))


def test_a_compared_report_folder_loads_episodes_on_demand_and_its_browser_sorts_facets_and_pages(
    two_runs_db, tmp_path, chromium
):
    folder = tmp_path / "compare"
    assert main(["report", "run-a", "run-b", "--db", str(two_runs_db), "--html", str(folder)]) == 0
    page = folder / "index.html"
    assert 'id="episode-index"' not in page.read_text()  # the episodes live in episodes/, loaded on demand
    assert re.search(r'data-source="episodes/[0-9a-f]{16}/"', page.read_text())  # in their generation folder
    report = load_comparison(two_runs_db, ["run-a", "run-b"])
    target = report.rows[250]  # in the third chunk, which the page must fetch when it is opened
    calls = sum(1 for line in target.trace.splitlines() if '"event":"tool_call"' in line)
    seen = measured(chromium, tmp_path, page, f"#episode={quote(target.episode_id, safe='')}")

    assert_nothing_clipped(seen)
    assert seen["episode"]["title"] == f"Episode {target.episode_id}" and seen["episode"]["calls"] == calls
    assert seen["first"] == {"rows": 50, "info": "episodes 1–50 of 384 · page 1 of 8"}
    assert seen["facets"] == ["run", "model", "faults", "variant", "label"]
    up = [float(v) for v in seen["up"] if v != "–"]
    down = [float(v) for v in seen["down"] if v != "–"]
    assert up == sorted(up) and down == sorted(down, reverse=True) and up[0] < down[0]
    assert seen["sorted"] == "descending"
    assert len(seen["facet"]["models"]) == 1 and seen["facet"]["models"][0] == seen["facet"]["value"]
    assert seen["facet"]["info"] == "episodes 1–50 of 192 (filtered from 384) · page 1 of 4"
    assert seen["next"] == {"info": "episodes 51–100 of 192 (filtered from 384) · page 2 of 4", "rows": 50}


def test_long_labels_zero_cells_and_heatmap_titles_are_drawn_whole_in_chromium(
    two_runs_db, tmp_path, chromium
):
    from dataclasses import replace

    from mcp_resili.report.html import write_html
    from mcp_resili.report.section import ReportSection
    from mcp_resili.report.svg import heatmap

    report = load_report(two_runs_db, "run-a", find_suite=find_suite)
    # A ToolMaze-style heatmap: a long title over a narrow grid, with zero and missing cells.
    values = {("parameter_drift", "L1"): 0.0, ("P2", "L1"): 1.0, ("P2", "L2"): 0.0}
    title = f"{LONG_MODEL} · flawed:sequence_disorder: TSR"
    extra = ReportSection(
        id="heat",
        title="Heatmap",
        blocks=(
            ChartBlock(
                "heat", heatmap(title, ["parameter_drift", "P2"], ["L1", "L2"], values, "mode", "level")
            ),
        ),
    )
    page = write_html(replace(report, sections=(*report.sections, extra)), tmp_path / "run.html")
    html = page.read_text()
    assert LONG_MODEL in html and title in html
    seen = measured(chromium, tmp_path, page)
    assert_nothing_clipped(seen)
    assert seen["first"]["info"] == "episodes 1–50 of 240 · page 1 of 5"


def test_svg_figures_of_an_earlier_report_are_replaced_not_mixed_in_and_other_files_stay(tiny_db, tmp_path):
    from mcp_resili.report.html import write_figures

    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "01-my-own-figure.svg").write_text("<svg/>")  # the user's, not ours: never touched
    report = load_report(tiny_db, find_suite=find_suite)
    first = write_figures(report, figures)
    stale = figures / "99-an-older-report-chart.svg"
    (figures / ".mcp-resili-figures").write_text("\n".join([*(p.name for p in first), stale.name]))
    stale.write_text("<svg/>")
    second = write_figures(report, figures)
    assert sorted(figures.glob("*.svg")) == sorted([*second, figures / "01-my-own-figure.svg"])
