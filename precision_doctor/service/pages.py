"""Server-rendered pages: the job list and one job with live progress (server-sent events), the report's
summary once it is done (`render/brief.py`: the report's own words) and its files. Self-contained HTML (inline
CSS and JS, no external URLs); every value is escaped, and scripts fill the page through textContent only. A
page carries the daemon's CSRF value (`auth.csrf_value`, empty without a token) and sends it as X-CSRF-Token
with every request that changes something."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from precision_doctor.service.store import Job, view

# The phases a job's bar shows, in order, and the progress events' phases each covers (control.PhaseEvent).
PHASES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("capture", ("capture",), "every layer captured in FP32 and in low precision, then analysed"),
    ("search", ("reference", "search"), "the smallest set of nodes to keep in FP32"),
    ("confirm", ("spread", "confirm", "knobs"),
     "the answer carried over to the confirm backend (when one is set; on a GPU its own spread measured first)"),
    ("validate", ("validate", "other-runtime"),
     "the final answer checked on held-out samples (repaired where they fail it), and for the other runtime"),
    ("artifacts", ("artifacts",), "fixed.onnx, the commands and the report written"),
)

_CSS = """
:root{--pass:#1a7f37;--warn:#b7791f;--fail:#c62828;--bd:#d0d7de;--mut:#57606a;--bg:#f6f8fa;--run:#0969da}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;color:#1f2328;margin:0;background:#fff}
main{max-width:1100px;margin:0 auto;padding:18px 24px 48px} main.wide{max-width:1400px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:22px 0 8px;border-bottom:1px solid var(--bd);padding-bottom:3px}
p.sub{color:var(--mut);margin:0 0 12px} a{color:var(--run)}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;font-size:12.5px}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #e5e7eb;padding:5px 8px;text-align:left;vertical-align:top}
th{background:var(--bg);font-weight:600;white-space:nowrap}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.file{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px;white-space:nowrap}
td.when{white-space:nowrap} td.model{overflow-wrap:break-word} td.msg{overflow-wrap:anywhere;min-width:24ch;width:36%}
td.about{width:62%} main.wide th{white-space:normal}
.st{font-weight:600;border-radius:10px;padding:1px 8px;font-size:12.5px;white-space:nowrap}
.st-done,.st-pass{background:#dafbe1;color:var(--pass)}.st-failed,.st-cancelled,.st-fail{background:#ffebe9;color:var(--fail)}
.st-running{background:#ddf4ff;color:var(--run)}.st-queued{background:var(--bg);color:var(--mut)}
.st-warn{background:#fff8c5;color:#7d4e00}
.badge{font-weight:700;color:#fff;border-radius:6px;padding:4px 11px;font-size:14px;letter-spacing:.02em;background:var(--mut)}
.badge.pass{background:var(--pass)}.badge.warn{background:var(--warn)}.badge.fail,.badge.failed,.badge.cancelled{background:var(--fail)}
.badge.running{background:var(--run)}
.verdict{display:flex;gap:12px;align-items:center;flex-wrap:wrap;margin:10px 0 6px}.sentence{font-size:15px}
.kpis{display:grid;grid-template-columns:repeat(auto-fill,minmax(170px,1fr));gap:8px;margin:12px 0}
.kpi{background:var(--bg);border:1px solid var(--bd);border-radius:6px;padding:7px 10px}
.kpi b{display:block;font-size:17px}.kpi.wide{grid-column:span 2}.kpi.wide b{font-size:14px;padding:3px 0}
.kpi span{color:var(--mut);font-size:12px}
.phases{display:flex;gap:3px;margin:8px 0 4px;max-width:640px}
.seg{flex:1;min-width:0}.seg .track{height:10px;background:#eaeef2;border-radius:3px;overflow:hidden}
.seg .fill{height:100%;width:0;background:var(--run);transition:width .2s}
.seg.skipped .track{background:repeating-linear-gradient(45deg,#eaeef2 0 4px,#f6f8fa 4px 8px)}
.seg .name{font-size:12px;color:var(--mut);margin-top:2px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.seg.now .name{color:#1f2328;font-weight:600}
.phases.pass .fill{background:var(--pass)}.phases.warn .fill{background:var(--warn)}.phases.fail .fill{background:var(--fail)}
.muted,.msg{color:var(--mut)} .note{font-size:12.5px;color:var(--mut);max-width:760px;margin:4px 0 0}
.reason{background:#fff8e1;border:1px solid #f0d48a;border-radius:6px;padding:6px 10px;margin:8px 0}
ol.steps li{margin:4px 0 10px} ol.steps pre{background:#0d1117;color:#e6edf3;border-radius:6px;padding:8px 10px;margin:4px 0;
 white-space:pre-wrap;word-break:break-all}
button{font:inherit;padding:3px 12px;cursor:pointer}
"""

_LIST_JS = """
(function(){
 var body=document.getElementById('jobs');
 function cell(tr,text,cls){var td=document.createElement('td');td.textContent=text==null?'':String(text);
  if(cls)td.className=cls;tr.appendChild(td);return td;}
 function badge(td,text,cls){var sp=document.createElement('span');sp.className='st st-'+cls;sp.textContent=text;
  td.appendChild(sp);}
 function render(jobs){
  var rows=[];
  jobs.forEach(function(j){
   var tr=document.createElement('tr'),a=document.createElement('a'),td=document.createElement('td');
   a.href='/ui/jobs/'+encodeURIComponent(j.id);a.textContent=j.id;td.appendChild(a);tr.appendChild(td);
   var p=j.progress||{},r=j.result||{},v=j.state==='done'&&r.label;
   cell(tr,j.name,'model');
   var s=cell(tr,'');badge(s,v?r.label:j.state,v?r.tone:j.state);
   cell(tr,j.state==='running'?(p.phase||'')+(p.evaluations?' · '+p.evaluations+' evaluations':''):'');
   var none=['no_solution','incomplete'].indexOf(r.verdict)>=0;
   cell(tr,r.fallback_size!=null&&!none?r.fallback_size:(p.best_size!=null?p.best_size:''),'n');
   cell(tr,j.result?r.evaluations:(p.evaluations||''),'n');
   cell(tr,(j.created||'').replace('T',' ').slice(0,19),'when');
   var sentence=r.headline&&r.label&&r.headline.indexOf(r.label+': ')===0?r.headline.slice(r.label.length+2):r.headline;
   var text=j.error||sentence||r.reason||'',m=cell(tr,text.length>180?text.slice(0,179)+'…':text,'msg');m.title=text;
   if(j.files_removed){var i=document.createElement('div');i.textContent='files removed';i.className='muted';m.appendChild(i);}
   rows.push(tr);});
  body.replaceChildren.apply(body,rows);
  document.getElementById('count').textContent=jobs.length+' job(s)';
  document.getElementById('none').hidden=jobs.length>0;
  document.body.setAttribute('data-refreshed',String(Date.now()));}
 function load(){fetch('/jobs?limit=200').then(function(r){return r.json();}).then(function(d){render(d.jobs);})
  .catch(function(){});}
 render(JSON.parse(document.getElementById('initial').textContent));setInterval(load,2000);
})();
"""

_JOB_JS = """
(function(){
 var init=JSON.parse(document.getElementById('initial').textContent),job=init.job,summary=init.summary,phases=init.phases;
 var seen=[],TERMINAL=['done','failed','cancelled'],loaded=false;
 function $(id){return document.getElementById(id);}
 function el(tag,text,cls){var e=document.createElement(tag);if(text!=null)e.textContent=String(text);
  if(cls)e.className=cls;return e;}
 function show(id,on){$(id).hidden=!on;}
 function phaseIndex(name){for(var i=0;i<phases.length;i++){if(phases[i].events.indexOf(name)>=0)return i;}return -1;}
 function lastPhase(p){var keys=Object.keys(p.phase_s||{}),best=-1;
  keys.forEach(function(k){best=Math.max(best,phaseIndex(k));});return best;}
 function ran(p,i){return Object.keys(p.phase_s||{}).some(function(k){return phaseIndex(k)===i;});}
 function spent(p,i){var t=0;Object.keys(p.phase_s||{}).forEach(function(k){if(phaseIndex(k)===i)t+=p.phase_s[k];});return t;}
 function bar(j){
  var p=j.progress||{},r=j.result||{},done=TERMINAL.indexOf(j.state)>=0;
  var max=(j.spec&&j.spec.search&&j.spec.search.max_evaluations)||null;
  var now=done?lastPhase(p):phaseIndex(p.phase),segs=$('phases').children,frac=0,detail='';
  if(!done&&now===0&&p.capture){var stages=['statistics','tensors'],k=stages.indexOf(p.capture.stage);
   frac=((k<0?0:k)+(p.capture.total?p.capture.done/p.capture.total:0))/stages.length;
   detail=(k===1?'tensors of the top layers':'statistics of every layer')+': '+p.capture.done+' of '+p.capture.total+
    ' steps (a sample through a group of layers)';}
  else if(!done&&now===1){frac=max?Math.min(p.evaluations/max,1):(p.evaluations?1-1/(1+p.evaluations/20):0);
   detail=(p.evaluations||0)+' evaluations'+(max?' of at most '+max:'')+
    (p.best_size!=null?' · smallest passing set so far: '+p.best_size+' node(s)':'');}
  else if(!done&&now===4&&p.capture&&p.capture.stage==='fixed'){frac=p.capture.total?p.capture.done/p.capture.total:0;
   detail='capture with the answer in FP32: '+p.capture.done+' of '+p.capture.total+' steps';}
  else if(!done&&now>=0){frac=0.5;}
  for(var i=0;i<segs.length;i++){
   var f=segs[i].querySelector('.fill'),cls='seg',w=0,t=spent(p,i);
   segs[i].querySelector('.name').textContent=phases[i].name+(t>=0.05&&(done||i<now)?' · '+fmtTime(t):'');
   if(i<now||(done&&i===now)){w=100;if(!ran(p,i)){cls+=' skipped';w=0;}}else if(i===now){w=100*frac;cls+=' now';}
   if(done&&i===now&&j.state!=='done')cls+=' now';
   f.style.width=w.toFixed(1)+'%';segs[i].className=cls;}
  var tone=j.state==='done'?(r.tone||'pass'):(done?'fail':'');$('phases').className='phases'+(tone?' '+tone:'');
  var text;
  if(j.state==='queued')text='Waiting for a worker.';
  else if(j.state==='running'&&now<0)text=p.phase==='load'?'Loading the model and the samples.':'Starting.';
  else if(j.state==='running')text='Phase '+(now+1)+' of '+phases.length+': '+phases[now].name+' ('+phases[now].about+')'+
   (detail?' · '+detail:'');
  else if(j.state==='done')text='Finished in '+fmtTime(Object.keys(p.phase_s||{}).reduce(function(a,k){
   return a+p.phase_s[k];},0))+'. Hatched phases did not run for this job.';
  else if(j.state==='cancelled'&&r.status==='interrupted')
   text='Cancelled during the search; the result below is what it had found by then.';
  else text=(j.state==='failed'?'Failed':'Cancelled')+(now>=0?' during '+phases[now].name:'')+'.';
  $('phase-text').textContent=text;}
 function fmtTime(s){return s<60?s.toFixed(s<10?1:0)+' s':Math.floor(s/60)+' min '+('0'+Math.round(s%60)).slice(-2)+' s';}
 function renderSummary(r){
  var box=$('summary');if(!summary&&!(job.state==='done'&&r&&r.label)){box.hidden=true;return;}
  var s=summary||{label:r.label,tone:r.tone,sentence:r.headline&&r.headline.indexOf(r.label+': ')===0?
   r.headline.slice(r.label.length+2):(r.headline||''),figures:[],next_steps:[]};
  var v=$('verdict');v.replaceChildren(el('span',s.label,'badge '+s.tone),el('span',s.sentence,'sentence'));
  v.firstChild.id='verdict-label';
  $('status-line').textContent=s.status||'';show('status-line',!!s.status);
  var k=$('figures'),items=[];(s.figures||[]).forEach(function(f){var d=el('div',null,'kpi'+(f.value.length>18?' wide':''));
   d.appendChild(el('b',f.value));d.appendChild(el('span',f.label));items.push(d);});k.replaceChildren.apply(k,items);
  $('held-out').textContent=s.held_out||'';show('held-out',!!s.held_out);
  var fb=s.fallback_nodes||[];$('fallback').textContent=fb.length?'Kept in FP32: '+fb.join(', ')+
   (s.fallback_size>fb.length?', … ('+(s.fallback_size-fb.length)+' more in the report)':''):'';show('fallback',fb.length>0);
  var ol=$('steps'),steps=[];(s.next_steps||[]).forEach(function(st){var li=el('li',st.text);
   if(st.command)li.appendChild(el('pre',st.command));steps.push(li);});ol.replaceChildren.apply(ol,steps);
  show('next',steps.length>0);show('report-link',!!summary);box.hidden=false;}
 function render(j){
  job=j;var p=j.progress||{},r=j.result||{},done=TERMINAL.indexOf(j.state)>=0,v=j.state==='done'&&r.label;
  var st=$('state');st.textContent=v?r.label:j.state;st.className='badge '+(v?r.tone:j.state);
  st.hidden=!!(v&&summary);show('bar-note',!done);
  bar(j);
  var bits=[];if(j.created)bits.push('submitted '+j.created.replace('T',' ').slice(0,19)+' UTC');
  if(j.finished)bits.push('finished '+j.finished.replace('T',' ').slice(0,19)+' UTC');
  if(j.attempts>1)bits.push(j.attempts+' attempts');$('when').textContent=bits.join(' · ');
  var msg=j.error||(done&&!summary&&r.reason)||'';$('message').textContent=msg;show('message-box',!!msg);
  var ws=(p.warnings||[]).map(function(w){return el('li',w);});$('warnings').replaceChildren.apply($('warnings'),ws);
  show('warnings-box',ws.length>0);
  $('removed').textContent=j.files_removed||'';show('removed',!!j.files_removed);
  if(p.evaluations!=null&&seen[seen.length-1]!==p.evaluations)seen.push(p.evaluations);
  document.body.setAttribute('data-state',j.state);document.body.setAttribute('data-seen',seen.join(','));
  show('cancel',!done);
  if(done&&!loaded){loaded=true;
   if(!summary&&r.label&&!j.files_removed)loadSummary();else summarized(r);loadArtifacts();}
  else if(!done)renderSummary(null);}
 function summarized(r){renderSummary(r);document.body.setAttribute('data-summary',summary?'shown':'none');}
 function loadSummary(){fetch('/jobs/'+encodeURIComponent(job.id)+'/summary').then(function(r){return r.ok?r.json():null;})
  .then(function(d){summary=d;summarized(job.result);render(job);}).catch(function(){summarized(job.result);});}
 function kind(n){var x=n.split('.').pop();return {jsonl:'evaluations of the run, one JSON line each',
  h5:'data of the run (HDF5)',json:'data of the run (JSON)',onnx:'a model of the run (ONNX)',
  sh:'a script of the run',raw:'raw tensor data',txt:'text written by the run'}[x]||'a file of the run';}
 function loadArtifacts(){fetch('/jobs/'+encodeURIComponent(job.id)+'/artifacts').then(function(r){return r.json();})
  .then(function(d){var about=(summary&&summary.artifacts)||{},list=d.artifacts||[],rows=[];
   list.sort(function(a,b){var ia=Object.keys(about).indexOf(a.name),ib=Object.keys(about).indexOf(b.name);
    ia=ia<0?1e9:ia;ib=ib<0?1e9:ib;return ia-ib||(a.name<b.name?-1:1);});
   list.forEach(function(a){var tr=document.createElement('tr'),td=el('td',null,'file'),link=el('a',a.name);
    link.href='/jobs/'+encodeURIComponent(job.id)+'/artifacts/'+a.name.split('/').map(encodeURIComponent).join('/');
    td.appendChild(link);tr.appendChild(td);tr.appendChild(el('td',a.size_text,'n'));
    tr.appendChild(el('td',about[a.name]||about[a.name.split('/')[0]+'/']||kind(a.name),'msg about'));
    rows.push(tr);});
   var tb=$('artifacts');tb.replaceChildren.apply(tb,rows);show('files',rows.length>0);
   document.body.setAttribute('data-artifacts',String(rows.length));}).catch(function(){});}
 $('cancel').addEventListener('click',function(){
  var csrf=document.querySelector('meta[name="pd-csrf"]').content;
  fetch('/jobs/'+encodeURIComponent(job.id),{method:'DELETE',headers:csrf?{'X-CSRF-Token':csrf}:{}})
  .then(function(r){return r.json();})
  .then(function(j){if(j&&j.id)render(j);});});
 render(job);
 if(TERMINAL.indexOf(job.state)<0&&window.EventSource){
  var es=new EventSource('/jobs/'+encodeURIComponent(job.id)+'/events');
  es.addEventListener('job',function(e){render(JSON.parse(e.data));});
  es.addEventListener('end',function(e){render(JSON.parse(e.data));es.close();});}
})();
"""


def _page(title: str, body: str, data: dict | list, script: str, csrf: str = "", wide: bool = False) -> str:
    blob = json.dumps(data).replace("<", "\\u003c")  # nothing in the JSON can close the script element
    main = "<main class=\"wide\">" if wide else "<main>"
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
        f"<meta name=\"pd-csrf\" content=\"{escape(csrf)}\">"
        f"<title>{escape(title)}</title><link rel=\"icon\" href=\"data:,\"><style>{_CSS}</style></head><body>{main}{body}</main>"
        f"<script type=\"application/json\" id=\"initial\">{blob}</script><script>{script}</script></body></html>\n"
    )


def job_list_page(jobs: list[Job], counts: dict[str, int], csrf: str = "") -> str:
    """Every job, newest first, with its verdict's badge (the report's label) once done; refreshes every 2 s."""
    sub = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    head = "".join(f"<th>{h}</th>" for h in ("Job", "Model", "Result", "Phase", "FP32 nodes", "Evaluations",
                                              "Submitted (UTC)", "Message"))
    body = (f"<h1>precision-doctor jobs</h1><p class=\"sub\"><span id=\"count\"></span> &middot; {escape(sub or 'none yet')}"
            " &middot; <a href=\"/docs\">API</a></p>"
            f"<table><thead><tr>{head}</tr></thead><tbody id=\"jobs\"></tbody></table>"
            "<p id=\"none\" class=\"muted\" hidden>No jobs yet: submit one with <code>precision-doctor submit MODEL "
            "--inputs SAMPLE.npz</code>.</p>")
    return _page("precision-doctor jobs", body, [view(j, detail=False).to_json() for j in jobs], _LIST_JS, csrf, wide=True)


def job_page(job: Job, summary: dict | None = None, csrf: str = "") -> str:
    """One job: its state, a bar over the phases of a diagnosis (live), the report's summary once there is one
    (`report_summary`), its message when it failed, and its files with their sizes."""
    rid = escape(job.id)
    phases = [{"name": name, "events": list(events), "about": about} for name, events, about in PHASES]
    segs = "".join(f"<div class=\"seg\" title=\"{escape(name)}: {escape(about)}\"><div class=\"track\"><div class=\"fill\">"
                   f"</div></div><div class=\"name\">{escape(name)}</div></div>" for name, _, about in PHASES)
    body = (
        f"<p><a href=\"/ui\">&larr; all jobs</a></p><h1>Job {rid}: {escape(job.name)}</h1>"
        "<p class=\"sub\"><span id=\"when\"></span></p>"
        "<div class=\"verdict\"><span id=\"state\" class=\"badge\"></span>"
        "<button id=\"cancel\" type=\"button\" hidden>Cancel</button></div>"
        f"<section id=\"progress\"><div id=\"phases\" class=\"phases\">{segs}</div><p id=\"phase-text\"></p>"
        "<p id=\"bar-note\" class=\"note\">The bar has one part per phase of a diagnosis, in order. The search's part fills with "
        "the evaluations used of <code>--max-evaluations</code> (without one, ever more slowly; it completes when the "
        "search ends, usually well before the budget); the capture's with the tensors written.</p></section>"
        "<section id=\"warnings-box\" hidden><h2>Warnings</h2><ul id=\"warnings\" class=\"reason\"></ul></section>"
        "<section id=\"message-box\" hidden><h2>Message</h2><p id=\"message\" class=\"reason\"></p></section>"
        "<section id=\"summary\" hidden><h2>Result</h2><div id=\"verdict\" class=\"verdict\"></div>"
        "<div id=\"status-line\" class=\"reason\" hidden></div><div id=\"figures\" class=\"kpis\"></div>"
        "<p id=\"held-out\" hidden></p><p id=\"fallback\" class=\"name\" hidden></p>"
        "<div id=\"next\" hidden><h2>Next steps</h2><ol id=\"steps\" class=\"steps\"></ol><p class=\"note\">The "
        "build and check commands read the job's files (below) by their names: download them into one directory and run "
        "them there. <code>resubmit</code> runs the job again on the daemon's copies of your files; <code>submit</code> "
        "sends yours again."
        "</p></div>"
        f"<p id=\"report-link\" hidden><a id=\"report\" href=\"/jobs/{rid}/report\">Open the full report</a> "
        "(per-layer tables, plots, every command)</p></section>"
        "<p id=\"removed\" class=\"reason\" hidden></p>"
        "<section id=\"files\" hidden><h2>Artifacts</h2><table><thead><tr><th>File</th><th>Size</th><th>What it is</th>"
        "</tr></thead><tbody id=\"artifacts\"></tbody></table></section>"
    )
    data = {"job": view(job).to_json(), "summary": summary, "phases": phases}
    return _page(f"precision-doctor job {job.id}", body, data, _JOB_JS, csrf)


def report_summary(run_dir: Path) -> dict | None:
    """The report's brief (`render/brief.py`) of the run in `run_dir` as JSON; None without a report.json, ReportError
    for one that does not read (one of an earlier version)."""
    from precision_doctor.render.brief import brief
    from precision_doctor.results.report import Report

    if not (run_dir / "report.json").is_file():
        return None
    return brief(Report.load(run_dir)).to_json()


def login_page(failed: bool = False) -> str:
    note = "<p class=\"msg\">Wrong token.</p>" if failed else ""
    body = (f"<h1>precision-doctor</h1>{note}<form method=\"post\" action=\"/login\"><p>This daemon needs its token.</p>"
            "<p><input type=\"password\" name=\"token\" autofocus size=\"40\"> "
            "<button type=\"submit\">Sign in</button></p></form>")
    return _page("precision-doctor: sign in", body, {}, "")
