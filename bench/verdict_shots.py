"""Screenshots of the verdict of real runs, one per status, for the docs (docs/img/verdicts/*.png).

    .venv/bin/python bench/verdict_shots.py [--out docs/img/verdicts] [--cases passed,incomplete]
                                                                    (or: make screenshots)

For each case below it diagnoses a planted model (precision_doctor/planted.py, or the shipped examples) with inputs
and settings under which that status occurs, in a temporary directory, and checks the run printed the expected label
(nothing is edited by hand: a case whose label changes fails here). Then it captures, in headless Chromium:

- `NAME-cli.png`: what the CLI prints on stdout (its colours kept: rich writes ANSI codes under FORCE_COLOR, they are
  rendered to HTML by rich and that page is captured; the progress lines of stderr are left out);
- `NAME-report.png`: report.html's header (the badge, the headline, the key figures);
- `NAME-job.png`: the service's job page of the same run submitted to a real `precision-doctor serve`, down to the
  first next step.

It checks each page's badge: the label, and the tone (green `pass` only for a plain PASSED, amber `warn` for a
qualified pass, red `fail` otherwise). Each PNG is reduced to 256 colours and refused above MAX_BYTES.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from cdp_pipe import Browser  # noqa: E402
from chromium_helpers import CHROMIUM  # noqa: E402
from screenshots import _small, submit  # noqa: E402
from service_helpers import CLI, Daemon  # noqa: E402

from precision_doctor import planted  # noqa: E402

MAX_BYTES = 150 << 10
WIDTH = 1280  # the browser's viewport (as bench/screenshots.py)
TERMINAL_COLUMNS = 110
TOLERANCE = ["--atol", "1e-2", "--rtol", "1e-2"]


@dataclass(frozen=True)
class Case:
    """One run: its model and samples (files made in the work directory), its flags, the label it must get and the
    tone of its badge."""

    name: str
    label: str
    tone: str
    model: str  # a file of the work directory (made by `materials`)
    inputs: str  # a directory of the work directory
    flags: tuple[str, ...] = ()
    validate: str | None = None  # a directory of --validate-inputs samples
    settings: tuple[tuple[str, object], ...] = ()  # the same flags as the service's settings (section, key, value)
    about: str = ""


CASES = [
    Case("passed", "PASSED", "pass", "cancellation.onnx", "cancellation_inputs",
         about="25 samples (6 held out, all pass), an answer of 2 small nodes"),
    Case("little-benefit", "PASSED, LITTLE FP16 BENEFIT", "warn", "overflow_island.onnx", "overflow_island_inputs",
         about="25 samples (6 held out, all pass), but 92% of the FLOPs stay in FP32"),
    Case("not-validated", "PASSED, NOT VALIDATED", "warn", "cancellation.onnx", "three_samples",
         about="3 samples: too few to hold any out"),
    Case("repaired", "PASSED, NOT VALIDATED, LITTLE FP16 BENEFIT", "warn", "three_defects.onnx", "three_defects_inputs",
         about="the demo: a held-out sample failed the first answer, the repair used them"),
    Case("incomplete", "INCOMPLETE (budget exhausted)", "fail", "three_defects.onnx", "three_defects_inputs",
         flags=("--max-evaluations", "5"), validate="validation_samples",
         settings=(("search", "max_evaluations", 5),),
         about="40 --validate-inputs samples fail the set so far of a search stopped after 5 evaluations"),
]


def materials(work: Path) -> None:
    """The models and samples of CASES in `work`: the shipped examples (25 samples each), a planted cancellation with
    25 samples and with 3, and 40 more samples of three_defects (another seed) to validate on."""
    subprocess.run([sys.executable, str(ROOT / "examples" / "make_examples.py")], check=True)
    for name in ("three_defects", "overflow_island"):
        shutil.copy(ROOT / "examples" / f"{name}.onnx", work)
        shutil.copytree(ROOT / "examples" / f"{name}_inputs", work / f"{name}_inputs")
    case = planted.CASES["cancellation"]()
    onnx.save(case.model, str(work / "cancellation.onnx"))
    _samples(work / "cancellation_inputs", case.samples(25, seed=0))
    _samples(work / "three_samples", case.samples(3, seed=0))
    _samples(work / "validation_samples", planted.CASES["three_defects"]().samples(40, seed=1))


def _samples(folder: Path, samples: list[dict]) -> None:
    folder.mkdir()
    for i, s in enumerate(samples):
        np.savez(folder / f"sample{i}.npz", **s)


def command(case: Case) -> list[str]:
    """The diagnose command of `case`, as a user types it in the work directory."""
    validate = ["--validate-inputs", case.validate] if case.validate else []
    return ["precision-doctor", "diagnose", case.model, "--inputs", case.inputs, *validate, *TOLERANCE, *case.flags,
            "--out", case.name]


def diagnose(case: Case, work: Path) -> str:
    """Run `case` in `work` with the CLI's colours on; its stdout (ANSI), checked to carry the expected label."""
    env = {**os.environ, "FORCE_COLOR": "1", "TERM": "xterm-256color"}
    r = subprocess.run([*CLI, *command(case)[1:]], cwd=work, env=env, capture_output=True, text=True)
    want = 0 if case.tone != "fail" else 1
    if r.returncode != want or f"{case.label}\x1b[0m: " not in r.stdout:
        raise RuntimeError(f"{case.name}: exit {r.returncode} (expected {want}), not labelled {case.label!r}:\n"
                           f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


_TERMINAL = """<!DOCTYPE html><html><head><meta charset="utf-8"><style>
body{{margin:0;background:#fff}}
main{{display:inline-block;margin:0;padding:14px 18px;background:{background};color:{foreground};border-radius:6px}}
pre{{margin:0;font:13px/1.45 "DejaVu Sans Mono",monospace;white-space:pre}}
{stylesheet}</style></head><body><main><pre>{code}</pre></main></body></html>"""


def terminal_html(case: Case, stdout: str, path: Path) -> Path:
    """The prompt, the command and its coloured stdout as a dark terminal page (rich's HTML export), wrapped at
    TERMINAL_COLUMNS as a terminal that wide would."""
    from rich.console import Console
    from rich.terminal_theme import MONOKAI
    from rich.text import Text

    con = Console(record=True, width=TERMINAL_COLUMNS, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    con.print(Text.assemble(("$ ", "bold green"), (shlex.join(command(case)), "bold")))
    con.print(Text.from_ansi(stdout.rstrip("\n")))
    path.write_text(con.export_html(theme=MONOKAI, code_format=_TERMINAL, inline_styles=False))
    return path


def capture(browser: Browser, url: str, path: Path, ready: str, box: str, bottom: tuple[str, ...],
            timeout: float = 120.0) -> Path:
    """Open `url`, wait for the script `ready`, and capture from the top of the element `box` to the bottom of the
    first element of `bottom` the page has (CSS selectors), as wide as `box`."""
    browser.goto(url)
    deadline = time.monotonic() + timeout
    while not browser.eval(ready):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url}: not ready within {timeout:.0f} s ({ready})")
        time.sleep(0.2)
    time.sleep(0.4)  # the last paint
    last = "||".join(f"document.querySelector({s!r})" for s in bottom)
    rect = browser.eval(f"(function(){{var b=document.querySelector({box!r}).getBoundingClientRect(),"
                        f"e=({last}).getBoundingClientRect();"
                        "return [b.left, b.top + window.scrollY, b.width, e.bottom + window.scrollY];})()")
    x, y, w, end = (float(v) for v in rect)
    x, y = max(0.0, x - 12), max(0.0, y - 12)
    w, h = w + 24, end - y + 12
    # the page keeps its width (a narrower one would lay it out again), and is made tall enough for the clip
    browser.call("Emulation.setDeviceMetricsOverride", session=True, width=WIDTH, height=int(y + h) + 1,
                 deviceScaleFactor=1, mobile=False)
    time.sleep(0.3)
    data = browser.call("Page.captureScreenshot", session=True, format="png",
                        clip={"x": x, "y": y, "width": w, "height": h, "scale": 1})["data"]
    browser.call("Emulation.clearDeviceMetricsOverride", session=True)
    path.write_bytes(base64.b64decode(data))
    return _small(path, MAX_BYTES)


def badge(browser: Browser, selector: str) -> tuple[str, str]:
    """The text and the tone class of the badge at `selector` on the page open."""
    text, cls = browser.eval(f"(function(){{var b=document.querySelector({selector!r});return [b.textContent, b.className];}})()")
    return text, next((c for c in cls.split() if c in ("pass", "warn", "fail")), cls)


def check_badge(browser: Browser, selector: str, case: Case, where: str) -> None:
    got = badge(browser, selector)
    if got != (case.label, case.tone):
        raise RuntimeError(f"{case.name}: {where} shows {got}, expected {(case.label, case.tone)}")


def job_name(case: Case, inputs: list[Path], validate: list[Path]) -> str:
    """"three_defects (25 samples, 40 to validate, --max-evaluations 5)"."""
    bits = [f"{len(inputs)} samples"] + ([f"{len(validate)} to validate"] if validate else []) + [" ".join(case.flags)]
    return f"{Path(case.model).stem} ({', '.join(b for b in bits if b)})"


def job_settings(case: Case) -> dict:
    settings: dict = {"tolerance": {"atol": 1e-2, "rtol": 1e-2}}
    for section, key, value in case.settings:
        settings.setdefault(section, {})[key] = value
    return settings


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "verdicts",
                   help="Where the PNGs go (default: docs/img/verdicts).")
    p.add_argument("--cases", default=",".join(c.name for c in CASES), help="Comma-separated case names (default: all).")
    a = p.parse_args(argv)
    if not CHROMIUM:
        print("no chromium binary: install the `chromium` package", file=sys.stderr)
        return 2
    cases = [c for c in CASES if c.name in a.cases.split(",")]
    if len(cases) != len(set(a.cases.split(","))):
        print(f"--cases: unknown case in {a.cases!r}; cases: {', '.join(c.name for c in CASES)}", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="pd-verdicts-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        materials(work)
        daemon = Daemon(Path(tmp) / "state").start()
        browser = Browser(CHROMIUM, Path(tmp) / "profile", width=WIDTH, height=900)
        try:
            jobs = {}
            for case in cases:
                inputs = sorted((work / case.inputs).glob("*.npz"))
                validate = sorted((work / case.validate).glob("*.npz")) if case.validate else []
                jobs[case.name] = submit(daemon, work / case.model, inputs, job_name(case, inputs, validate),
                                         job_settings(case), validate)
            for case in cases:
                stdout = diagnose(case, work)
                page = terminal_html(case, stdout, Path(tmp) / f"{case.name}-cli.html")
                made.append(capture(browser, page.as_uri(), a.out / f"{case.name}-cli.png", "true", "main", ("main",)))
                made.append(capture(browser, (work / case.name / "report.html").as_uri(), a.out / f"{case.name}-report.png",
                                    "document.body.dataset.ready === '1'", "main", ("header",)))
                check_badge(browser, "#verdict", case, "report.html")
                daemon.wait_for(jobs[case.name], lambda j: j["state"] in ("done", "failed", "cancelled"), timeout=600,
                                what=f"the {case.name} job's end")
                made.append(capture(browser, f"{daemon.url}/ui/jobs/{jobs[case.name]}", a.out / f"{case.name}-job.png",
                                    "document.body.dataset.summary !== undefined", "main",
                                    ("#next:not([hidden]) #steps > li:first-child", "#summary")))
                check_badge(browser, "#verdict-label", case, "the job page")
        finally:
            browser.close()
            daemon.stop()
    for path in made:
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {path.stat().st_size >> 10} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
