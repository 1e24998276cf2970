"""The batch summary: summary.csv, summary.json and a self-contained summary.html, one row per model."""

from __future__ import annotations

import csv
import datetime as _dt
import io
from html import escape
from typing import Any

from precision_doctor.jsonio import write_json, write_text_atomic
from precision_doctor.outcome import SUMMARY_COLUMNS, RowStatus, SummaryRow
from precision_doctor.render.numbers import fmt_seconds, fmt_share
from precision_doctor.runfiles import RunDir


def write_summary(run: RunDir, rows: list[SummaryRow]) -> None:
    """summary.csv, summary.json and summary.html in the batch's directory `run`, each written atomically."""
    write_text_atomic(run.root / "summary.csv", summary_csv(rows), writer=run)
    write_json(run.root / "summary.json", {"models": [r.columns() for r in rows]}, writer=run)
    write_text_atomic(run.root / "summary.html", summary_html(rows), writer=run)


def summary_csv(rows: list[SummaryRow]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(SUMMARY_COLUMNS)
    for r in rows:
        vals = []
        for v in r.columns().values():
            if isinstance(v, bool):
                v = "yes" if v else "no"
            elif isinstance(v, float):
                v = f"{v:.6g}"
            vals.append("" if v is None else v)
        w.writerow(vals)
    return buf.getvalue()


_STATUS_CLASS = {RowStatus.PASSED: "ok", RowStatus.ERROR: "bad", RowStatus.FAILED: "bad", RowStatus.NO_SOLUTION: "bad",
                 RowStatus.PENDING: "mut"}

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;color:#1f2328;margin:0}
main{max-width:1200px;margin:0 auto;padding:18px 24px 48px}
h1{font-size:20px;margin:0 0 4px} p.sub{color:#57606a;margin:0 0 14px}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #e5e7eb;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600;white-space:nowrap;cursor:pointer;user-select:none}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.msg{color:#57606a;font-size:12.5px;max-width:420px;word-break:break-word}
.ok{color:#1a7f37;font-weight:600}.bad{color:#c62828;font-weight:600}.warn{color:#b7791f;font-weight:600}
.mut{color:#57606a}
"""

_JS = """
document.querySelectorAll('th').forEach(function(th,i){th.addEventListener('click',function(){
 var tb=th.closest('table').tBodies[0],rows=Array.from(tb.rows),asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';
 rows.sort(function(a,b){var x=a.cells[i].dataset.v||a.cells[i].textContent,y=b.cells[i].dataset.v||b.cells[i].textContent;
  var p=parseFloat(x),q=parseFloat(y);var c=(!isNaN(p)&&!isNaN(q))?p-q:x.localeCompare(y);return asc?c:-c;});
 rows.forEach(function(r){tb.appendChild(r);});});});
"""


def summary_html(rows: list[SummaryRow], title: str = "precision-doctor batch") -> str:
    """One self-contained page (inline CSS and JS, no URLs but relative links to each report)."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    sub = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    head = "".join(f"<th>{h}</th>" for h in (
        "Model", "Status", "Passed", "FP32 nodes", "FP32 FLOP share", "Evaluations", "Time", "Report", "Message"))
    body = []
    for r in rows:
        # a finished run shows its verdict's label; a qualified pass is not green
        cls = "warn" if r.status == RowStatus.PASSED and r.verdict not in ("", "PASSED") else _STATUS_CLASS.get(r.status, "warn")
        link = f'<a href="{escape(r.report, quote=True)}">report</a>' if r.report else ""
        passed = "" if r.status in (RowStatus.ERROR, RowStatus.PENDING) else ("yes" if r.passed else "no")

        def n(v: Any, text: str) -> str:
            return f'<td class="n" data-v="{"" if v is None else escape(str(v), quote=True)}">{escape(text)}</td>'

        body.append(
            "<tr>"
            f"<td>{escape(r.model)}</td><td class=\"{cls}\">{escape(r.verdict or r.status)}</td><td>{passed}</td>"
            + n(r.fallback_size, "" if r.fallback_size is None else str(r.fallback_size))
            + n(r.fp32_flop_share, fmt_share(r.fp32_flop_share))
            + n(r.evaluations, "" if r.evaluations is None else str(r.evaluations))
            + n(r.elapsed_s, fmt_seconds(r.elapsed_s))
            + f"<td>{link}</td><td class=\"msg\">{escape(r.message or '')}</td></tr>"
        )
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body><main>"
        f"<h1>{escape(title)}</h1><p class=\"sub\">{len(rows)} models: {escape(sub)} &middot; updated {stamp}</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        f"</main><script>{_JS}</script></body></html>\n"
    )
