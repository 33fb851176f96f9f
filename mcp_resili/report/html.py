"""The report as HTML: one self-contained file for small runs, or a folder that scales to any run.

No network is needed to view either: no CDN, no fonts, no external script; a Content-Security-Policy
forbids loading anything but the report's own files. Charts are inline SVG. The episode browser is
a few lines of vanilla JavaScript over a compact index of the episodes (`mcp_resili.report.episodes`):
it sorts (click a column), facets (run, model, faults, variant, outcome), searches and pages; a
click on a row (or opening the page at ``#episode=ID``) shows the episode's turns, tool calls,
injected faults and judge reasons. Everything from the data is inserted with ``textContent``,
never parsed as HTML.

* ``--html report.html``: one file with everything inline; refused (`ReportError`) when it would
  pass `PAGE_LIMIT` bytes, with the folder form suggested.
* ``--html DIR``: ``DIR/index.html`` (sections and the browser, the same size whatever the number of
  episodes) and its generation folder ``DIR/episodes/GEN/``: ``index.js`` (the index) and
  ``chunk-NNNNN.js`` (details of `CHUNK_SIZE` episodes each, loaded when one of them is opened).
  ``GEN`` is the start of a SHA-256 of those files, so the same report gets the same names. Scripts,
  not JSON, so that the folder also works opened from disk (``file://``), where browsers refuse to
  fetch files. A new report goes into a generation folder of its own, and replacing ``index.html``
  (which names it) is the one step that switches to it: readers, and a crash at any moment, see the
  earlier report whole or the new one whole (`write_folder`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
from html import escape
from pathlib import Path

from mcp_resili.report.build import Report, ReportError
from mcp_resili.report.episodes import CHUNK_SIZE, pack, packed_details
from mcp_resili.report.section import ChartBlock, NoteBlock, TableBlock

#: Largest page (bytes) the report writes as one file; the folder form has no limit.
PAGE_LIMIT = 10_000_000

#: The type of the inline script elements holding packed data (`pack`): data, never run.
PACKED_TYPE = "application/x-mcp-resili-packed"

#: Nothing may load from anywhere but the report's own folder.
_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'self' 'unsafe-inline'; img-src data:"

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1180px;padding:16px 24px;color:#1b1b1b}
h1{font-size:22px;margin:8px 0}
h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:28px}
h3{font-size:14px;margin:14px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px;max-width:100%}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top;overflow-wrap:break-word}
th{background:#f3f3f3}td.num{text-align:right}.table-box{overflow-x:auto;max-width:100%}
tr.ep{cursor:pointer}tr.ep:hover{background:#eef5ff}tr.ep.open{background:#dbeaff}
th button{all:unset;cursor:pointer;font-weight:bold}th[aria-sort=ascending] button::after{content:" ▲"}
th[aria-sort=descending] button::after{content:" ▼"}
.charts{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}.charts figure{margin:0;max-width:100%}
svg.chart{max-width:100%;height:auto}
.note{color:#444;max-width:900px}
#episode div,.meta{overflow-wrap:anywhere}
.meta{color:#555}.full{color:#007a55}.partial{color:#a86b00}.failure{color:#b23c00}.infra{color:#666}
#controls{display:flex;flex-wrap:wrap;gap:8px 16px;align-items:center;margin:8px 0}
#controls select,#controls input{font:inherit;padding:2px 4px;max-width:100%}#facets{display:contents}
#filter{width:22em}
.pager{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin:6px 0}
#episode{border:1px solid #bbb;border-radius:6px;padding:10px 14px;margin:12px 0;background:#fafafa}
#episode[hidden]{display:none}.event{border-left:3px solid #ccc;padding:2px 8px;margin:6px 0}
.event.fault{border-color:#D55E00;background:#fff3ec}.event.error{border-color:#b23c00}
.event.turn{border-color:#0072B2}.event.finish{border-color:#009E73}
pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font-size:12px}
"""

_JS = r"""
(function(){
  'use strict';
  const section = document.getElementById('episodes');
  const source = section.dataset.source;
  const view = document.getElementById('episode');
  const tbody = document.querySelector('#episode-table tbody');
  const info = document.getElementById('page-info');
  const status = document.getElementById('browser-status');
  const filterBox = document.getElementById('filter');
  const sizeBox = document.getElementById('page-size');
  const hasRun = document.querySelector('#episode-table th[data-key="run"]') !== null;
  const FACETS = [['run', 'run'], ['model', 'model'], ['faults', 'faults'], ['variant', 'variant'],
    ['label', 'outcome']];
  const NUMERIC = new Set(['trial', 'faults_met', 'chain_f1']);
  const chunks = new Map(), waiting = new Map(), wanted = {};
  let episodes = [], byId = new Map(), chunkSize = 100, matching = [], page = 0, sortKey = null, sortDir = 1;

  function el(tag, cls, text){const n = document.createElement(tag); if(cls) n.className = cls;
    if(text !== undefined) n.textContent = text; return n;}
  function pre(value){
    return el('pre', null, typeof value === 'string' ? value : JSON.stringify(value, null, 1));}
  // Numbers for people: at most four decimals, no float noise (0.72, never 0.7200000000000001).
  function num(v){return typeof v === 'number' && !Number.isInteger(v) ? String(+v.toFixed(4)) : String(v);}
  // Levels in their order (full before partial, easy before medium before hard), numbers by value.
  const RANK = new Map([['none', 0], ['full', 1], ['easy', 1], ['low', 1], ['light', 1], ['partial', 2],
    ['medium', 2], ['moderate', 2], ['failure', 3], ['hard', 3], ['high', 3], ['heavy', 3], ['severe', 3],
    ['infrastructure error', 4]]);
  function natural(a, b){
    const x = String(a), y = String(b), rx = RANK.get(x), ry = RANK.get(y);
    if(rx !== undefined && ry !== undefined && rx !== ry) return rx - ry;
    return x.localeCompare(y, undefined, {numeric: true});
  }
  function outcome(label){return label === null ? 'infrastructure error' : label;}
  function facet(ep, key){return key === 'label' ? outcome(ep.label) : ep[key];}
  // The index and the chunks come packed (JSON, gzip, base64: mcp_resili.report.episodes.pack).
  async function unpack(text){
    const bytes = Uint8Array.from(atob(text.trim()), c => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
    return JSON.parse(await new Response(stream).text());
  }
  function failed(error){status.textContent = 'Could not read the episodes: ' + error +
    (typeof DecompressionStream === 'undefined' ? ' (this browser has no DecompressionStream)' : '');}
  function load(src){
    const s = document.createElement('script'); s.src = src;
    s.onerror = () => {status.textContent = 'Could not load ' + src +
      ': keep the episodes/ folder next to index.html.';};
    document.head.append(s);
  }

  window.mcpResiliIndex = function(packed){unpack(packed).then(showIndex, failed);};
  function showIndex(data){
    chunkSize = data.chunk_size;
    episodes = data.rows.map((row, pos) => {
      const ep = {pos};
      data.fields.forEach((name, i) => {
        ep[name] = data.categorical.includes(name) ? data.values[name][row[i]] : row[i];});
      ep.text = [ep.id, ep.run, ep.model, ep.faults, ep.variant, ep.task, outcome(ep.label),
        ep.termination].join(' ').toLowerCase();
      return ep;
    });
    byId = new Map(episodes.map(e => [e.id, e]));
    facets(); update(); fromHash();
  }
  window.mcpResiliChunk = function(n, packed){
    unpack(packed).then(entries => {
      chunks.set(n, entries); const then = waiting.get(n) || []; waiting.delete(n); then.forEach(f => f());
    }, failed);
  };

  function withChunk(n, then){
    if(chunks.has(n)) return then();
    const first = !waiting.has(n);
    if(first) waiting.set(n, []);
    waiting.get(n).push(then);
    if(!first) return;
    const inline = document.getElementById('chunk-' + n);
    if(inline) window.mcpResiliChunk(n, inline.textContent);
    else load(source + 'chunk-' + String(n).padStart(5, '0') + '.js');
  }

  function facets(){
    const box = document.getElementById('facets');
    for(const [key, title] of FACETS){
      const counts = new Map();
      for(const ep of episodes){const v = facet(ep, key); counts.set(v, (counts.get(v) || 0) + 1);}
      if(key === 'run' && !hasRun) continue;
      const select = el('select'); select.dataset.facet = key;
      select.append(new Option('all (' + episodes.length + ')', ''));
      for(const [v, c] of [...counts].sort((a, b) => natural(a[0], b[0])))
        select.append(new Option(v + ' (' + c + ')', v));
      select.addEventListener('change', () => {wanted[key] = select.value; page = 0; update();});
      const label = el('label', 'facet', title + ' '); label.append(select); box.append(label);
    }
  }

  function compare(a, b){
    if(sortKey === null) return a.pos - b.pos;
    const x = facet(a, sortKey), y = facet(b, sortKey);
    if(NUMERIC.has(sortKey)){
      if(x === null || y === null) return (x === null) - (y === null) || a.pos - b.pos;  // blanks last
      return (x - y) * sortDir || a.pos - b.pos;
    }
    return natural(x, y) * sortDir || a.pos - b.pos;
  }

  function update(){
    const q = filterBox.value.trim().toLowerCase();
    matching = episodes.filter(ep => (!q || ep.text.includes(q)) &&
      FACETS.every(([key]) => !wanted[key] || facet(ep, key) === wanted[key]));
    matching.sort(compare);
    render();
  }

  function row(ep){
    const tr = el('tr', 'ep'); tr.dataset.episode = ep.id;
    tr.classList.toggle('open', view.dataset.episode === ep.id);
    const cells = [...(hasRun ? [ep.run] : []), ep.model, ep.faults, ep.variant, ep.task];
    for(const c of cells) tr.append(el('td', null, c));
    tr.append(el('td', 'num', String(ep.trial)));
    tr.append(el('td', ep.label || 'infra', outcome(ep.label)));
    tr.append(el('td', 'num', String(ep.faults_met)));
    tr.append(el('td', 'num', ep.chain_f1 === null ? '–' : ep.chain_f1.toFixed(2)));
    tr.append(el('td', null, ep.termination));
    tr.addEventListener('click', () => {
      history.replaceState(null, '', '#episode=' + encodeURIComponent(ep.id)); open(ep.id);});
    return tr;
  }

  function render(){
    const size = Number(sizeBox.value), pages = Math.max(1, Math.ceil(matching.length / size));
    page = Math.min(Math.max(page, 0), pages - 1);
    const start = page * size, shown = matching.slice(start, start + size);
    tbody.replaceChildren(...shown.map(row));
    info.textContent = matching.length === 0 ? 'no episode matches (of ' + episodes.length + ')' :
      'episodes ' + (start + 1) + '–' + (start + shown.length) + ' of ' + matching.length +
      (matching.length < episodes.length ? ' (filtered from ' + episodes.length + ')' : '') +
      ' · page ' + (page + 1) + ' of ' + pages;
    document.getElementById('first').disabled = document.getElementById('prev').disabled = page === 0;
    document.getElementById('next').disabled = document.getElementById('last').disabled = page >= pages - 1;
    document.querySelectorAll('#episode-table th[data-key]').forEach(th => th.setAttribute('aria-sort',
      th.dataset.key !== sortKey ? 'none' : sortDir > 0 ? 'ascending' : 'descending'));
  }

  function open(id){
    const ep = byId.get(id); if(!ep) return;
    view.hidden = false; view.dataset.episode = id;
    view.replaceChildren(el('p', 'meta', 'loading episode ' + id + '…'));
    document.querySelectorAll('tr.ep').forEach(r => r.classList.toggle('open', r.dataset.episode === id));
    const n = Math.floor(ep.pos / chunkSize);
    withChunk(n, () => {if(view.dataset.episode === id) detail(chunks.get(n)[ep.pos % chunkSize]);});
  }

  function detail(ep){
    view.replaceChildren();
    view.append(el('h3', null, 'Episode ' + ep.id));
    view.append(el('div', 'meta', (hasRun ? 'run ' + ep.run + ' · ' : '') + ep.model + ' · ' +
      ep.faults + ' · ' + ep.variant + ' · task ' + ep.task + ' · trial ' + ep.trial +
      ' · termination ' + ep.termination));
    view.append(el('div', ep.label || 'infra', 'outcome: ' + outcome(ep.label) +
      (ep.value === null ? '' : ' (' + num(ep.value) + ')')));
    const reasons = el('div', 'reasons'); reasons.append(el('b', null, 'Judge reasons: '));
    reasons.append(document.createTextNode(ep.reasons.length ? ep.reasons.join('; ') : 'none'));
    view.append(reasons);
    if(ep.workflow){view.append(el('div', 'meta', 'workflow: ' + Object.entries(ep.workflow)
      .map(([k, v]) => k + ' ' + (v === null ? 'undefined' : num(v))).join(', ')));}
    view.append(el('div', 'meta', 'score components: ' + JSON.stringify(ep.components,
      (k, v) => typeof v === 'number' ? +v.toFixed(4) : v)));
    for(const ev of ep.events){
      let box;
      if(ev.event === 'model_turn'){
        box = el('div', 'event turn'); box.append(el('b', null, 'turn ' + ev.turn));
        if(ev.text) box.append(pre(ev.text));
        for(const call of ev.tool_calls || []) box.append(pre('→ ' + JSON.stringify(call)));
      } else if(ev.event === 'tool_call'){
        box = el('div', 'event call' + (ev.fault ? ' fault' : '') + (ev.is_error ? ' error' : ''));
        const mark = ev.is_error ? ' ✗ ' + (ev.error_code || 'error') : ' ✓';
        box.append(el('b', null, '#' + ev.seq + ' ' + ev.tool + mark));
        box.append(pre(ev.arguments));
        if(ev.fault){const f = el('div', 'injected'); f.append(el('b', null, 'injected fault: '));
          f.append(document.createTextNode(JSON.stringify(ev.fault))); box.append(f);}
        if(ev.decision) box.append(el('div', 'meta', 'decision: ' + JSON.stringify(ev.decision)));
        if(ev.result !== undefined && ev.result !== null) box.append(pre(ev.result));
      } else if(ev.event === 'finish'){
        box = el('div', 'event finish', 'finish: ' + ev.status + ' ' + (ev.summary || ''));
      } else if(ev.event === 'episode_end'){
        box = el('div', 'event',
          'end: ' + ev.termination + ' after ' + ev.turns + ' turns ' + (ev.detail || ''));
      } else {box = el('div', 'event'); box.append(pre(ev));}
      view.append(box);
    }
    view.scrollIntoView();
  }

  document.querySelectorAll('#episode-table th[data-key] button').forEach(button => {
    button.addEventListener('click', () => {
      const key = button.parentElement.dataset.key;
      sortDir = sortKey === key ? -sortDir : 1; sortKey = key; update();});});
  filterBox.addEventListener('input', () => {page = 0; update();});
  sizeBox.addEventListener('change', () => {page = 0; render();});
  const pageSize = () => Number(sizeBox.value);
  document.getElementById('first').addEventListener('click', () => {page = 0; render();});
  document.getElementById('prev').addEventListener('click', () => {page -= 1; render();});
  document.getElementById('next').addEventListener('click', () => {page += 1; render();});
  document.getElementById('last').addEventListener('click', () => {
    page = Math.ceil(matching.length / pageSize()) - 1; render();});
  function fromHash(){const m = location.hash.match(/^#episode=(.+)$/); if(m) open(decodeURIComponent(m[1]));}
  window.addEventListener('hashchange', fromHash);
  const inline = document.getElementById('episode-index');
  if(inline) window.mcpResiliIndex(inline.textContent); else load(source + 'index.js');
})();
"""


def _table(block: TableBlock) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in block.columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in block.rows)
    # Words are never broken inside a cell ("neithe/r"); a table wider than the page scrolls in its box.
    return (
        f'<h3>{escape(block.title)}</h3><div class="table-box"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def _sections(report: Report) -> str:
    parts = []
    for section in report.sections:
        parts.append(f'<section id="{escape(section.id)}"><h2>{escape(section.title)}</h2>')
        charts = []
        for block in section.blocks:
            if isinstance(block, TableBlock):
                parts.append(_table(block))
            elif isinstance(block, ChartBlock):
                charts.append(f'<figure class="chart-box">{block.svg}</figure>')
            elif isinstance(block, NoteBlock):
                parts.append(f'<p class="note">{escape(block.text)}</p>')
        if charts:
            parts.append('<div class="charts">' + "".join(charts) + "</div>")
        parts.append("</section>")
    return "".join(parts)


def _heading(report: Report) -> str:
    if report.comparison:
        runs = "".join(
            f"<li><b>{escape(r.id)}</b> · suite {escape(r.suite)} · seed {r.seed} · "
            f"{escape(r.created_at)}</li>"
            for r in report.runs
        )
        return f'<h1>mcp-resili comparison of {len(report.runs)} runs</h1><ul class="meta">{runs}</ul>'
    run = report.run
    return (
        f'<h1>mcp-resili report</h1><p class="meta">run <b>{escape(run.id)}</b> · '
        f"suite {escape(run.suite)} · seed {run.seed} · {escape(run.created_at)} · "
        f"{report.episodes} episodes</p>"
    )


def _columns(report: Report) -> str:
    names = [("run", "run")] if report.comparison else []
    names += [
        ("model", "model"),
        ("faults", "faults"),
        ("variant", "variant"),
        ("task", "task"),
        ("trial", "trial"),
        ("label", "outcome"),
        ("faults_met", "faults met"),
        ("chain_f1", "chain F1"),
        ("termination", "termination"),
    ]
    return "".join(
        f'<th data-key="{key}" aria-sort="none"><button type="button">{title}</button></th>'
        for key, title in names
    )


def _page(report: Report, data: str, source: str) -> str:
    """The page; ``data`` holds the inline index and chunks (empty for a folder, read from ``source``)."""
    nav = " · ".join(f'<a href="#{escape(s.id)}">{escape(s.title)}</a>' for s in report.sections)
    title = "comparison " + " vs ".join(r.id for r in report.runs) if report.comparison else report.run.id
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mcp-resili {escape(title)}</title><style>{_CSS}</style></head>
<body>
{_heading(report)}
<nav>{nav} · <a href="#episodes">Episodes</a></nav>
{_sections(report)}
<section id="episodes" data-source="{escape(source)}"><h2>Episodes</h2>
<p class="note">Sort by clicking a column, narrow with the facets and the search box; click a row to see
its turns, tool calls, injected faults and the judge's reasons (or open this page at
<code>#episode=ID</code>).</p>
<div id="controls">
<label>search <input id="filter" type="search" placeholder="task, model, outcome…"></label>
<span id="facets"></span>
<label>per page <select id="page-size"><option>25</option><option selected>50</option><option>100</option>
<option>250</option></select></label></div>
<p id="browser-status" class="note"></p>
<div id="episode" hidden></div>
<div class="pager"><button type="button" id="first">« first</button>
<button type="button" id="prev">‹ previous</button><span id="page-info"></span>
<button type="button" id="next">next ›</button><button type="button" id="last">last »</button></div>
<table id="episode-table"><thead><tr>{_columns(report)}</tr></thead><tbody></tbody></table></section>
{data}
<script>{_JS}</script>
</body></html>
"""


def render_html(report: Report) -> str:
    """The whole report as one self-contained page; `ReportError` past `PAGE_LIMIT` bytes."""
    index, packed = packed_details(report)
    blocks = []
    size = 0
    for n, chunk in enumerate(packed):
        blocks.append(f'<script type="{PACKED_TYPE}" id="chunk-{n}">{chunk}</script>')
        size += len(blocks[-1].encode())
        if size > PAGE_LIMIT:
            raise ReportError(
                f"{report.episodes} episodes do not fit in one HTML file of at most "
                f"{PAGE_LIMIT // 1_000_000} MB: write a folder instead "
                "(--html DIR: index.html, plus episodes loaded on demand)"
            )
    data = f'<script type="{PACKED_TYPE}" id="episode-index">{pack(index.to_dict())}</script>'
    page = _page(report, data + "\n" + "\n".join(blocks), source="")
    if len(page.encode()) > PAGE_LIMIT:
        raise ReportError(
            f"the page would be {len(page.encode()) / 1e6:.1f} MB: write a folder instead (--html DIR)"
        )
    return page


#: Suffix of what is being written: a file ``.NAME.partial`` beside ``NAME``, renamed over it once
#: complete, or a folder ``episodes/.gen-RANDOM.partial`` staging a generation.
PARTIAL_SUFFIX = ".partial"


def _partial(path: Path) -> Path:
    return path.with_name(f".{path.name}{PARTIAL_SUFFIX}")


def _write_replacing(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: a failure mid-write leaves the earlier file as it was."""
    temp = _partial(path)
    try:
        temp.write_text(text, encoding="utf-8")
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


#: Hex digits in a generation folder's name: the start of the SHA-256 of the files in it.
GENERATION_DIGITS = 16

_GENERATION = re.compile(f"[0-9a-f]{{{GENERATION_DIGITS}}}")

#: Data files of the flat layout, straight in ``episodes/``, that versions before generations wrote.
_FLAT = re.compile(r"index\.js|chunk-[0-9]+\.js")


def _write_generation(report: Report, folder: Path) -> str:
    """The index and the chunks, written into ``folder``; returns the generation's name, their hash."""
    digest = hashlib.sha256()

    def put(name: str, text: str) -> None:
        data = text.encode("utf-8")
        digest.update(f"{name}\0{len(data)}\0".encode())  # names and lengths: no two splits hash alike
        digest.update(data)
        (folder / name).write_bytes(data)

    index, packed = packed_details(report)
    for n, chunk in enumerate(packed):
        put(f"chunk-{n:05d}.js", f'mcpResiliChunk({n},"{chunk}");\n')
    put("index.js", f'mcpResiliIndex("{pack(index.to_dict())}");\n')
    return digest.hexdigest()[:GENERATION_DIGITS]


def _retire(generation: Path) -> None:
    """Delete a generation folder, renamed out of the way first.

    So a folder under a generation's name is always complete: a later write of the same content
    reuses it as it finds it.
    """
    trash = generation.with_name(f".{generation.name}-{secrets.token_hex(4)}{PARTIAL_SUFFIX}")
    os.rename(generation, trash)
    shutil.rmtree(trash)


def _remove_unused(directory: Path, generation: str) -> None:
    """Delete what the page, which loads ``episodes/GENERATION/``, does not use.

    Best effort: the new report is already whole and in place, what is left is never loaded, and
    the next write tries again.
    """
    with contextlib.suppress(OSError):
        _partial(directory / "index.html").unlink(missing_ok=True)  # left by a killed write
    episodes = directory / "episodes"
    try:
        with os.scandir(episodes) as found:
            entries = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in found]
    except OSError:
        return
    for name, is_dir in entries:
        path = episodes / name
        staged = name.startswith(".") and name.endswith(PARTIAL_SUFFIX)  # by a killed write
        with contextlib.suppress(OSError):
            if is_dir and name != generation and _GENERATION.fullmatch(name):
                _retire(path)  # an earlier report's data
            elif staged and is_dir:
                shutil.rmtree(path)
            elif staged or (not is_dir and _FLAT.fullmatch(name)):  # or an earlier version's flat layout
                path.unlink()


def _loads(page: Path, generation: str) -> bool:
    """Whether ``page`` loads ``episodes/GENERATION/``, i.e. the switch was made.

    An interrupt (Ctrl-C) can land just after it; the generation the page loads must then stay.
    """
    try:
        return f'data-source="episodes/{generation}/"' in page.read_text(encoding="utf-8")
    except OSError:
        return False


def write_folder(report: Report, directory: Path) -> Path:
    """``directory/index.html`` plus its data in ``directory/episodes/GEN/``; returns the page's path.

    Readers, and a crash at any moment, see the earlier report in ``directory`` whole or this one
    whole, never a mix. The index and chunks are written into a folder of their own, staged as
    ``episodes/.gen-RANDOM.partial/`` and renamed to ``episodes/GEN`` in one step once complete
    (``GEN`` hashes their content: if that folder is already there, it holds the same files and is
    reused). Nothing the earlier page loads is touched until ``index.html``, which names ``GEN``, is
    replaced by one `os.replace`: that is the switch. A failure before it removes what this write
    added and leaves the earlier report byte for byte. After it, what the new page does not load is
    removed (best effort): other generations, the partial files and folders of killed writes, and an
    earlier version's flat ``episodes/index.js`` and ``episodes/chunk-*.js``. (A page opened before
    the switch then finds its chunks gone, never another report's: it says so, and a reload helps.)

    Guarded against the process failing or being killed, not against a power cut (nothing is
    fsynced); two writes into one folder at the same time are not supported.
    """
    episodes = directory / "episodes"
    episodes.mkdir(parents=True, exist_ok=True)
    # A name of its own, not GEN's: the hash is known only once everything is written.
    staging = episodes / f".gen-{secrets.token_hex(8)}{PARTIAL_SUFFIX}"
    page = directory / "index.html"
    created: Path | None = None
    try:
        staging.mkdir()
        generation = episodes / _write_generation(report, staging)
        if generation.is_dir():  # an earlier write of the same data left it, complete
            shutil.rmtree(staging)
        else:
            created = generation  # set first: an interrupt can land just after the rename
            os.rename(staging, generation)
        _write_replacing(page, _page(report, "", source=f"episodes/{generation.name}/"))  # the switch
    except BaseException:
        with contextlib.suppress(OSError):  # keep the original error; leftovers go with the next write
            if staging.exists():  # never renamed
                shutil.rmtree(staging)
            elif created is not None and not _loads(page, created.name):
                _retire(created)
        raise
    _remove_unused(directory, generation.name)
    return page


def write_html(report: Report, path: Path) -> Path:
    """One file when ``path`` ends in ``.html``/``.htm``, else a folder (see the module docstring).

    Either way a failure while writing leaves an earlier report at ``path`` as it was.
    """
    if path.suffix.lower() in (".html", ".htm"):
        _write_replacing(path, render_html(report))
        return path
    if path.exists() and not path.is_dir():
        raise ReportError(f"--html {path}: not a folder; name a folder, or a file ending in .html")
    return write_folder(report, path)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "chart"


#: The figures `write_figures` wrote last into a folder, one name per line: the next report there
#: removes those it does not write again (and nothing else in the folder).
FIGURES_MANIFEST = ".mcp-resili-figures"


def write_figures(report: Report, directory: Path) -> list[Path]:
    """Every chart as its own SVG file (``NN-SECTION-TITLE.svg``), ready for a paper; returns the paths.

    Figures an earlier report wrote into ``directory`` and this one does not are removed, so the folder
    never mixes two reports' figures; other files in it are left alone.
    """
    directory.mkdir(parents=True, exist_ok=True)
    manifest = directory / FIGURES_MANIFEST
    earlier = set(manifest.read_text(encoding="utf-8").split("\n")) if manifest.is_file() else set()
    paths: list[Path] = []
    for section in report.sections:
        for block in section.blocks:
            if isinstance(block, ChartBlock):
                path = directory / f"{len(paths) + 1:02d}-{_slug(section.id)}-{_slug(block.title)}.svg"
                path.write_text(
                    '<?xml version="1.0" encoding="UTF-8"?>\n' + block.svg + "\n", encoding="utf-8"
                )
                paths.append(path)
    for name in sorted(earlier - {p.name for p in paths}):
        if name and "/" not in name and name.endswith(".svg"):  # only names of our own figures
            (directory / name).unlink(missing_ok=True)
    manifest.write_text("\n".join(p.name for p in paths), encoding="utf-8")
    return paths


__all__ = ["CHUNK_SIZE", "PAGE_LIMIT", "render_html", "write_figures", "write_folder", "write_html"]
