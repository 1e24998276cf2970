"""report.html in headless Chromium: the page paints its plots, its script runs without errors, sorting works.

Skipped when no `chromium` / `chromium-browser` binary is on PATH (Debian: `apt-get install chromium`).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from chromium_helpers import console_problems, run_chromium
from report_parts import report_of

from precision_doctor.render.html import render_html
from precision_doctor.render.numbers import num
from precision_doctor.results.report import Report

pytestmark = pytest.mark.browser

FIXTURE = Path(__file__).parents[1] / "fixtures" / "report_example.json"


def _report() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def _page(data: dict[str, Any]) -> str:
    return render_html(Report.from_json(data))


@pytest.fixture(scope="module")
def page_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(_page(_report()), encoding="utf-8")
    return path


def dump_dom(binary: str, tmp: Path, page: Path, fragment: str = "") -> str:
    res = run_chromium(binary, tmp, "--dump-dom", page.as_uri() + fragment)
    assert res.returncode == 0, res.stderr[-2000:]
    assert not console_problems(res.stderr, page), console_problems(res.stderr, page)
    dom = res.stdout
    body = re.search(r"<body[^>]*>", dom)
    assert body and 'data-ready="1"' in body.group(0), "page script did not finish"
    errors = re.search(r'<div id="js-errors"([^>]*)>(.*?)</div>', dom, re.S)
    assert errors and "hidden" in errors.group(1) and not errors.group(2).strip(), f"script errors: {errors and errors.group(2)}"
    return dom


def row_order(dom: str) -> list[int]:
    tbody = re.search(r'<tbody id="layer-body">(.*?)</tbody>', dom, re.S)
    assert tbody
    return [int(i) for i in re.findall(r'<tr data-i="(\d+)"', tbody.group(1))]


def test_screenshot_shows_plots(chromium: str, page_file: Path, tmp_path: Path) -> None:
    from PIL import Image

    shot = tmp_path / "shot.png"
    res = run_chromium(chromium, tmp_path, f"--screenshot={shot}", "--window-size=1400,2400", page_file.as_uri())
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    assert not console_problems(res.stderr, page_file)
    img = np.asarray(Image.open(shot).convert("RGB")).astype(np.int16)
    assert img.shape == (2400, 1400, 3)
    non_white = int((img.min(axis=2) < 235).sum())
    assert non_white > 0.08 * img.shape[0] * img.shape[1], f"page looks blank: {non_white} non-white pixels"
    rgb = img.astype(np.int32)
    colours = np.unique((rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2])
    assert len(colours) > 500, f"only {len(colours)} distinct colours: no plots painted?"

    def near(rgb: tuple[int, int, int], tol: int = 12) -> int:
        return int((np.abs(img - np.array(rgb, dtype=np.int16)) <= tol).all(axis=2).sum())

    # the series colours of the plots: before (orange), after (blue), fallback markers/labels (red)
    assert near((0xE6, 0x86, 0x2E)) > 300, "'before' series not drawn"
    assert near((0x2C, 0x7F, 0xB8)) > 300, "'after' series not drawn"
    assert near((0xD7, 0x19, 0x1C)) > 100, "fallback nodes not marked"


def test_script_runs_and_sorts(chromium: str, page_file: Path, tmp_path: Path) -> None:
    layers = _report()["analysis"]["layers"]
    dom = dump_dom(chromium, tmp_path, page_file)
    assert row_order(dom) == list(range(len(layers)))  # topological order without a hash

    dom = dump_dom(chromium, tmp_path, page_file, "#sort=score:desc")
    assert 'data-sorted="score:desc"' in dom
    order = row_order(dom)
    scores = [num(layers[i]["score"]) for i in order]
    assert scores == sorted(scores, reverse=True) and order[0] == max(range(len(layers)), key=lambda i: layers[i]["score"])

    dom = dump_dom(chromium, tmp_path, page_file, "#sort=rank")  # default direction of the column: ascending
    assert [layers[i]["rank"] for i in row_order(dom)][:3] == [1, 2, 3]

    dom = dump_dom(chromium, tmp_path, page_file, "#sort=lowp_rel_l2:desc")  # "inf" sorts as a number, first
    assert layers[row_order(dom)[0]]["lowp_rel_l2"] == "inf"


def test_edge_pages_run_clean(chromium: str, tmp_path: Path) -> None:
    """No layers, no trajectory, no validation; and 1500 layers sorted by name."""
    empty = report_of(status="no_solution", precision="fp16", layers=[], trajectory=[], validation=None)
    p1 = tmp_path / "empty.html"
    p1.write_text(render_html(empty), encoding="utf-8")
    dump_dom(chromium, tmp_path, p1, "#sort=score")

    r = _report()
    base = r["analysis"]["layers"]
    r["analysis"]["layers"] = [dict(copy.deepcopy(base[i % len(base)]), index=i, name=f"/n{1500 - i}", rank=i + 1)
                                for i in range(1500)]
    p2 = tmp_path / "big.html"
    p2.write_text(_page(r), encoding="utf-8")
    dom = dump_dom(chromium, tmp_path, p2, "#sort=name:asc")  # numeric-aware: /n1 < /n2 < /n10
    order = row_order(dom)
    assert len(order) == 1500 and [r["analysis"]["layers"][i]["name"] for i in order[:3]] == ["/n1", "/n2", "/n3"]


HOVER_PROBE = """<script>
(function(){
  function probe(kind, x){
    var fig=document.querySelector('figure.plot[data-kind="'+kind+'"]'), r=fig.querySelector("svg").getBoundingClientRect();
    var d=fig.dataset, fx=+d.x0+(x-(+d.xmin))/(+d.xmax-(+d.xmin))*(+d.w);
    fig.dispatchEvent(new MouseEvent("mousemove",{clientX:r.left+fx*r.width,clientY:r.top+r.height/2,bubbles:true}));
    return fig.querySelector(".tip").textContent;
  }
  document.body.setAttribute("data-tip-layer", probe("layers", 14));
  document.body.setAttribute("data-tip-step", probe("trajectory", 8));
})();
</script></body>"""


def test_plot_hover_maps_to_layer_and_step(chromium: str, tmp_path: Path) -> None:
    """A mouse position over layer 14 / step 8 of the plots shows that layer's / step's tooltip."""
    r = _report()
    page = tmp_path / "hover.html"
    page.write_text(_page(r).replace("</body>", HOVER_PROBE), encoding="utf-8")
    res = run_chromium(chromium, tmp_path, "--window-size=1400,2400", "--dump-dom", page.as_uri())
    assert not console_problems(res.stderr, page), console_problems(res.stderr, page)
    body = re.search(r"<body[^>]*>", res.stdout)
    assert body, res.stderr[-2000:]
    layer_tip = re.search(r'data-tip-layer="([^"]*)"', body.group(0))
    step_tip = re.search(r'data-tip-step="([^"]*)"', body.group(0))
    assert layer_tip and r["analysis"]["layers"][14]["name"] in layer_tip.group(1) and "FP32 fallback" in layer_tip.group(1)
    assert step_tip and step_tip.group(1).startswith("step 8") and "fail" in step_tip.group(1)
