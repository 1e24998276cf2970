"""Server-rendered pages: the job list and one job with live progress (server-sent events) and a link
to its report. Self-contained HTML (inline CSS and JS, no external URLs); every value is escaped, and
scripts fill the page through textContent only. A page carries the daemon's CSRF value (`auth.csrf_value`,
empty without a token) and sends it as X-CSRF-Token with every request that changes something."""

from __future__ import annotations

import json
from html import escape

from precision_doctor.service.store import Job, view

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;color:#1f2328;margin:0;background:#fff}
main{max-width:1100px;margin:0 auto;padding:18px 24px 48px}
h1{font-size:20px;margin:0 0 4px} p.sub{color:#57606a;margin:0 0 14px} a{color:#0969da}
table{border-collapse:collapse;width:100%} th,td{border-bottom:1px solid #e5e7eb;padding:5px 8px;text-align:left}
th{background:#f6f8fa;font-weight:600} td.n{text-align:right;font-variant-numeric:tabular-nums}
.st{font-weight:600;border-radius:10px;padding:1px 8px;font-size:12.5px}
.st-done{background:#dafbe1;color:#1a7f37}.st-failed,.st-cancelled{background:#ffebe9;color:#c62828}
.st-running{background:#ddf4ff;color:#0969da}.st-queued{background:#f6f8fa;color:#57606a}
.st-pass{background:#dafbe1;color:#1a7f37}.st-warn{background:#fff8c5;color:#9a6700}.st-fail{background:#ffebe9;color:#c62828}
dl{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px;margin:14px 0}dt{color:#57606a}dd{margin:0}
.bar{height:10px;background:#eaeef2;border-radius:5px;overflow:hidden;margin:10px 0 16px;max-width:520px}
.bar>div{height:100%;width:0;background:#0969da;transition:width .2s}
.bar.pass>div{background:#1a7f37}.bar.warn>div{background:#bf8700}.bar.fail>div{background:#c62828}
.msg{color:#57606a} button{font:inherit;padding:3px 12px;cursor:pointer}
"""

_LIST_JS = """
(function(){
 var body=document.getElementById('jobs');
 function cell(tr,text,cls){var td=document.createElement('td');td.textContent=text==null?'':String(text);
  if(cls)td.className=cls;tr.appendChild(td);return td;}
 function render(jobs){
  var rows=[];
  jobs.forEach(function(j){
   var tr=document.createElement('tr'),a=document.createElement('a'),td=document.createElement('td');
   a.href='/ui/jobs/'+encodeURIComponent(j.id);a.textContent=j.id;td.appendChild(a);tr.appendChild(td);
   var p=j.progress||{},r=j.result||{},v=j.state==='done'&&r.label;
   cell(tr,j.name);var s=cell(tr,'');var sp=document.createElement('span');sp.className='st st-'+(v?r.tone:j.state);
   sp.textContent=v?r.label:j.state;s.appendChild(sp);
   cell(tr,j.state==='running'?(p.phase||''):'');cell(tr,p.evaluations,'n');
   cell(tr,r.fallback_size!=null?r.fallback_size:(p.best_size!=null?p.best_size:''),'n');
   cell(tr,j.result?(r.passed?'yes':'no'):'');cell(tr,(j.created||'').replace('T',' ').slice(0,19));
   cell(tr,j.error||r.headline||r.reason||'','msg');rows.push(tr);});
  body.replaceChildren.apply(body,rows);
  document.getElementById('count').textContent=jobs.length+' job(s)';
  document.body.setAttribute('data-refreshed',String(Date.now()));}
 function load(){fetch('/jobs?limit=200').then(function(r){return r.json();}).then(function(d){render(d.jobs);})
  .catch(function(){});}
 render(JSON.parse(document.getElementById('initial').textContent));setInterval(load,2000);
})();
"""

_JOB_JS = """
(function(){
 var job=JSON.parse(document.getElementById('initial').textContent),seen=[];
 function set(id,text){document.getElementById(id).textContent=text==null?'':String(text);}
 function render(j){
  var p=j.progress||{},r=j.result||{},max=(j.spec&&j.spec.search&&j.spec.search.max_evaluations)||null;
  var v=j.state==='done'&&r.label,st=document.getElementById('state');
  st.textContent=v?r.label:j.state;st.className='st st-'+(v?r.tone:j.state);
  set('phase',p.phase);set('evals',p.evaluations);set('best',p.best_size);set('attempts',j.attempts);
  set('result',j.result?(r.headline||(r.passed?'passed: keep '+r.fallback_size+' node(s) in FP32':'no passing set'))+
   ' ('+r.evaluations+' evaluations'+(r.capture_reused?', capture reused':'')+')':'');
  set('error',j.error||r.reason||'');
  var bar=document.getElementById('bar'),done=['done','failed','cancelled'].indexOf(j.state)>=0;
  var frac=done?1:(max&&p.evaluations?Math.min(p.evaluations/max,1):(p.evaluations?1-1/(1+p.evaluations/10):0));
  bar.firstElementChild.style.width=(100*frac).toFixed(1)+'%';
  bar.className='bar'+(v?' '+r.tone:(done?' fail':''));
  if(p.evaluations!=null&&seen[seen.length-1]!==p.evaluations)seen.push(p.evaluations);
  document.body.setAttribute('data-state',j.state);document.body.setAttribute('data-seen',seen.join(','));
  document.getElementById('report').hidden=!(j.state==='done'||(j.state==='cancelled'&&j.result));
  document.getElementById('cancel').hidden=done;
  if(done)loadArtifacts();}
 function loadArtifacts(){fetch('/jobs/'+encodeURIComponent(job.id)+'/artifacts').then(function(r){return r.json();})
  .then(function(d){var ul=document.getElementById('artifacts'),items=[];(d.artifacts||[]).forEach(function(a){
   var li=document.createElement('li'),link=document.createElement('a');
   link.href='/jobs/'+encodeURIComponent(job.id)+'/artifacts/'+a.name.split('/').map(encodeURIComponent).join('/');
   link.textContent=a.name;li.appendChild(link);li.appendChild(document.createTextNode(' ('+a.size+' bytes)'));
   items.push(li);});ul.replaceChildren.apply(ul,items);}).catch(function(){});}
 document.getElementById('cancel').addEventListener('click',function(){
  var csrf=document.querySelector('meta[name="pd-csrf"]').content;
  fetch('/jobs/'+encodeURIComponent(job.id),{method:'DELETE',headers:csrf?{'X-CSRF-Token':csrf}:{}})
  .then(function(r){return r.json();})
  .then(function(j){if(j&&j.id)render(j);});});
 render(job);
 if(['done','failed','cancelled'].indexOf(job.state)<0&&window.EventSource){
  var es=new EventSource('/jobs/'+encodeURIComponent(job.id)+'/events');
  es.addEventListener('job',function(e){job=JSON.parse(e.data);render(job);});
  es.addEventListener('end',function(e){render(JSON.parse(e.data));es.close();});}
})();
"""


def _page(title: str, body: str, data: dict | list, script: str, csrf: str = "") -> str:
    blob = json.dumps(data).replace("<", "\\u003c")  # nothing in the JSON can close the script element
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
        f"<meta name=\"pd-csrf\" content=\"{escape(csrf)}\">"
        f"<title>{escape(title)}</title><link rel=\"icon\" href=\"data:,\"><style>{_CSS}</style></head><body><main>{body}</main>"
        f"<script type=\"application/json\" id=\"initial\">{blob}</script><script>{script}</script></body></html>\n"
    )


def job_list_page(jobs: list[Job], counts: dict[str, int], csrf: str = "") -> str:
    """Every job, newest first; the table refreshes itself every 2 s."""
    sub = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    head = "".join(f"<th>{h}</th>" for h in ("Job", "Model", "State", "Phase", "Evaluations", "FP32 nodes", "Passed",
                                              "Submitted (UTC)", "Message"))
    body = (f"<h1>precision-doctor jobs</h1><p class=\"sub\"><span id=\"count\"></span> &middot; {escape(sub or 'none yet')}"
            " &middot; <a href=\"/docs\">API</a></p>"
            f"<table><thead><tr>{head}</tr></thead><tbody id=\"jobs\"></tbody></table>")
    return _page("precision-doctor jobs", body, [view(j, detail=False).to_json() for j in jobs], _LIST_JS, csrf)


def job_page(job: Job, csrf: str = "") -> str:
    """One job: state, phase, evaluations and best set so far, live; the report link when it is done."""
    rid = escape(job.id)
    body = (
        f"<p><a href=\"/ui\">&larr; all jobs</a></p><h1>Job {rid}: {escape(job.name)}</h1>"
        "<p class=\"sub\"><span id=\"state\" class=\"st\"></span></p>"
        "<div id=\"bar\" class=\"bar\"><div></div></div>"
        "<dl><dt>Phase</dt><dd id=\"phase\"></dd><dt>Evaluations</dt><dd id=\"evals\"></dd>"
        "<dt>Smallest passing set so far</dt><dd id=\"best\"></dd><dt>Attempts</dt><dd id=\"attempts\"></dd>"
        "<dt>Result</dt><dd id=\"result\"></dd><dt>Message</dt><dd id=\"error\" class=\"msg\"></dd></dl>"
        f"<p><a id=\"report\" href=\"/jobs/{rid}/report\" hidden>Open the report</a> "
        "<button id=\"cancel\" type=\"button\" hidden>Cancel</button></p>"
        "<h2 style=\"font-size:16px\">Artifacts</h2><ul id=\"artifacts\"></ul>"
    )
    return _page(f"precision-doctor job {job.id}", body, view(job).to_json(), _JOB_JS, csrf)


def login_page(failed: bool = False) -> str:
    note = "<p class=\"msg\">Wrong token.</p>" if failed else ""
    body = (f"<h1>precision-doctor</h1>{note}<form method=\"post\" action=\"/login\"><p>This daemon needs its token.</p>"
            "<p><input type=\"password\" name=\"token\" autofocus size=\"40\"> "
            "<button type=\"submit\">Sign in</button></p></form>")
    return _page("precision-doctor: sign in", body, {}, "")
