"""The daemon's pages in headless Chromium (over the DevTools protocol): a job's page follows a running
job live (its evaluation count rises while it runs, then the report link appears), paints, and logs
no console errors; the job list shows the job.

Skipped without a `chromium` binary."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from cdp_pipe import Browser
from service_helpers import Daemon, slow_model

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("svc-browser")
    d = Daemon(root / "state", "--allow-root", str(root)).start()
    yield d, root
    d.stop()


def test_job_page_follows_a_running_job(chromium: str, daemon, tmp_path: Path) -> None:
    from PIL import Image

    d, root = daemon
    model, settings = slow_model(root / "slow.onnx", blocks=24)  # ~25 evaluations: the page sees them rise
    job = httpx.post(f"{d.url}/jobs", json={"model": str(model), "settings": settings}, timeout=30).json()
    browser = Browser(chromium, tmp_path / "profile")
    try:
        browser.goto(f"{d.url}/ui/jobs/{job['id']}")
        deadline, seen, phases = time.monotonic() + 120, "", set()
        while time.monotonic() < deadline:
            state = browser.eval("document.body && document.body.dataset.state") or ""
            seen = browser.eval("document.body && document.body.dataset.seen") or ""
            phases.add(browser.eval("var n=document.querySelector('.seg.now .name');"
                                    "(n?n.textContent:'')+' | '+document.getElementById('phase-text').textContent"))
            if state in ("done", "failed", "cancelled"):
                break
            time.sleep(0.1)
        assert state == "done", (state, seen, d.job(job["id"]))
        # the bar names its phase: the segment that fills now, and the line under it
        assert any(p.startswith("search | Phase 2 of 5: search (") and "evaluations" in p for p in phases), phases
        counts = [int(x) for x in seen.split(",") if x]
        final = d.job(job["id"])["result"]["evaluations"]
        # the page saw the count rise while the job ran (not only the final number), and ended at the job's count
        assert len(counts) >= 3 and counts == sorted(counts) and counts[-1] == final, (counts, final)
        _until(browser, _SETTLED)  # the summary and the artifact list load once the job is done
        assert browser.eval("document.getElementById('report-link').hidden") is False
        assert "report.html" in (browser.eval("document.getElementById('artifacts').textContent") or "")
        shot = browser.screenshot(tmp_path / "job.png")
        img = np.asarray(Image.open(shot).convert("RGB")).astype(np.int16)
        assert (img.min(axis=2) < 200).sum() > 0.003 * img.shape[0] * img.shape[1], "the page looks blank"
        tone = d.job(job["id"])["result"]["tone"]  # a qualified pass (generated samples: not validated) is amber
        rgb = {"pass": (0x1A, 0x7F, 0x37), "warn": (0xB7, 0x79, 0x1F)}[tone]
        painted = (np.abs(img - np.array(rgb)) <= 40).all(axis=2).sum()
        assert painted > 20, f"no {tone} 'done' state or bar painted"

        browser.goto(f"{d.url}/ui")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and job["id"] not in (browser.eval("document.body.textContent") or ""):
            time.sleep(0.1)
        assert job["id"] in browser.eval("document.getElementById('jobs').textContent")
        assert not browser.problems(), browser.problems()
    finally:
        browser.close()


def test_signed_in_page_cancels_with_its_csrf_token(chromium: str, tmp_path_factory: pytest.TempPathFactory,
                                                     tmp_path: Path) -> None:
    """A daemon with a token: the browser signs in through the form (a same-origin POST), opens a running
    job's page and cancels it with the button (a DELETE that carries the page's X-CSRF-Token)."""
    root = tmp_path_factory.mktemp("svc-browser-token")
    token = "browser-token-123"
    d = Daemon(root / "state", "--allow-root", str(root), "--token", token).start()
    auth = {"authorization": f"Bearer {token}"}
    browser = Browser(chromium, tmp_path / "profile")
    try:
        model, settings = slow_model(root / "slow.onnx", blocks=24, iterations=16000)
        job = httpx.post(f"{d.url}/jobs", json={"model": str(model), "settings": settings}, headers=auth,
                         timeout=30).json()
        browser.goto(f"{d.url}/ui/jobs/{job['id']}")  # not signed in: the sign-in form
        _until(browser, "document.querySelector('input[name=token]') !== null")
        browser.eval(f"document.querySelector('input[name=token]').value = {token!r}; document.forms[0].submit()")
        _until(browser, "location.pathname === '/ui' && document.getElementById('jobs') !== null")
        browser.goto(f"{d.url}/ui/jobs/{job['id']}")
        _until(browser, "document.body && document.body.dataset.state === 'running'")
        browser.eval("document.getElementById('cancel').click()")
        _until(browser, "document.body.dataset.state === 'cancelled'", timeout=60)
        final = httpx.get(f"{d.url}/jobs/{job['id']}", headers=auth).json()
        assert final["state"] == "cancelled" and final["cancel_requested"], final
        assert not browser.problems(), browser.problems()
    finally:
        browser.close()
        d.stop()


# a finished job's page has rendered its summary (or found it has none) and listed its files
_SETTLED = "document.body.dataset.summary !== undefined && document.body.dataset.artifacts !== undefined"


def _until(browser: Browser, expression: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if browser.eval(expression):
            return
        time.sleep(0.1)
    raise AssertionError(f"not true within {timeout} s: {expression} (page: {browser.eval('location.href')})")


_VISIBLE_EMPTY = """(function(){
 var out=[];
 document.querySelectorAll('h2').forEach(function(h){if(h.offsetParent===null)return;
  var rest=h.parentElement.textContent.length-h.textContent.length;if(rest<=0)out.push('heading '+h.textContent);});
 document.querySelectorAll('main p, main dd, main td, main li, .badge').forEach(function(e){
  if(e.offsetParent!==null&&!e.textContent.trim()&&!e.querySelector('a,button'))out.push(e.tagName+'#'+e.id);});
 return out;})()"""


def _terminal_page(browser: Browser, url: str) -> None:
    browser.goto(url)
    _until(browser, "['done','failed','cancelled'].indexOf(document.body.dataset.state) >= 0 && " + _SETTLED)


def test_finished_failed_and_cancelled_pages_say_what_the_report_says(chromium: str, daemon, tmp_path: Path) -> None:
    """A finished job's page: the report's verdict, sentence and submit command (not the daemon's paths), files
    with human sizes; a failed one: its message, no empty heading; a cancelled one: the phase it stopped in."""
    from service_helpers import planted_job_files

    from precision_doctor.render.verdict import headline_text, verdict
    from precision_doctor.results.report import Report

    d, root = daemon
    model, samples, settings = planted_job_files(root / "pages")
    files = [("model", (model.name, model.read_bytes()))] + [("inputs", (f.name, f.read_bytes())) for f in samples]
    done = httpx.post(f"{d.url}/jobs", files=files, data={"settings": json.dumps(settings)}, timeout=30).json()["id"]
    wrong = root / "pages" / "wrong_rank.npz"  # a name the model has (else refused at submission), a rank it has not
    np.savez(wrong, x=np.zeros((2, 3, 5, 7), np.float32))
    failed = httpx.post(f"{d.url}/jobs", json={"model": str(model), "settings": {"inputs": {"files": [str(wrong)]}}},
                        timeout=30).json()["id"]
    slow, slow_settings = slow_model(root / "pages" / "slow.onnx", blocks=24, iterations=16000)
    cancelled = httpx.post(f"{d.url}/jobs", json={"model": str(slow), "settings": slow_settings}, timeout=30).json()["id"]
    d.wait_for(cancelled, lambda j: (j["progress"].get("evaluations") or 0) >= 2, what="two evaluations")
    httpx.delete(f"{d.url}/jobs/{cancelled}", timeout=10)
    warned = httpx.post(f"{d.url}/jobs", json={"model": str(model), "settings": {  # polygraphy's default tolerance
        "inputs": {"files": [str(f) for f in samples]}, "search": {"max_evaluations": 1}}}, timeout=30).json()["id"]
    for job_id in (done, failed, cancelled, warned):
        d.wait_for(job_id, lambda j: j["state"] in ("done", "failed", "cancelled"), timeout=180, what="its end")

    browser = Browser(chromium, tmp_path / "profile")
    try:
        _terminal_page(browser, f"{d.url}/ui/jobs/{done}")
        report = Report.load(d.state_dir / "jobs" / done / "run")
        label, tone = verdict(report)
        assert browser.eval("document.getElementById('verdict-label').textContent") == label
        assert browser.eval("document.getElementById('verdict-label').className") == f"badge {tone}"
        assert browser.eval("document.querySelector('#verdict .sentence').textContent") == headline_text(report)
        html = (d.state_dir / "jobs" / done / "run" / "report.html").read_text()
        assert f'id="verdict">{label}</span>' in html  # the report's badge: the same words
        sizes = browser.eval("Array.from(document.querySelectorAll('#artifacts td.n')).map(function(t){"
                             "return t.textContent;})")
        assert sizes and all(re.fullmatch(r"\d+(\.\d+)? (B|KiB|MiB)", t) for t in sizes), sizes
        assert browser.eval("document.getElementById('warnings-box').hidden")  # its tolerance is above the rounding
        steps = browser.eval("document.getElementById('steps').textContent")
        assert "precision-doctor submit three_defects.onnx --inputs three_defects_0.npz" in steps, steps
        assert str(d.state_dir) not in steps and f"--server {d.url}" in steps
        assert browser.eval(_VISIBLE_EMPTY) == []

        _terminal_page(browser, f"{d.url}/ui/jobs/{failed}")
        assert browser.eval("document.getElementById('state').textContent") == "failed"
        message = browser.eval("document.getElementById('message').textContent")
        assert message == d.job(failed)["error"] and "x" in message
        assert browser.eval("document.getElementById('summary').hidden && document.getElementById('files').hidden")
        assert browser.eval(_VISIBLE_EMPTY) == []

        _terminal_page(browser, f"{d.url}/ui/jobs/{cancelled}")
        assert browser.eval("document.getElementById('state').textContent") == "cancelled"
        assert browser.eval("document.getElementById('phase-text').textContent") == (
            "Cancelled during the search; the result below is what it had found by then.")
        cut = Report.load(d.state_dir / "jobs" / cancelled / "run")  # its partial report: what the search found
        _until(browser, "document.getElementById('verdict-label') !== null")
        assert browser.eval("document.getElementById('verdict-label').textContent") == verdict(cut)[0]
        assert browser.eval(_VISIBLE_EMPTY) == []

        _terminal_page(browser, f"{d.url}/ui/jobs/{warned}")  # the warning its run gave before the search
        _until(browser, "!document.getElementById('warnings-box').hidden")
        shown = browser.eval("Array.from(document.querySelectorAll('#warnings li')).map(function(l){"
                             "return l.textContent;})")
        assert shown == d.job(warned)["progress"]["warnings"] and "tighter than FP16" in shown[0], shown
        assert not browser.problems(), browser.problems()
    finally:
        browser.close()
