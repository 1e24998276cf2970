"""summary.html of a real (small) batch in headless Chromium: it paints, its script runs without
errors, it lists every model, its report links resolve to files that exist, and sorting works.

Skipped when no `chromium` / `chromium-browser` binary is on PATH (Debian: `apt-get install chromium`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import onnx
import pytest
from chromium_helpers import console_problems, run_chromium

from precision_doctor import planted
from precision_doctor.batch.orchestrate import InlineExecutor, run_batch

pytestmark = pytest.mark.browser

CASES = ("overflow_island", "clean")  # passed with 3 and 0 nodes in FP32


@pytest.fixture(scope="module")
def batch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished batch over three planted models (JSON recipes, .npz inputs) and one broken file."""
    root = tmp_path_factory.mktemp("zoo")
    for name in CASES:
        case = planted.CASES[name]()
        onnx.save(case.model, str(root / f"{name}.onnx"))
        files = []
        for i, s in enumerate(case.samples(10, seed=0)):  # 5 held out (split 0.5): a validated PASSED (green) for clean
            np.savez(root / f"{name}_{i}.npz", **s)
            files.append(f"{name}_{i}.npz")
        recipe = {"inputs": {"files": files, "validation_split": 0.5}, "tolerance": {"atol": case.atol, "rtol": case.rtol},
                  "max_evaluations": 40}
        (root / f"{name}.json").write_text(json.dumps(recipe))
    (root / "broken.onnx").write_bytes(b"not an onnx model <script>alert(1)</script>")
    out = tmp_path_factory.mktemp("batch") / "out"
    res = run_batch(root, out, executor=InlineExecutor())
    assert [r.model for r in res.rows] == sorted([*CASES, "broken"])
    return out


def test_summary_paints_without_console_errors(chromium: str, batch_dir: Path, tmp_path: Path) -> None:
    from PIL import Image

    page = batch_dir / "summary.html"
    shot = tmp_path / "summary.png"
    res = run_chromium(chromium, tmp_path, f"--screenshot={shot}", "--window-size=1280,600", page.as_uri())
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    assert not console_problems(res.stderr, page), console_problems(res.stderr, page)
    img = np.asarray(Image.open(shot).convert("RGB")).astype(np.int16)
    assert img.shape == (600, 1280, 3)
    non_white = int((img.min(axis=2) < 200).sum())
    assert non_white > 0.005 * img.shape[0] * img.shape[1], f"page looks blank: {non_white} dark pixels"

    def near(rgb: tuple[int, int, int], tol: int = 40) -> int:
        return int((np.abs(img - np.array(rgb, dtype=np.int16)) <= tol).all(axis=2).sum())

    assert near((0x1A, 0x7F, 0x37)) > 20, "no green 'passed' status painted"
    assert near((0xC6, 0x28, 0x28)) > 5, "no red 'error' status painted"


# Appended to a copy of the page: records what the browser resolved and what a click on a header does.
PROBE = """<script>
(function(){
  var b=document.body, rows=function(){
    return Array.from(document.querySelectorAll('tbody tr')).map(function(r){return r.cells[0].textContent;}).join('|');};
  try {
    b.setAttribute('data-links', Array.from(document.querySelectorAll('a[href]')).map(function(a){return a.href;}).join(' '));
    var th=Array.from(document.querySelectorAll('th')).find(function(t){return t.textContent==='FP32 nodes';});
    th.click(); b.setAttribute('data-asc', rows());
    th.click(); b.setAttribute('data-desc', rows());
    Array.from(document.querySelectorAll('th'))[0].click(); b.setAttribute('data-byname', rows());
  } catch (e) { b.setAttribute('data-probe-error', String(e)); }
})();
</script></body>"""


def test_summary_lists_every_model_links_resolve_and_sorts(chromium: str, batch_dir: Path, tmp_path: Path) -> None:
    page = batch_dir / "summary.html"
    probe = batch_dir / "summary_probe.html"  # beside the real page, so relative links resolve the same way
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE), encoding="utf-8")
    try:
        res = run_chromium(chromium, tmp_path, "--dump-dom", probe.as_uri())
    finally:
        probe.unlink()
    assert res.returncode == 0, res.stderr[-2000:]
    assert not console_problems(res.stderr, probe), console_problems(res.stderr, probe)
    dom = res.stdout
    body = re.search(r"<body[^>]*>", dom)
    assert body, dom[:2000]
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body.group(0)))
    assert "probe-error" not in attrs, attrs.get("probe-error")

    # Every model is a row; the broken one shows its error, not a link (and its name is escaped text).
    tbody = re.search(r"<tbody>(.*?)</tbody>", dom, re.S)
    assert tbody
    rows = re.findall(r"<tr>(.*?)</tr>", tbody.group(1), re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r, re.S) for r in rows]
    by_model = {c[0]: c for c in cells}
    assert set(by_model) == {*CASES, "broken"}
    assert all(by_model[n][1] == "PASSED" for n in CASES) and by_model["broken"][1] == "error"  # the verdict's label
    assert "not a readable ONNX model" in by_model["broken"][-1] and "<a " not in by_model["broken"][7]
    assert "<script>alert" not in dom

    # The links, as the browser resolved them, are file:// URLs of reports that exist, one per good model.
    links = attrs["links"].split()
    paths = [Path(unquote(urlparse(u).path)) for u in links]
    assert all(urlparse(u).scheme == "file" for u in links)
    assert sorted(p.parent.name for p in paths) == sorted(CASES)
    for p in paths:
        assert p.is_file() and p.name == "report.html" and p.parent.parent == batch_dir.resolve(), p

    # Sorting by a numeric column (empty cells first when ascending), then back by name.
    fp32 = {n: int(by_model[n][3]) for n in CASES}
    asc, desc = attrs["asc"].split("|"), attrs["desc"].split("|")
    assert asc[0] == "broken" and sorted(asc[1:]) == sorted(CASES)
    assert [fp32[n] for n in asc[1:]] == sorted(fp32.values())
    assert desc[-1] == "broken" and [fp32[n] for n in desc[:-1]] == sorted(fp32.values(), reverse=True)
    assert attrs["byname"].split("|") == sorted([*CASES, "broken"])
