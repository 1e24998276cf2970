"""The daemon's pages in headless Chromium (over the DevTools protocol): a job's page follows a running
job live (its evaluation count rises while it runs, then the report link appears), paints, and logs
no console errors; the job list shows the job.

Skipped without a `chromium` binary."""

from __future__ import annotations

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
        deadline, seen = time.monotonic() + 120, ""
        while time.monotonic() < deadline:
            state = browser.eval("document.body && document.body.dataset.state") or ""
            seen = browser.eval("document.body && document.body.dataset.seen") or ""
            if state in ("done", "failed", "cancelled"):
                break
            time.sleep(0.1)
        assert state == "done", (state, seen, d.job(job["id"]))
        counts = [int(x) for x in seen.split(",") if x]
        final = d.job(job["id"])["result"]["evaluations"]
        # the page saw the count rise while the job ran (not only the final number), and ended at the job's count
        assert len(counts) >= 3 and counts == sorted(counts) and counts[-1] == final, (counts, final)
        time.sleep(0.5)  # the artifact list loads once the job is done
        assert browser.eval("document.getElementById('report').hidden") is False
        assert "report.html" in (browser.eval("document.getElementById('artifacts').textContent") or "")
        shot = browser.screenshot(tmp_path / "job.png")
        img = np.asarray(Image.open(shot).convert("RGB")).astype(np.int16)
        assert (img.min(axis=2) < 200).sum() > 0.003 * img.shape[0] * img.shape[1], "the page looks blank"
        green = (np.abs(img - np.array([0x1A, 0x7F, 0x37])) <= 40).all(axis=2).sum()
        assert green > 20, "no green 'done' state or bar painted"

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
        model, settings = slow_model(root / "slow.onnx", blocks=24, iterations=4000)
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


def _until(browser: Browser, expression: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if browser.eval(expression):
            return
        time.sleep(0.1)
    raise AssertionError(f"not true within {timeout} s: {expression} (page: {browser.eval('location.href')})")
