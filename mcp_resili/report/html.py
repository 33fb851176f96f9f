"""The report as one self-contained HTML file: inline CSS, inline SVG charts, an episode browser.

No network is needed to view it: no CDN, no fonts, no external script. The episode browser is the
episodes as embedded JSON plus a few lines of vanilla JavaScript; clicking a row (or opening the
page at ``#episode=ID``) shows the episode's turns, tool calls, injected faults and judge reasons.
Everything from the data is inserted with ``textContent``, never parsed as HTML.
"""

from __future__ import annotations

import json
from html import escape

from mcp_resili.report.build import Report
from mcp_resili.report.section import ChartBlock, NoteBlock, TableBlock

#: Nothing may load from anywhere: the page is complete as written.
_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1180px;padding:16px 24px;color:#1b1b1b}
h1{font-size:22px;margin:8px 0}
h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:28px}
h3{font-size:14px;margin:14px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}tr.ep{cursor:pointer}tr.ep:hover{background:#eef5ff}tr.ep.open{background:#dbeaff}
.charts{display:flex;flex-wrap:wrap;gap:16px}.note{color:#444;max-width:900px}
.meta{color:#555}.full{color:#007a55}.partial{color:#a86b00}.failure{color:#b23c00}.infra{color:#666}
#episode{border:1px solid #bbb;border-radius:6px;padding:10px 14px;margin:12px 0;background:#fafafa}
#episode[hidden]{display:none}.event{border-left:3px solid #ccc;padding:2px 8px;margin:6px 0}
.event.fault{border-color:#D55E00;background:#fff3ec}.event.error{border-color:#b23c00}
.event.turn{border-color:#0072B2}.event.finish{border-color:#009E73}
pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font-size:12px}
input#filter{padding:4px 6px;width:320px}
"""

_JS = """
(function(){
  const episodes = JSON.parse(document.getElementById('episode-data').textContent);
  const byId = new Map(episodes.map(e => [e.id, e]));
  const view = document.getElementById('episode');
  function el(tag, cls, text){const n=document.createElement(tag); if(cls) n.className=cls;
    if(text!==undefined) n.textContent=text; return n;}
  function pre(value){
    return el('pre', null, typeof value === 'string' ? value : JSON.stringify(value, null, 1));}
  function show(id){
    const ep = byId.get(id); if(!ep) return false;
    view.replaceChildren(); view.hidden = false; view.dataset.episode = id;
    document.querySelectorAll('tr.ep').forEach(r => r.classList.toggle('open', r.dataset.episode === id));
    view.append(el('h3', null, 'Episode ' + ep.id));
    view.append(el('div', 'meta', ep.model + ' · ' + ep.faults + ' · ' + ep.variant + ' · task ' + ep.task +
      ' · trial ' + ep.trial + ' · termination ' + ep.termination));
    view.append(el('div', ep.label || 'infra', 'outcome: ' + (ep.label || 'infrastructure error') +
      (ep.value === null ? '' : ' (' + ep.value + ')')));
    const reasons = el('div', 'reasons'); reasons.append(el('b', null, 'Judge reasons: '));
    reasons.append(document.createTextNode(ep.reasons.length ? ep.reasons.join('; ') : 'none'));
    view.append(reasons);
    if(ep.workflow){view.append(el('div', 'meta', 'workflow: ' + Object.entries(ep.workflow)
      .map(([k, v]) => k + ' ' + v).join(', ')));}
    view.append(el('div', 'meta', 'score components: ' + JSON.stringify(ep.components)));
    for(const ev of ep.events){
      let box;
      if(ev.event === 'model_turn'){
        box = el('div', 'event turn'); box.append(el('b', null, 'turn ' + ev.turn));
        if(ev.text) box.append(pre(ev.text));
        for(const call of ev.tool_calls || []) box.append(pre('→ ' + JSON.stringify(call)));
      } else if(ev.event === 'tool_call'){
        const cls = 'event call' + (ev.fault ? ' fault' : '') + (ev.is_error ? ' error' : '');
        box = el('div', cls);
        const status = ev.is_error ? ' ✗ ' + (ev.error_code || 'error') : ' ✓';
        box.append(el('b', null, '#' + ev.seq + ' ' + ev.tool + status));
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
      } else { box = el('div', 'event'); box.append(pre(ev)); }
      view.append(box);
    }
    view.scrollIntoView();
    return true;
  }
  document.querySelectorAll('tr.ep').forEach(row => row.addEventListener('click', () => {
    history.replaceState(null, '', '#episode=' + encodeURIComponent(row.dataset.episode));
    show(row.dataset.episode);
  }));
  const filter = document.getElementById('filter');
  filter.addEventListener('input', () => {const q = filter.value.toLowerCase();
    document.querySelectorAll('tr.ep').forEach(r => {
      r.hidden = q && !r.textContent.toLowerCase().includes(q);});});
  function fromHash(){const m = location.hash.match(/^#episode=(.+)$/);
    if(m) show(decodeURIComponent(m[1]));}
  window.addEventListener('hashchange', fromHash); fromHash();
})();
"""


def _table(block: TableBlock) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in block.columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in block.rows)
    return f"<h3>{escape(block.title)}</h3><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _episode_rows(report: Report) -> str:
    rows = []
    for ep in report.browser:
        label = ep["label"] or "infrastructure error"
        chain = "" if ep["workflow"] is None else f"{ep['workflow']['chain_f1']:.2f}"
        faults = sum(1 for e in ep["events"] if e.get("event") == "tool_call" and e.get("fault"))
        cells = (ep["model"], ep["faults"], ep["variant"], ep["task"], str(ep["trial"]))
        rows.append(
            f'<tr class="ep" data-episode="{escape(ep["id"])}">'
            + "".join(f"<td>{escape(c)}</td>" for c in cells)
            + f'<td class="{escape(ep["label"] or "infra")}">{escape(label)}</td>'
            + f"<td>{faults}</td><td>{chain}</td><td>{escape(ep['termination'])}</td></tr>"
        )
    return "".join(rows)


def render_html(report: Report) -> str:
    """The whole page as one string."""
    parts = []
    nav = " · ".join(f'<a href="#{escape(s.id)}">{escape(s.title)}</a>' for s in report.sections)
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
    # "</" inside the JSON would end the script element early.
    data = json.dumps(list(report.browser), separators=(",", ":")).replace("</", "<\\/")
    run = report.run
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<title>mcp-resili report {escape(run.id)}</title><style>{_CSS}</style></head>
<body>
<h1>mcp-resili report</h1>
<p class="meta">run <b>{escape(run.id)}</b> · suite {escape(run.suite)} · seed {run.seed} ·
{escape(run.created_at)} ·
{report.episodes} episodes</p>
<nav>{nav} · <a href="#episodes">Episodes</a></nav>
{"".join(parts)}
<section id="episodes"><h2>Episodes</h2>
<p class="note">Click a row to see its turns, tool calls, injected faults and the judge's reasons
(or open this page at <code>#episode=ID</code>).</p>
<input id="filter" placeholder="filter rows (model, task, outcome…)">
<div id="episode" hidden></div>
<table><thead><tr><th>model</th><th>faults</th><th>variant</th><th>task</th><th>trial</th><th>outcome</th>
<th>faults met</th><th>chain F1</th><th>termination</th></tr></thead>
<tbody>{_episode_rows(report)}</tbody></table></section>
<script type="application/json" id="episode-data">{data}</script>
<script>{_JS}</script>
</body></html>
"""
