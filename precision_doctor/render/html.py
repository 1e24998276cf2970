"""report.html from the typed Report: one self-contained offline page (inline CSS, JS and SVG plots; no URLs)."""

from __future__ import annotations

import json
import math
from html import escape
from typing import Any

from precision_doctor.render import plots, pricing
from precision_doctor.render.files import artifact_title
from precision_doctor.render.layers import layers_by_name, layers_in_order
from precision_doctor.render.numbers import counted, fmt, fmt_flops, fmt_pct, fmt_time, num
from precision_doctor.render.sections import checks as checks_section
from precision_doctor.render.sections import next_steps as next_steps_section
from precision_doctor.render.sections import verdict as verdict_section
from precision_doctor.render.sections.html import html as section_html
from precision_doctor.render.tensorrt import (
    engine_sentence,
    html_sections,
    knobs_sentence,
    named_onnx_sentence,
    trt_check_sentence,
)
from precision_doctor.render.verdict import claim_sentence, figures
from precision_doctor.render.wording import (
    INPUT_SENSITIVE_WHY,
    folded_host,
    model_file_sentence,
    output_run_labels,
    precision_name,
    samples_cell,
    shapes_text,
    shapes_warning,
    status_line,
    why,
)
from precision_doctor.results.emit import LABELS as COMMAND_TITLES
from precision_doctor.results.report import ModelInfo, Report

# (key, header, type, first sort direction, tooltip)
LAYER_COLUMNS: list[tuple[str, str, str, str, str]] = [
    ("index", "#", "num", "asc", "topological index"),
    ("rank", "Rank", "num", "asc", "1 = most harmful by score"),
    ("name", "Node", "str", "asc", "ONNX node name"),
    ("op_type", "Op", "str", "asc", "operator type"),
    ("fallback", "FP32", "num", "desc", "in the FP32 fallback set"),
    ("score", "Score", "num", "desc", "ranking score"),
    ("local_rel_l2", "Local", "num", "desc", "error this node adds alone: FP32 inputs, low-precision node (rel. L2)"),
    ("rounding_rel_l2", "Rounding", "num", "desc", "error of rounding the FP32 output to the format (rel. L2)"),
    ("lowp_rel_l2", "Before", "num", "desc", "output error with everything in low precision (rel. L2)"),
    ("fixed_rel_l2", "After", "num", "desc", "output error with the fallback set in FP32 (rel. L2)"),
    ("ref_absmax", "Out |max|", "num", "desc", "absolute max of the FP32 reference output"),
    ("input_ref_absmax", "In |max|", "num", "desc", "absolute max of the FP32 reference inputs"),
    ("frac_above_max", "> max", "num", "desc", "share of outputs above the format's max"),
    ("frac_below_normal", "< normal", "num", "desc", "share of non-zero outputs below the smallest normal"),
    ("flops", "FLOPs", "num", "desc", "floating-point operations"),
    ("input_sensitive", "Input-sens.", "num", "desc", INPUT_SENSITIVE_WHY),
]

CSS = """
:root{--pass:#1a7f37;--warn:#b7791f;--fail:#c62828;--fb:#d7191c;--fbbg:#fdecea;--bd:#d0d7de;--mut:#57606a;--bg:#f6f8fa}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:#1f2328;margin:0;
 background:#fff}
main{max-width:1320px;margin:0 auto;padding:18px 24px 60px}
h1{font-size:20px;margin:0 0 6px} h3{font-size:15px;margin:16px 0 2px}
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid var(--bd);padding-bottom:4px}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;font-size:12.5px}
.verdict{display:flex;gap:14px;align-items:center;flex-wrap:wrap;margin:8px 0 4px}
.badge{font-weight:700;color:#fff;border-radius:6px;padding:5px 12px;font-size:15px;letter-spacing:.02em}
.badge.pass{background:var(--pass)} .badge.warn{background:var(--warn)} .badge.fail{background:var(--fail)}
.sentence{font-size:15px}
.reason{background:#fff8e1;border:1px solid #f0d48a;border-radius:6px;padding:6px 10px;margin:8px 0}
.headroom{color:#555;margin:6px 0}
.kpis{display:grid;grid-template-columns:repeat(auto-fill,minmax(170px,1fr));gap:8px;margin:12px 0}
.kpi{background:var(--bg);border:1px solid var(--bd);border-radius:6px;padding:7px 10px}
.kpi b{display:block;font-size:18px}
.kpi.wide{grid-column:span 2} .kpi.wide b{font-size:14px;padding:3px 0} .kpi span{color:var(--mut);font-size:12px}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #e5e7eb;padding:4px 7px;text-align:left;vertical-align:top}
th{background:var(--bg);font-weight:600;white-space:nowrap}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.name{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;word-break:break-all;min-width:16ch}
tr.fb td{background:var(--fbbg)} tr.fb td.name{color:var(--fb);font-weight:600}
.ok{color:var(--pass);font-weight:600} .bad{color:var(--fail);font-weight:600} .nf{color:var(--fail);font-weight:600}
.muted{color:var(--mut)}
figure.plot{position:relative;margin:10px 0 18px;border:1px solid var(--bd);border-radius:6px;padding:4px;background:#fff}
figure.plot svg{display:block;width:100%;height:auto}
figure.plot figcaption{color:var(--mut);font-size:12px;padding:2px 6px}
.hline{position:absolute;width:1px;background:rgba(0,0,0,.45);pointer-events:none;display:none}
.tip{position:absolute;pointer-events:none;display:none;background:rgba(255,255,255,.97);border:1px solid #888;
 border-radius:5px;padding:5px 8px;font-size:12px;box-shadow:0 2px 8px rgba(0,0,0,.15);max-width:420px;z-index:5}
.tip b{font-family:ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
.tablebar{display:flex;gap:14px;align-items:center;flex-wrap:wrap;margin:6px 0}
.tablebar input[type=search]{padding:4px 8px;border:1px solid var(--bd);border-radius:5px;min-width:260px}
.scroll{max-height:72vh;overflow:auto;border:1px solid var(--bd);border-radius:6px}
#layers thead th{position:sticky;top:0;z-index:2;cursor:pointer;user-select:none}
#layers thead th:hover{background:#eaeef2}
#layers thead th.asc::after{content:" \\25B2";font-size:10px} #layers thead th.desc::after{content:" \\25BC";font-size:10px}
#layers td{font-size:12.5px;padding:3px 6px}
tr.flash td{animation:flash 1.6s ease-out}
@keyframes flash{from{background:#fff59d}to{background:inherit}}
.cmd{position:relative;margin:6px 0 14px}
.cmd pre{background:#0d1117;color:#e6edf3;border-radius:6px;padding:10px 64px 10px 12px;margin:4px 0;
 white-space:pre-wrap;word-break:break-all}
.cmd button{position:absolute;right:8px;top:28px;font-size:12px;padding:2px 8px;border-radius:4px;border:1px solid #8b949e;
 background:#21262d;color:#e6edf3;cursor:pointer}
#next-steps pre{background:var(--bg);border:1px solid var(--bd);border-radius:6px;padding:6px 10px;margin:4px 0;
 white-space:pre-wrap;word-break:break-all}
details summary{cursor:pointer;color:var(--mut)}
#js-errors{background:#fdecea;border:1px solid var(--fail);color:var(--fail);padding:6px 10px;white-space:pre-wrap}
footer{margin-top:30px;color:var(--mut);font-size:12px}
"""

# Runs before anything else: page errors land in #js-errors (and in window.__pdErrors for tests).
JS_ERRORS = """
window.__pdErrors=[];
window.addEventListener("error",function(e){
  var m=(e&&e.message)||"error";if(e&&e.lineno){m+=" (line "+e.lineno+")";}
  window.__pdErrors.push(m);
  var b=document.getElementById("js-errors");if(b){b.hidden=false;b.textContent+=m+"\\n";}
});
"""

JS_MAIN = r"""
(function(){
"use strict";
var data=JSON.parse(document.getElementById("pd-data").textContent);
var table=document.getElementById("layers"), tbody=document.getElementById("layer-body");
var rows=tbody?Array.prototype.slice.call(tbody.rows):[];
var heads=table?Array.prototype.slice.call(table.tHead.rows[0].cells):[];
function cellVal(tr,col,type){
  var td=tr.cells[col];
  if(type==="num"){var v=td.getAttribute("data-v");return v===null||v===""?NaN:Number(v);}
  return td.textContent;
}
function sortBy(key,dir){
  var col=-1,type="str";
  heads.forEach(function(th,i){if(th.getAttribute("data-key")===key){col=i;type=th.getAttribute("data-type");}});
  if(col<0){return false;}
  if(dir!=="asc"&&dir!=="desc"){dir=heads[col].getAttribute("data-first")||"asc";}
  var sign=dir==="asc"?1:-1;
  var keyed=rows.map(function(tr,i){return {tr:tr,v:cellVal(tr,col,type),i:i};});
  keyed.sort(function(a,b){
    var c;
    if(type==="num"){
      var an=isNaN(a.v),bn=isNaN(b.v);
      if(an||bn){c=an&&bn?0:(an?1:-1);return c!==0?c:a.i-b.i;}   /* NaN always last */
      c=a.v<b.v?-1:(a.v>b.v?1:0);
    }else{c=a.v.localeCompare(b.v,undefined,{numeric:true,sensitivity:"base"});}
    return c!==0?sign*c:a.i-b.i;
  });
  var frag=document.createDocumentFragment();
  keyed.forEach(function(k){frag.appendChild(k.tr);});
  tbody.appendChild(frag);
  heads.forEach(function(th){th.classList.remove("asc","desc");th.removeAttribute("aria-sort");});
  heads[col].classList.add(dir);
  heads[col].setAttribute("aria-sort",dir==="asc"?"ascending":"descending");
  document.body.setAttribute("data-sorted",key+":"+dir);
  return true;
}
heads.forEach(function(th){
  th.addEventListener("click",function(){
    var key=th.getAttribute("data-key");
    var dir=th.classList.contains("asc")?"desc":(th.classList.contains("desc")?"asc":th.getAttribute("data-first"));
    sortBy(key,dir);
    try{history.replaceState(null,"","#sort="+key+":"+dir);}catch(err){/* file: URLs may refuse */}
  });
});
function applyHash(){
  var m=/(?:^#|&)sort=([A-Za-z0-9_]+)(?::(asc|desc))?/.exec(location.hash||"");
  if(m){sortBy(m[1],m[2]);}
}
applyHash();
window.addEventListener("hashchange",applyHash);

/* filter */
var q=document.getElementById("layer-filter"), fbOnly=document.getElementById("fb-only");
var count=document.getElementById("layer-count");
function applyFilter(){
  var s=(q&&q.value||"").trim().toLowerCase(), only=fbOnly&&fbOnly.checked, shown=0;
  rows.forEach(function(tr){
    var hit=(!only||tr.classList.contains("fb"))&&(!s||tr.getAttribute("data-text").indexOf(s)>=0);
    tr.style.display=hit?"":"none"; if(hit){shown++;}
  });
  if(count){count.textContent=shown+" of "+rows.length+" layers";}
}
if(q){q.addEventListener("input",applyFilter);}
if(fbOnly){fbOnly.addEventListener("change",applyFilter);}
applyFilter();

/* plot hover: map the mouse x back to a layer or a search step */
function esc(s){return String(s).replace(/[&<>"]/g,function(c){return {"&":"&amp;","<":"&lt;",">":"&gt;","\"":"&quot;"}[c];});}
Array.prototype.slice.call(document.querySelectorAll("figure.plot[data-kind]")).forEach(function(fig){
  var svg=fig.querySelector("svg"), tip=fig.querySelector(".tip"), line=fig.querySelector(".hline");
  if(!svg){return;}
  var kind=fig.getAttribute("data-kind"), x0=+fig.getAttribute("data-x0"), w=+fig.getAttribute("data-w");
  var y0=+fig.getAttribute("data-y0"), h=+fig.getAttribute("data-h");
  var xmin=+fig.getAttribute("data-xmin"), xmax=+fig.getAttribute("data-xmax");
  var items=kind==="trajectory"?data.trajectory:data.layers;
  function locate(ev){
    var r=svg.getBoundingClientRect(), fx=(ev.clientX-r.left)/r.width;
    if(!items.length||fx<x0||fx>x0+w){return null;}
    var x=xmin+(fx-x0)/w*(xmax-xmin), best=-1, bd=Infinity;
    if(kind==="trajectory"){items.forEach(function(t,i){var d=Math.abs(t[0]-x);if(d<bd){bd=d;best=i;}});}
    else{best=Math.max(0,Math.min(items.length-1,Math.round(x)));}
    var xv=kind==="trajectory"?items[best][0]:best;
    return {i:best,px:r.left+(x0+(xv-xmin)/(xmax-xmin)*w)*r.width,r:r};
  }
  fig.addEventListener("mousemove",function(ev){
    var hit=locate(ev); if(!hit){tip.style.display="none";line.style.display="none";return;}
    var it=items[hit.i], fr=fig.getBoundingClientRect(), html;
    if(kind==="trajectory"){
      html="step "+esc(it[0])+" &middot; "+esc(it[1])+"<br>size <b>"+esc(it[2])+"</b> &middot; "+
        (it[3]?"<span class=ok>pass</span>":"<span class=bad>fail</span>")+
        "<br>worst output "+esc(it[4])+", max abs "+esc(it[5])+
        (it[6]?"<br><span class=muted>"+esc(it[6])+"</span>":"");
    }else{
      html="<b>"+esc(it[0])+"</b><br>#"+hit.i+" "+esc(it[1])+(it[7]?" &middot; <span class=nf>FP32 fallback</span>":"")+
        "<br>before "+esc(it[2])+" &rarr; after "+esc(it[3])+"<br>local "+esc(it[4])+
        " &middot; out |max| "+esc(it[5])+" &middot; in |max| "+esc(it[6]);
    }
    tip.innerHTML=html; tip.style.display="block"; line.style.display="block";
    var lx=hit.px-fr.left; line.style.left=lx+"px";
    line.style.top=(hit.r.top-fr.top+(1-y0-h)*hit.r.height)+"px"; line.style.height=(h*hit.r.height)+"px";
    var tx=lx+14; if(tx+tip.offsetWidth>fr.width){tx=lx-14-tip.offsetWidth;}
    tip.style.left=Math.max(0,tx)+"px"; tip.style.top=Math.max(0,ev.clientY-fr.top-tip.offsetHeight-10)+"px";
  });
  fig.addEventListener("mouseleave",function(){tip.style.display="none";line.style.display="none";});
  if(kind!=="trajectory"){
    fig.addEventListener("click",function(ev){
      var hit=locate(ev); if(!hit){return;}
      var tr=document.querySelector('tr[data-i="'+hit.i+'"]'); if(!tr){return;}
      if(tr.style.display==="none"){if(q){q.value="";} if(fbOnly){fbOnly.checked=false;} applyFilter();}
      tr.scrollIntoView({block:"center"}); tr.classList.remove("flash"); void tr.offsetWidth; tr.classList.add("flash");
    });
  }
});

/* copy buttons */
Array.prototype.slice.call(document.querySelectorAll("button[data-copy]")).forEach(function(b){
  b.addEventListener("click",function(){
    var text=document.getElementById(b.getAttribute("data-copy")).textContent;
    function done(){b.textContent="copied";setTimeout(function(){b.textContent="copy";},1200);}
    function fallback(){
      var ta=document.createElement("textarea");ta.value=text;document.body.appendChild(ta);ta.select();
      try{document.execCommand("copy");done();}catch(err){b.textContent="select and copy";}
      document.body.removeChild(ta);
    }
    if(navigator.clipboard&&navigator.clipboard.writeText){navigator.clipboard.writeText(text).then(done,fallback);}else{fallback();}
  });
});

var box=document.getElementById("js-errors");
if(window.__pdErrors.length&&box){box.hidden=false;box.textContent=window.__pdErrors.join("\n");}
document.body.setAttribute("data-ready","1");
})();
"""


# ---------------------------------------------------------------- small builders


def _e(v: Any) -> str:
    return escape(str(v), quote=True)


def _num_cell(v: Any, text: str | None = None, cls: str = "n") -> str:
    """A numeric <td> with a sort value in data-v ("Infinity", "NaN", ...) and red text for non-finite numbers."""
    x = num(v)
    if math.isnan(x):
        dv = "NaN"
    elif math.isinf(x):
        dv = "Infinity" if x > 0 else "-Infinity"
    else:
        dv = repr(float(x)) if not isinstance(v, (int, bool)) else str(int(v))
    shown = fmt(v) if text is None else text
    if not math.isfinite(x) and v is not None and text is None:
        cls += " nf"
    return f'<td class="{cls}" data-v="{dv}">{_e(shown)}</td>'


def _pass_span(ok: Any) -> str:
    if ok is None:
        return '<span class="muted">—</span>'
    return '<span class="ok">pass</span>' if ok else '<span class="bad">FAIL</span>'


def _kpi(value: str, label: str) -> str:
    cls = "kpi wide" if len(value) > 18 else "kpi"
    return f'<div class="{cls}"><b>{_e(value)}</b><span>{_e(label)}</span></div>'


def _json_for_script(obj: Any) -> str:
    """JSON safe inside <script type="application/json">."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e")


def _figure_html(plot: plots.Plot | None, kind: str, title: str, caption: str, empty: str) -> str:
    head = f"<h3>{_e(title)}</h3>"
    if plot is None:
        return f'{head}<p class="muted">{_e(empty)}</p>'
    attrs = (
        f'data-kind="{kind}" data-x0="{plot.axes_x0:.6f}" data-w="{plot.axes_w:.6f}" data-y0="{plot.axes_y0:.6f}" '
        f'data-h="{plot.axes_h:.6f}" data-xmin="{plot.xlim[0]:.6f}" data-xmax="{plot.xlim[1]:.6f}"'
    )
    return head + (
        f'<figure class="plot" {attrs}>{plot.svg}<div class="hline"></div><div class="tip"></div>'
        f"<figcaption>{_e(caption)}</figcaption></figure>"
    )


# ---------------------------------------------------------------- sections


def _header(report: Report) -> str:
    model = report.model or ModelInfo(path="?")
    kpis = [_kpi(f.value, f.label) for f in figures(report)]
    reason = section_html(checks_section.build(report))
    for line in (engine_sentence(report), knobs_sentence(report)):
        if line:
            reason += f'<div class="headroom">{_e(line.replace("`", ""))}</div>'
    if check := trt_check_sentence(report):
        cls = "reason" if check.startswith("WARNING") else "headroom"
        reason += f'<div class="{cls}" id="trt-check-line">{_e(check.replace("`", ""))}</div>'
    if warning := shapes_warning(report):
        reason += f'<div class="reason" id="shapes-warning">{_e(warning)}</div>'
    for line in (shapes_text(report), model_file_sentence(report)):
        if line:
            reason += f'<div class="headroom">{_e(line if line.endswith(".") else "Input shapes: " + line + ".")}</div>'
    if status := status_line(report):
        reason += f'<div class="reason">{_e(status)}</div>'
    return (
        f"<header><h1>precision-doctor report: <code>{_e(model.path)}</code></h1>"
        f"{section_html(verdict_section.build(report))}{reason}"
        f'<div class="kpis">{"".join(kpis)}</div></header>'
    )


def _fallback_section(report: Report) -> str:
    fallback = [str(n) for n in report.answer.fallback_nodes]
    by_name = layers_by_name(report)
    prec = precision_name(report)
    out = [f'<section id="fallback"><h2>FP32 fallback nodes ({len(fallback)})</h2>']
    if not fallback:
        msg = (f"None: every candidate node can run in {prec}." if report.answered
               else "None: no passing fallback set was found.")
        out.append(f'<p class="muted">{_e(msg)}</p></section>')
        return "".join(out)
    out.append(
        '<table><thead><tr><th class="n">#</th><th>Node</th><th>Op</th><th class="n">Local error</th>'
        '<th class="n">Before</th><th class="n">After</th><th class="n">Out |max|</th><th class="n">In |max|</th>'
        "<th>Why</th></tr></thead><tbody>"
    )
    for i, name in enumerate(fallback, 1):
        lay = by_name.get(name)
        reasons = why(lay, report) if lay else ["no per-layer data"]
        values = [getattr(lay, k) if lay else None
                  for k in ("local_rel_l2", "lowp_rel_l2", "fixed_rel_l2", "ref_absmax", "input_ref_absmax")]
        out.append(
            f'<tr class="fb"><td class="n">{i}</td><td class="name">{_e(name)}</td><td>{_e(lay.op_type if lay else "?")}</td>'
            + "".join(_num_cell(v) for v in values)
            + f"<td>{'<br>'.join(_e(r) for r in reasons)}</td></tr>"
        )
    out.append("</tbody></table></section>")
    return "".join(out)


def _outputs_section(report: Report) -> str:
    prec = precision_name(report)
    base = report.analysis.baseline.outputs if report.analysis.baseline is not None else {}
    fixed = report.checks.outputs
    validation = report.promise.validation
    val = validation.outputs if validation is not None else {}
    names = list(dict.fromkeys([*base, *fixed, *val]))
    base_label, fixed_label, held_label = output_run_labels(report)
    out = ['<section id="outputs"><h2>Outputs</h2>']
    claim = claim_sentence(report.statement)
    if claim is not None:
        out.append(f'<p id="claim">{_e(claim)}</p>')
    else:
        out.append('<p class="muted">Held-out validation: not run.</p>')
    if not names:
        out.append('<p class="muted">No output checks recorded.</p></section>')
        return "".join(out)
    out.append(
        '<table><thead><tr><th>Output</th><th>Run</th><th>Check</th><th class="n">Max abs</th><th class="n">Mean abs</th>'
        '<th class="n">Median abs</th><th class="n">Max rel</th><th class="n">Mean rel</th><th class="n">Cosine</th>'
        '<th class="n">Mismatches</th></tr></thead><tbody>'
    )
    for name in names:
        runs = [(base_label, base.get(name)), (fixed_label, fixed.get(name)), (held_label, val.get(name))]
        runs = [(r, oc) for r, oc in runs if oc]
        for k, (run, oc) in enumerate(runs):
            first = f'<td class="name" rowspan="{len(runs)}">{_e(name)}</td>' if k == 0 else ""
            mism = f"{oc.mismatches} / {oc.size}"
            out.append(
                f"<tr>{first}<td>{_e(run)}</td><td>{_pass_span(oc.passed)}</td>"
                + "".join(_num_cell(getattr(oc, m)) for m in ("max_abs", "mean_abs", "median_abs", "max_rel", "mean_rel"))
                + _num_cell(oc.cosine, fmt(oc.cosine, 8))
                + f'<td class="n">{_e(mism)}</td></tr>'
            )
    out.append("</tbody></table>")
    node, tensor = report.analysis.first_divergence_node, report.analysis.first_divergence
    if node or tensor:
        out.append(f"<p>First divergence with everything in {_e(prec)}: tensor <code>{_e(tensor or '?')}</code>")
        host = folded_host(report.analysis.layers, node)
        out.append(f" from node <code>{_e(host)}</code> (<code>{_e(node)}</code> folded into it).</p>" if host else
                   f" from node <code>{_e(node)}</code>.</p>" if node else ".</p>")
    else:
        out.append('<p class="muted">First divergence: none recorded.</p>')
    out.append("</section>")
    return "".join(out)


def _plots_section(report: Report) -> str:
    prec = precision_name(report)
    n = len(report.analysis.layers)
    hint = "Hover for details; click a point to find the layer in the table." if n else ""
    return (
        '<section id="plots"><h2>Where the error comes from</h2>'
        + _figure_html(plots.plot_layer_errors(report), "layers", f"Per-layer error: all {prec} vs fixed",
                       f"Relative L2 error of each layer's output against FP32, all {prec} (before) and with the fallback set "
                       f"(after). {hint}", "No per-layer data recorded.")
        + _figure_html(plots.plot_value_ranges(report), "layers", f"Value ranges against the {prec} limits",
                       f"Absolute maxima of the FP32 reference values per layer, against the {prec} range. {hint}",
                       "No per-layer data recorded.")
        + _figure_html(plots.plot_trajectory(report), "trajectory", "Search trajectory",
                       "Every evaluation of the search: how many nodes were in FP32 and whether the tolerance was met.",
                       "No evaluations recorded.")
        + "</section>"
    )


def _layers_section(report: Report) -> str:
    layers = layers_in_order(report)
    out = ['<section id="layer-table"><h2>All layers</h2>']
    if not layers:
        out.append('<p class="muted">No per-layer analysis recorded.</p></section>')
        return "".join(out)
    out.append(
        '<div class="tablebar"><input type="search" id="layer-filter" placeholder="filter by name or op" aria-label="filter">'
        '<label><input type="checkbox" id="fb-only"> FP32 fallback only</label>'
        f'<span id="layer-count" class="muted">{len(layers)} layers</span>'
        '<span class="muted">Click a header to sort (again to reverse).</span></div>'
    )
    ths = "".join(
        f'<th data-key="{k}" data-type="{t}" data-first="{d}" title="{_e(tip)}"' + (' class="n"' if t == "num" else "")
        + f">{_e(h)}</th>"
        for k, h, t, d, tip in LAYER_COLUMNS
    )
    out.append(f'<div class="scroll"><table id="layers"><thead><tr>{ths}</tr></thead><tbody id="layer-body">')
    folded_in = {str(lay.folded_into): str(lay.name) for lay in layers if lay.folded_into}  # Conv -> its folded BN
    for pos, lay in enumerate(layers):
        fb = bool(lay.fallback)
        name, op = str(lay.name), str(lay.op_type)
        how = (f" (folded into {lay.folded_into}, which runs it)" if lay.folded_into else
               f" ({folded_in[name]} folded in)" if name in folded_in else "")
        cells = [
            _num_cell(lay.index),
            _num_cell(lay.rank),
            f'<td class="name">{_e(name)}</td>',
            f"<td>{_e(op)}" + (f'<span class="muted">{_e(how)}</span>' if how else "") + "</td>",
            _num_cell(1 if fb else 0, "FP32" if fb else ""),
            _num_cell(lay.score),
            *(_num_cell(getattr(lay, k)) for k in ("local_rel_l2", "rounding_rel_l2", "lowp_rel_l2", "fixed_rel_l2",
                                                   "ref_absmax", "input_ref_absmax")),
            _num_cell(lay.frac_above_max, fmt_pct(lay.frac_above_max)),
            _num_cell(lay.frac_below_normal, fmt_pct(lay.frac_below_normal, 1)),
            _num_cell(lay.flops, fmt_flops(lay.flops)),
            _num_cell(1 if lay.input_sensitive else 0, "yes" if lay.input_sensitive else ""),
        ]
        text = _e(f"{name} {op}".lower())
        out.append(f'<tr data-i="{pos}" data-text="{text}"' + (' class="fb"' if fb else "") + ">" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div></section>")
    return "".join(out)


def _trajectory_section(report: Report) -> str:
    traj = report.search.trajectory
    if not traj:
        return ""
    rows = []
    for t in traj:
        fb = [str(n) for n in t.fallback]
        shown = ", ".join(fb[:12]) + (f", … (+{len(fb) - 12})" if len(fb) > 12 else "")
        rows.append(
            f'<tr><td class="n">{_e(t.step)}</td><td>{_e(t.phase)}</td>'
            f'<td class="n">{_e(t.size)}</td>' + _num_cell(t.cost)
            + f"<td>{_pass_span(t.passed)}</td><td class=\"name\">{_e(t.worst_output or '—')}</td>"
            + _num_cell(t.max_abs) + _num_cell(t.elapsed_s, fmt_time(t.elapsed_s))
            + f'<td class="name">{_e(shown)}</td></tr>'
        )
    return (
        f'<section id="search"><h2>Search steps</h2><details{" open" if len(traj) <= 30 else ""}>'
        f"<summary>{counted(len(traj), 'evaluation')}</summary><div class=\"scroll\"><table><thead><tr>"
        '<th class="n">Step</th><th>Phase</th><th class="n">Size</th><th class="n">Cost</th><th>Result</th>'
        '<th>Worst output</th><th class="n">Max abs</th><th class="n">Elapsed</th><th>FP32 set</th></tr></thead><tbody>'
        + "".join(rows) + "</tbody></table></div></details></section>"
    )


def _commands_section(report: Report) -> str:
    cmds = {k: v for k, v in report.answer.commands.items() if v}
    arts = {k: v for k, v in report.answer.artifacts.items() if v}
    out = []
    if cmds:
        out.append('<section id="commands"><h2>Commands</h2>')
        if named := named_onnx_sentence(report):
            out.append(f"<p>{_e(named.replace('`', ''))}</p>")
        for i, (key, cmd) in enumerate(cmds.items()):
            out.append(
                f'<div class="cmd"><div>{_e(COMMAND_TITLES.get(key, key))}</div>'
                f'<button type="button" data-copy="cmd-{i}">copy</button><pre id="cmd-{i}">{_e(cmd)}</pre></div>'
            )
        out.append("</section>")
    if arts:
        items = "".join(f"<li><code>{_e(p)}</code>: {_e(artifact_title(k))}</li>" for k, p in arts.items())
        out.append(f'<section id="artifacts"><h2>Artifacts</h2><ul>{items}</ul></section>')
    return "".join(out)


def _next_steps_section(report: Report) -> str:
    return section_html(next_steps_section.build(report))


def _settings_section(report: Report) -> str:
    model = report.model or ModelInfo(path="?", hash="—")
    limits = report.analysis.format_limits
    prec = precision_name(report)
    rows = [
        ("Model", f"{model.path}"),
        ("Model hash", model.hash),
        ("Graph", f"{model.nodes} nodes, {model.candidates} candidates, "
                  f"{fmt_flops(model.total_flops)}"),
        ("Format", f"{prec}: max {fmt(limits.max)}, smallest normal {fmt(limits.smallest_normal)}"),
        ("Samples", samples_cell(report)),
        ("Status", f"{report.status}" + (f": {report.reason}" if report.reason else "")),
        ("Created", f"{report.invocation.created or '?'} by {report.invocation.tool} {report.invocation.version}"),
    ]
    renamed = [n for n in model.renamed_nodes if n not in model.unsafe_names]
    if renamed:
        rows.append(("Renamed nodes", ", ".join(str(n) for n in renamed[:50]) + (" …" if len(renamed) > 50 else "")))
    if model.unsafe_names:
        unsafe = list(model.unsafe_names.items())
        rows.append(("Unsafe node names (renamed)", ", ".join(f"{new} (was '{old}')" for new, old in unsafe[:50])
                     + (" …" if len(unsafe) > 50 else "")))
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f'<section id="settings"><h2>Run</h2><table>{body}</table></section>'


def _page_data(report: Report) -> dict[str, Any]:
    """Compact display strings for the plot tooltips (indexed like the plots' x axes)."""
    layers = layers_in_order(report)
    traj = report.search.trajectory
    return {
        "layers": [
            [str(lay.name), str(lay.op_type),
             *(fmt(getattr(lay, k)) for k in ("lowp_rel_l2", "fixed_rel_l2", "local_rel_l2", "ref_absmax",
                                              "input_ref_absmax")),
             bool(lay.fallback)]
            for lay in layers
        ],
        "trajectory": [
            [step, str(t.phase), fmt(t.size), bool(t.passed),
             str(t.worst_output or "—"), fmt(t.max_abs),
             ", ".join(map(str, t.fallback[:6])) + (" …" if len(t.fallback) > 6 else "")]
            for step, t in zip(plots.step_numbers(traj), traj)
        ],
    }


def _cost_section(report: Report) -> str:
    plot = plots.plot_tradeoff(report)
    return pricing.html_section(report, plot.svg if plot is not None else None)


def render_html(report: Report) -> str:
    """report.html: a single offline page with verdict, tables, three inline-SVG plots and a sortable layer table.

    The layer table honours `#sort=<column>[:asc|:desc]` in the URL; when the page script has run,
    `<body data-ready="1">` is set and script errors are shown in `#js-errors`.
    """
    title = f"precision-doctor: {report.statement.label} · {report.model.path if report.model else '?'}"
    body = "".join(
        [
            _header(report),
            _next_steps_section(report),
            _fallback_section(report),
            _cost_section(report),
            html_sections(report),
            _outputs_section(report),
            _plots_section(report),
            _layers_section(report),
            _trajectory_section(report),
            _commands_section(report),
            _settings_section(report),
        ]
    )
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}</style><script>{JS_ERRORS}</script></head>\n"
        f'<body><div id="js-errors" hidden></div><main>{body}'
        f"<footer>Generated by {_e(report.invocation.tool)} {_e(report.invocation.version)}"
        f" on {_e(report.invocation.created)}. Self-contained: no network access needed.</footer></main>"
        f'<script type="application/json" id="pd-data">{_json_for_script(_page_data(report))}</script>'
        f"<script>{JS_MAIN}</script></body></html>\n"
    )
