"""report.json's TensorRT parts without a TensorRT library: `trt_check` (ran, or why not; mismatches listed),
`engine` (built, or why not), `forced_fp32_nodes` and the artifacts named in words: written, read back, rendered,
and a mismatch shown as a loud warning in report.md, report.html and the CLI line."""

from __future__ import annotations

import json

import pytest
from report_parts import report_of

from precision_doctor.render.files import ARTIFACT_TITLES
from precision_doctor.render.html import render_html
from precision_doctor.render.markdown import render_markdown
from precision_doctor.render.tensorrt import outcome_lines, trt_check_sentence
from precision_doctor.results.report import EngineResult, ModelInfo, Report, ReportError, TrtCheckResult, TrtLayerMismatch

MISMATCH = TrtLayerMismatch("sum", "sum", "REDUCE", "fallback", "FLOAT", ["HALF"])


def _report(check: TrtCheckResult, engine: EngineResult | None = None) -> Report:
    return report_of(
        status="complete", precision="fp16", backend="emulate", fallback_nodes=["sum"], fallback_size=1,
        model=ModelInfo(path="m.onnx", renamed_nodes=["Add_1"]), check=check, engine=engine,
        forced_fp32_nodes={"range": "Range: no FP16/BF16 kernel in ONNX Runtime"},
        artifacts={"fixed_onnx": "fixed.onnx", "named_onnx": "named.onnx", "tensorrt_rtx": "tensorrt_rtx.sh",
                   "engine": "fixed.plan"},
        commands={"trtexec_trt11": "trtexec --onnx=fixed.onnx --noTF32 --saveEngine=fixed.plan"},
    )


def _round_trip(rep: Report) -> Report:
    return Report.from_json(json.loads(json.dumps(rep.to_json())))


def test_a_clean_check_and_a_built_engine_round_trip():
    check = TrtCheckResult(ran=True, library="TensorRT-RTX", version="1.7.1.116", onnx="fixed.onnx", layers=29,
                           checked_layers=11, checked_nodes=11, unmapped=["shape_of"])
    engine = EngineResult(built=True, plan="fixed.plan", library="TensorRT-RTX", version="1.7.1.116", targets=["8.6"],
                          seconds=0.1, size_bytes=1000, cache="runtime.cache", input_shapes={"x": [1, 3]})
    rep = _round_trip(_report(check, engine))
    assert rep.tensorrt.check == check and rep.tensorrt.engine == engine and rep.tensorrt.check.passed is True
    assert rep.answer.forced_fp32_nodes == {"range": "Range: no FP16/BF16 kernel in ONNX Runtime"}
    data = rep.to_json()
    assert data["tensorrt"]["check"]["passed"] is True and data["tensorrt"]["check"]["mismatches"] == []
    assert "reason" not in data["tensorrt"]["engine"] and data["tensorrt"]["engine"]["built"]
    md = render_markdown(rep)
    assert "every one of the 11 checked layers (11 nodes) computes in the precision the answer gives it" in md
    assert "1 candidate becomes no layer of their own" in md
    assert "Fixed engine: fixed.plan built with TensorRT-RTX 1.7.1.116 for compute capability 8.6" in md
    assert "## Nodes fixed.onnx keeps in FP32 beyond the answer (1)" in md and "| `range` | Range: no FP16" in md
    assert "Every command reads named.onnx" in md
    for key in rep.answer.artifacts:  # every artifact is described in words
        assert f"- `{rep.answer.artifacts[key]}`: {ARTIFACT_TITLES[key]}" in md
    assert outcome_lines(rep)[0] == ("TensorRT check of fixed.onnx (TensorRT-RTX 1.7.1.116 parser): 29 layers, 11 checked "
                                     "over 11 nodes, 0 mismatches", False)


def test_a_mismatch_is_a_loud_warning():
    check = TrtCheckResult(ran=True, library="TensorRT-RTX", version="1.7.1.116", onnx="fixed.onnx", layers=29,
                           checked_layers=11, checked_nodes=11, mismatches=[MISMATCH])
    rep = _round_trip(_report(check))
    assert rep.tensorrt.check.passed is False and rep.tensorrt.check.mismatches == [MISMATCH]
    sentence = trt_check_sentence(rep)
    assert sentence.startswith("WARNING: TensorRT check of fixed.onnx")
    assert "the engine would not run what this report says" in sentence
    assert MISMATCH.describe() in sentence
    assert f"- **{sentence}**" in render_markdown(rep)
    assert "| `sum` | fallback | `sum` | REDUCE | FLOAT | HALF |" in render_markdown(rep)
    html = render_html(rep)
    assert 'class="reason" id="trt-check-line">WARNING' in html and '<section id="trt-check">' in html
    (line, loud), = outcome_lines(rep)
    assert loud and line.startswith("WARNING: ") and "1 of 11 checked layers disagree" in line


def test_not_run_and_not_built_say_why():
    rep = _round_trip(_report(TrtCheckResult(ran=False, reason="no TensorRT library is installed (x)"),
                              EngineResult(built=False, reason="the builder said no")))
    assert rep.to_json()["tensorrt"]["check"] == {"ran": False, "reason": "no TensorRT library is installed (x)"}
    assert rep.to_json()["tensorrt"]["engine"] == {"built": False, "reason": "the builder said no"}
    assert rep.tensorrt.check.passed is None
    assert [t for t, _ in outcome_lines(rep)] == ["TensorRT check: not run: no TensorRT library is installed (x)",
                                                  "engine: not built: the builder said no"]


def test_a_bad_trt_check_key_is_named():
    bad = _report(TrtCheckResult(ran=False, reason="x")).to_json()
    bad["tensorrt"]["check"] = {"ran": True, "mismatches": [{"node": 3}]}
    with pytest.raises(ReportError, match=r"tensorrt\.check\.mismatches\[0\]\.node"):
        Report.from_json(bad)
