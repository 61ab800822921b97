"""One self-contained HTML page: summary, charts, every table in full. Works offline.

The charts are embedded (base64) and the sorting and filtering script is inline: the page
can be mailed or archived as one file and opened without a network. Tables start worst
first; a click on a column heading sorts by it (again: the other way), and the box above
each table keeps only the rows that contain what is typed. A link can carry both:
``report.html#sort=availability:flaps&filter=outcomes:backup``.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

from pushjobs.pipeline.metrics import Report
from pushjobs.pipeline.output import presented, summary_text, when

TITLES = {
    "availability": "Availability per node (lowest first)",
    "outcomes": "Outcomes per command and node (highest failure rate first)",
    "outcomes_by_command": "Outcomes per command (highest failure rate first)",
    "latency": "Latency percentiles, fleet and per node (slowest p95 first)",
    "latency_by_command": "Latency per command (slowest p95 first)",
    "stragglers": "Stragglers: node median against the command's fleet median (worst first)",
    "downtime_by_day": "Downtime per node and UTC day (longest first)",
    "outcomes_by_day": "Outcomes and failures per UTC day and command",
    "server_gaps": "Server downtime (node states unknown, not counted)",
}

STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em;max-width:1250px;color:#222}"
    "table{border-collapse:collapse;margin:.4em 0 1.5em}"
    "td,th{border:1px solid #ccc;padding:2px 8px;font-size:13px}"
    "td.n{text-align:right;font-variant-numeric:tabular-nums}"
    "th{background:#eee;cursor:pointer;position:sticky;top:0;user-select:none}"
    "th:hover{background:#ddd}pre{background:#f6f6f6;padding:1em;white-space:pre-wrap}"
    "input{margin:.2em 0;padding:3px;width:22em}.scroll{max-height:32em;overflow:auto}"
    "img{max-width:100%;border:1px solid #eee}"
)

# Sort on click (numbers as numbers, "-" last), filter on input; no library, no network.
SCRIPT = """
function cellValue(td){const t=td.textContent.trim();const n=parseFloat(t.replace(/,/g,''));
 return (t!=='-'&&!isNaN(n)&&/^-?[\\d.,]+(e[+-]?\\d+)?%?$/i.test(t))?n:t;}
function sortBy(th){const table=th.closest('table');const body=table.tBodies[0];
 const i=th.cellIndex;const asc=th.dataset.dir!=='asc';
 table.querySelectorAll('th').forEach(h=>{delete h.dataset.dir;h.textContent=h.dataset.name;});
 th.dataset.dir=asc?'asc':'desc';th.textContent=th.dataset.name+(asc?' \\u25b2':' \\u25bc');
 const rows=Array.from(body.rows);rows.sort((a,b)=>{const x=cellValue(a.cells[i]),
 y=cellValue(b.cells[i]);if(x==='-'&&y!=='-')return 1;if(y==='-'&&x!=='-')return -1;
 const c=(typeof x==='number'&&typeof y==='number')?x-y:String(x).localeCompare(String(y));
 return asc?c:-c;});rows.forEach(r=>body.appendChild(r));}
function filterRows(input){const q=input.value.toLowerCase();
 const table=document.getElementById(input.dataset.table);let shown=0;
 Array.from(table.tBodies[0].rows).forEach(r=>{const ok=r.textContent.toLowerCase()
 .includes(q);r.style.display=ok?'':'none';shown+=ok;});
 document.getElementById(input.dataset.table+'-count').textContent=shown;}
document.querySelectorAll('th').forEach(th=>{th.dataset.name=th.textContent;
 th.addEventListener('click',()=>sortBy(th));});
document.querySelectorAll('input[data-table]').forEach(i=>i.addEventListener('input',
 ()=>filterRows(i)));
/* deep links: #sort=table:column and #filter=table:text, several joined by & */
decodeURIComponent(location.hash.slice(1)).split('&').forEach(part=>{
 const m=part.match(/^(sort|filter)=([a-z_]+):(.*)$/);if(!m)return;
 if(m[1]==='sort'){const th=Array.from(document.querySelectorAll('#'+m[2]+' th'))
  .find(h=>h.dataset.name===m[3]);if(th)sortBy(th);}
 else{const i=document.querySelector('input[data-table="'+m[2]+'"]');
  if(i){i.value=m[3];filterRows(i);}}});
document.body.dataset.ready='yes';
"""


def write_html(report: Report, out: Path, pngs: list[Path]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<title>pushjobs fleet report</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>pushjobs fleet report</h1>",
        f"<p>Window {when(report.since)} to {when(report.until)} <b>UTC</b> (end excluded); "
        "all times on this page are UTC.</p>",
        f"<pre>{html.escape(summary_text(report))}</pre>",
    ]
    if not pngs:
        parts.append("<p>(no charts: install matplotlib, part of pushjobs[spark])</p>")
    for png in pngs:
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        parts.append(f"<p><img alt='{png.stem}' src='data:image/png;base64,{data}'></p>")
    for name, rows in presented(report).items():
        parts.append(_table(name, rows))
    parts.append(f"<script>{SCRIPT}</script></body></html>")
    path = out / "report.html"
    path.write_text("".join(parts), encoding="utf-8")
    return path


def _table(name: str, rows: list[dict[str, Any]]) -> str:
    title = html.escape(TITLES.get(name, name))
    head = (
        f"<h2 id='{name}-h'>{title}: <span id='{name}-count'>{len(rows)}</span> of {len(rows)} "
        f"rows</h2>"
    )
    if not rows:
        return head + "<p>none</p>"
    columns = list(rows[0])
    cells = "".join(
        "<tr>"
        + "".join(
            f"<td class='n'>{_cell(v)}</td>" if _numeric(v) else f"<td>{_cell(v)}</td>"
            for v in row.values()
        )
        + "</tr>"
        for row in rows
    )
    return (
        head
        + f"<input type='search' placeholder='filter {html.escape(name)}' data-table='{name}'>"
        + f"<div class='scroll'><table id='{name}'><thead><tr>"
        + "".join(f"<th>{html.escape(c)}</th>" for c in columns)
        + f"</tr></thead><tbody>{cells}</tbody></table></div>"
        + f"<p>(also in {html.escape(name)}.csv)</p>"
    )


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if abs(value) >= 1000:
            return f"{value:.0f}"
        return f"{value:.3f}".rstrip("0").rstrip(".")  # 99.9 and 99.99 stay apart
    return "-" if value is None else html.escape(str(value))
