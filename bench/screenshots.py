"""Screenshots of the report and the service's pages in headless Chromium, for the docs (docs/img/*.png).

    .venv/bin/python bench/screenshots.py [--out docs/img]      (or: make screenshots)

What it does: diagnoses the demo (examples/three_defects.onnx and its six samples, as `make demo`) into a
temporary directory; starts `precision-doctor serve` on a free loopback port with a temporary state directory;
submits four jobs (the demo; the demo with a budget of one evaluation; the demo with a sample file that does
not fit the model, which fails; a slow model, caught while it searches); and captures, 1280 px wide,
report.html (its top), /ui, the finished demo job's page and the running job's page. Each PNG is reduced to
256 colours (flat page colours) so that it stays well under 300 KB. Needs a `chromium` binary; the pages are
driven over the DevTools protocol (tests/cdp_pipe.py).
"""

from __future__ import annotations

import argparse
import base64
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from cdp_pipe import Browser  # noqa: E402
from chromium_helpers import CHROMIUM  # noqa: E402
from service_helpers import CLI, Daemon, slow_model  # noqa: E402

WIDTH = 1280
MAX_BYTES = 300 << 10


def shot(browser: Browser, url: str, path: Path, ready: str, height: int | None = None, timeout: float = 60.0) -> Path:
    """Open `url`, wait until the script `ready` is true, capture the page (its top `height` px, else all of it)."""
    browser.goto(url)
    deadline = time.monotonic() + timeout
    while not browser.eval(ready):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url}: not ready within {timeout:.0f} s ({ready})")
        time.sleep(0.2)
    time.sleep(0.4)  # the last paint
    full = int(browser.eval("Math.ceil(document.querySelector('main').getBoundingClientRect().bottom + 8)"))
    h = min(full, height) if height else full
    browser.call("Emulation.setDeviceMetricsOverride", session=True, width=WIDTH, height=h, deviceScaleFactor=1,
                 mobile=False)
    time.sleep(0.3)
    data = browser.call("Page.captureScreenshot", session=True, format="png",
                        clip={"x": 0, "y": 0, "width": WIDTH, "height": h, "scale": 1})["data"]
    browser.call("Emulation.clearDeviceMetricsOverride", session=True)
    path.write_bytes(base64.b64decode(data))
    return _small(path)


def _small(path: Path, max_bytes: int = MAX_BYTES) -> Path:
    """The PNG reduced to 256 colours (pages are flat colours and text); refused above `max_bytes`."""
    from PIL import Image

    Image.open(path).convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    size = path.stat().st_size
    if size > max_bytes:
        raise RuntimeError(f"{path}: {size >> 10} KiB, more than {max_bytes >> 10} KiB")
    return path


def demo_files() -> tuple[Path, list[Path]]:
    subprocess.run([sys.executable, str(ROOT / "examples" / "make_examples.py")], check=True)
    model = ROOT / "examples" / "three_defects.onnx"
    return model, sorted((ROOT / "examples" / "three_defects_inputs").glob("*.npz"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="Where the PNGs go (default: docs/img).")
    a = p.parse_args(argv)
    if not CHROMIUM:
        print("no chromium binary: install the `chromium` package", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    model, samples = demo_files()
    inputs = [arg for s in samples for arg in ("--inputs", str(s))]
    with tempfile.TemporaryDirectory(prefix="pd-shots-") as tmp:
        work = Path(tmp)
        run = work / "demo"
        subprocess.run([*CLI, "diagnose", str(model), *inputs, "--precision", "fp16", "--atol", "1e-2", "--rtol", "1e-2",
                        "--out", str(run)], check=True, stdout=subprocess.DEVNULL)
        daemon = Daemon(work / "state").start()
        browser = Browser(CHROMIUM, work / "profile", width=WIDTH, height=900)
        try:
            done = submit(daemon, model, samples, "three_defects", {"tolerance": {"atol": 1e-2, "rtol": 1e-2}})
            daemon.wait_for(done, lambda j: j["state"] == "done", timeout=300, what="the demo job's end")
            short = submit(daemon, model, samples, "three_defects (1 evaluation)",
                           {"tolerance": {"atol": 1e-2, "rtol": 1e-2}, "search": {"max_evaluations": 1}})
            wrong = work / "wrong_input_name.npz"
            np.savez(wrong, image=np.zeros((1, 16), np.float32))
            failed = submit(daemon, model, [wrong], "three_defects (wrong sample)", {})
            for job in (short, failed):
                daemon.wait_for(job, lambda j: j["state"] in ("done", "failed"), timeout=300, what="the job's end")
            slow_path, settings = slow_model(work / "slow.onnx", blocks=24, iterations=4000)
            slow = submit(daemon, slow_path, [], "slow (searching)", settings)
            daemon.wait_for(slow, lambda j: j["progress"].get("phase") == "search"
                            and j["progress"].get("evaluations", 0) >= 3, timeout=300, what="the slow job's search")
            made = [
                shot(browser, f"{daemon.url}/ui/jobs/{slow}", a.out / "service-job-running.png",
                     "document.body.dataset.state === 'running' && (document.body.dataset.seen || '').length > 0"),
                shot(browser, f"{daemon.url}/ui", a.out / "service-jobs.png",
                     "document.getElementById('jobs').children.length >= 4"),
                shot(browser, f"{daemon.url}/ui/jobs/{done}", a.out / "service-job.png",
                     "document.body.dataset.state === 'done' && document.body.dataset.artifacts !== undefined"),
                shot(browser, (run / "report.html").as_uri(), a.out / "report.png", "document.body.dataset.ready === '1'",
                     height=1500),
            ]
            httpx.delete(f"{daemon.url}/jobs/{slow}", timeout=10)
        finally:
            browser.close()
            daemon.stop()
    for path in made:
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {path.stat().st_size >> 10} KiB")
    return 0


def submit(daemon: Daemon, model: Path, samples: list[Path], name: str, settings: dict, validate: list[Path] = ()) -> str:
    """Upload `model`, `samples` and the held-out samples `validate` as a job; its id."""
    files = [("model", (model.name, model.read_bytes()))] + [("inputs", (s.name, s.read_bytes())) for s in samples] \
        + [("validate_inputs", (s.name, s.read_bytes())) for s in validate]
    r = httpx.post(f"{daemon.url}/jobs", files=files, data={"settings": _json(settings), "name": name}, timeout=30)
    r.raise_for_status()
    return r.json()["id"]


def _json(obj: dict) -> str:
    import json

    return json.dumps(obj)


if __name__ == "__main__":
    sys.exit(main())
