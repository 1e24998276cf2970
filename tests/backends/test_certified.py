"""`--backend auto`, the emulation rules as a setting, and who certified the answer (`certified_by`),
with the nodes the emulator does not model (`emulation_notes`). CPU here; the GPU test skips without one."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_doctor import api
from precision_doctor.backends import registry
from precision_doctor.backends.registry import plan_backends
from precision_doctor.errors import SpecError
from precision_doctor.graph.coverage import emulation_notes
from precision_doctor.graph.formats import BF16, FP16
from precision_doctor.graph.model import from_proto
from precision_doctor.pipeline.spec_check import validate_spec
from precision_doctor.results.report import Report
from precision_doctor.spec import RunSpec


def test_auto_searches_on_the_gpu_and_confirms_on_the_real_graph_where_there_is_a_gpu():
    """On a CUDA machine the gated GPU graph searches and ort-cuda (the real mixed graph) has the last word; a
    named confirm backend takes that place; elsewhere the emulator searches."""
    assert plan_backends("auto", None, gpu=True) == registry.BackendPlan("ort-cuda-gated", "ort-cuda")
    assert plan_backends("auto", "trt", gpu=True) == registry.BackendPlan("ort-cuda-gated", "trt")
    assert plan_backends("auto", "ort-cuda-gated", gpu=True) == registry.BackendPlan("emulate", "ort-cuda-gated")
    plan = plan_backends("auto", None, gpu=False)
    assert (plan.search, plan.confirm) == ("emulate", None) and "no CUDA GPU" in plan.no_gpu
    assert plan_backends("auto", "trt", gpu=False) == registry.BackendPlan("emulate", "trt")
    assert plan_backends("ort-cuda", None) == registry.BackendPlan("ort-cuda", None)
    assert plan_backends("emulate", "ort-cuda") == registry.BackendPlan("emulate", "ort-cuda")


def test_rules_setting_is_checked_and_keyed():
    spec = RunSpec(model="m.onnx")
    assert spec.backends.rules is None and spec.backends.backend == "auto" and spec.backends.target == "tensorrt"
    assert spec.backends.emulation_rules == "tensorrt"  # unset: the target's
    assert spec.with_settings({"backends.target": "ort-cuda"}).backends.emulation_rules == "ort-cuda"
    with pytest.raises(SpecError) as e:
        validate_spec(spec.with_settings({"backends.rules": "cuda-ish"}))
    assert e.value.setting == "backends.rules"
    with pytest.raises(SpecError) as e:
        validate_spec(spec.with_settings({"backends.confirm_backend": "emulate"}))
    assert e.value.setting == "backends.confirm_backend"
    assert spec.with_settings({"backends.rules": "standard"}).key() != spec.key()  # a cached capture is keyed by it
    assert RunSpec.from_json({"model": "m.onnx", "backends": {"rules": "standard"}}).backends.rules == "standard"


@pytest.mark.parametrize("rules", ["ort-cuda", "standard"])
def test_auto_on_a_cpu_machine_says_the_answer_was_not_checked_on_a_gpu(planted_file, tmp_path, monkeypatch, rules):
    monkeypatch.setattr(registry, "cuda_machine", lambda: False)
    case, path, files = planted_file("deep_stack_one_bad", 4)
    spec = RunSpec(model=str(path)).with_settings({
        "inputs.files": [str(f) for f in files], "tolerance.atol": case.atol, "tolerance.rtol": case.rtol,
        "backends.rules": rules, "backends.target": "ort-cuda"})
    report = api.diagnose(spec, tmp_path / "run")
    assert report.passed and set(report.answer.fallback_nodes) == case.expected
    c = report.checks.certified_by
    assert (c.backend, c.how, c.samples, c.gpu, c.rules) == ("emulate", "validation", 4, False, rules)
    assert "no CUDA GPU" in c.not_on_gpu
    data = json.loads((tmp_path / "run" / "report.json").read_text())
    assert data["checks"]["certified_by"]["backend"] == "emulate" and data["search"]["emulation_rules"] == rules
    assert Report.from_json(data).checks.certified_by == c
    md = (tmp_path / "run" / "report.md").read_text()
    assert "not checked on a GPU" in md and f"`{rules}` rules" in md
    settings = json.loads((tmp_path / "run" / "run_settings.json").read_text())
    assert settings["rules"] == rules and settings["backend"] == "auto"
    with pytest.raises(SpecError) as e:  # resuming under other rules: its verdicts would not hold
        api.diagnose(spec.with_settings({"backends.rules": "ort-cuda-nodes"}), tmp_path / "run", resume=True)
    assert e.value.setting == "resume"


def test_auto_with_a_gpu_lets_the_confirm_backend_certify(planted_file, tmp_path, monkeypatch):
    """What `auto` does on a CUDA machine, with ORT's CPU provider standing in for the GPU (plumbing): it
    confirms, but a check-only backend (ort-cpu: its FP16 verdicts are not FP16's) never certifies the
    answer nor removes a node from it; the emulator's validation does."""
    monkeypatch.setattr(registry, "cuda_machine", lambda: True)
    monkeypatch.setattr(registry, "AUTO_CONFIRM", "ort-cpu")
    monkeypatch.setattr(registry, "AUTO_SEARCH_GPU", "emulate")  # the emulator's verdicts: the planted sets
    case, path, files = planted_file("three_defects", 4)
    spec = RunSpec(model=str(path)).with_settings({
        "inputs.files": [str(f) for f in files], "tolerance.atol": case.atol, "tolerance.rtol": case.rtol})
    report = api.diagnose(spec, tmp_path / "run")
    assert report.checks.confirm is not None and report.checks.confirm.backend == "ort-cpu"
    c = report.checks.certified_by
    assert report.checks.confirm.passed and set(report.answer.fallback_nodes) == set(report.checks.confirm.searched_answer)
    assert (c.backend, c.how, c.gpu) == ("emulate", "validation", False) and c.samples == 4


def test_auto_on_a_cuda_machine_runs_the_search_on_the_gated_graph(planted_file, tmp_path, monkeypatch):
    """Plumbing of `auto` on a CUDA machine, with ORT's CPU provider standing in for the GPU: the search runs on
    the gated native graph (one session, a set is a feed), the capture and ranking on the emulator, and the
    confirmation (its counterexample-guided loop included) on the real mixed graph. On the CPU provider both
    compute the FP16 nodes in FP32, so nothing fails here: only the path is checked, not FP16's verdicts."""
    from precision_doctor.backends.ort import OrtBackend
    from precision_doctor.backends.ort_gated import OrtGatedBackend

    monkeypatch.setattr(registry, "cuda_machine", lambda: True)
    real, made = registry._make, []

    def on_cpu(name, model, precision, outputs, rules, target):
        made.append((name, target))
        cpu = ["CPUExecutionProvider"]
        if name == "ort-cuda-gated":
            return OrtGatedBackend(model, precision, providers=cpu, outputs=outputs)
        if name == "ort-cuda":
            return OrtBackend(model, precision, providers=cpu, outputs=outputs)
        return real(name, model, precision, outputs, rules, target)
    monkeypatch.setattr(registry, "_make", on_cpu)
    case, path, files = planted_file("three_defects", 6)
    spec = RunSpec(model=str(path)).with_settings({
        "inputs.files": [str(f) for f in files], "tolerance.atol": case.atol, "tolerance.rtol": case.rtol})
    report = api.diagnose(spec, tmp_path / "run")
    # the search and the confirmation for the target (TensorRT, by default), then the answer on the other runtime
    assert made == [("ort-cuda-gated", "tensorrt"), ("ort-cuda", "tensorrt"), ("ort-cuda", "ort-cuda")]
    other = report.checks.other_runtime
    assert report.search.backend == "ort-cpu-gated" and other.measured and other.passed
    assert report.checks.confirm is not None and report.checks.confirm.backend == "ort-cpu" and report.checks.confirm.passed
    assert [r.search for r in report.search.rounds.rounds] == ["first", "confirm"] and report.search.rounds.verified
    assert report.analysis.layers and report.checks.emulation_notes == []
    # the capture ran (on the emulator); no emulator verdicts


def test_cli_names_the_rules_flag(run_cli, planted_file, tmp_path):
    _, path, files = planted_file("clean", 2)
    code, out, err = run_cli("diagnose", path, "--inputs", files[0], "--emulation-rules", "nope", "--out", tmp_path / "r")
    assert code == 2 and "--emulation-rules" in err and "Traceback" not in err


def _notes_model(opset: int):
    node = helper.make_node
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [4])  # noqa: E731
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0.0), ("hi", 6.0))]
    clip = node("Clip", ["x", "lo", "hi"], ["c"], name="clip") if opset >= 11 else node("Clip", ["x"], ["c"], name="clip")
    nodes = [clip, node("Softplus", ["c"], ["s"], name="softplus"), node("Erf", ["s"], ["e"], name="erf"),
             node("Reshape", ["e", "shape"], ["y"], name="reshape"), node("Relu", ["y"], ["z"], name="relu")]
    inits.append(numpy_helper.from_array(np.array([4], np.int64), "shape"))
    g = helper.make_graph(nodes, "notes", [vi("x")], [vi("z")], inits)
    return from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=7))


def test_emulation_notes_name_what_is_not_modelled():
    """Clip-11 runs on the CPU in ORT CUDA (no FP16 kernel); Softplus was never measured (Erf was, on the H200);
    Reshape and Relu only move values; nodes in FP32 need no note."""
    model = _notes_model(11)
    notes = {(n.kind, n.op_type): n for n in emulation_notes(model, FP16, {n.name for n in model.nodes})}
    assert set(notes) == {("cpu-placement", "Clip"), ("unmeasured-op", "Softplus")}
    assert notes[("cpu-placement", "Clip")].nodes == ["clip"]
    assert {(n.kind, n.op_type) for n in emulation_notes(model, FP16, {"relu", "reshape", "clip"})} == {("cpu-placement", "Clip")}
    assert not [n for n in emulation_notes(_notes_model(13), FP16, {"clip"})]  # Clip-13 has an FP16 CUDA kernel
    assert any(n.kind == "unmeasured-format" for n in emulation_notes(model, BF16, {"relu"}))


def test_notes_name_measured_mismatches_and_unmeasured_fused_pairs():
    """An LSTM (measured on the H200: the GPU errs 1.64x more than any rule) and an Add feeding a decomposed
    LayerNorm (ORT's SkipLayerNormFusion, never measured) leave an emulator's PASS unconfirmed; the LayerNorm alone
    (LayerNormFusion, measured) does not."""
    node = helper.make_node
    f32 = lambda n, v: numpy_helper.from_array(np.asarray(v, np.float32), n)  # noqa: E731
    rng = np.random.default_rng(0)
    ln = [node("ReduceMean", ["a"], ["m"], name="mean", axes=[-1]), node("Sub", ["a", "m"], ["d"], name="sub"),
          node("Pow", ["d", "two"], ["p"], name="pow"), node("ReduceMean", ["p"], ["v"], name="var", axes=[-1]),
          node("Add", ["v", "eps"], ["e"], name="eps_add"), node("Sqrt", ["e"], ["sd"], name="sqrt"),
          node("Div", ["d", "sd"], ["n"], name="div"), node("Mul", ["n", "g"], ["ng"], name="mul"),
          node("Add", ["ng", "b"], ["y"], name="ln_out")]
    nodes = [node("Add", ["x", "r"], ["a"], name="residual"), *ln,
             node("LSTM", ["y", "W", "R"], ["h"], name="lstm", hidden_size=4)]
    inits = [f32("r", rng.standard_normal((5, 1, 8))), f32("two", 2.0), f32("eps", 1e-5), f32("g", np.ones(8)),
             f32("b", np.zeros(8)), f32("W", rng.standard_normal((1, 16, 8))), f32("R", rng.standard_normal((1, 16, 4)))]
    vi = lambda n, shape: helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)  # noqa: E731
    g = helper.make_graph(nodes, "rnn", [vi("x", [5, 1, 8])], [vi("h", [5, 1, 1, 4])], inits)
    model = from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)], ir_version=8))
    everything = {n.name for n in model.nodes}
    notes = {(n.kind, n.op_type): n for n in emulation_notes(model, FP16, everything)}
    assert set(notes) == {("measured-mismatch", "LSTM"), ("unmeasured-pattern", "Add + LayerNormalization")}
    assert notes[("measured-mismatch", "LSTM")].factor == pytest.approx(1.64)
    assert notes[("unmeasured-pattern", "Add + LayerNormalization")].nodes == ["ln_out"]
    assert all(n.unconfirmed for n in notes.values())
    assert not emulation_notes(model, FP16, everything - {"residual", "lstm"})  # the LayerNorm alone: measured


def test_a_folded_convtranspose_batchnorm_is_a_measured_mismatch():
    """GPU session F (H100): ORT folds BatchNormalization into the ConvTranspose before it and the fused kernel errs
    up to 2x the emulator's two nodes: a measured mismatch naming the fusion; the ConvTranspose alone needs no note."""
    node = helper.make_node
    rng = np.random.default_rng(0)
    f32 = lambda n, v: numpy_helper.from_array(np.asarray(v, np.float32), n)  # noqa: E731
    inits = [f32("w", rng.standard_normal((4, 4, 3, 3))), *(f32(k, rng.random(4) + 0.5) for k in ("s", "b", "m", "v"))]
    nodes = [node("ConvTranspose", ["x", "w"], ["c"], name="ct", strides=[2, 2]),
             node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"], name="bn")]
    vi = lambda n, shape: helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)  # noqa: E731
    g = helper.make_graph(nodes, "ctbn", [vi("x", [1, 4, 6, 6])], [vi("y", [1, 4, 13, 13])], inits)
    model = from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)], ir_version=8))
    notes = emulation_notes(model, FP16, {"ct", "bn"})
    assert [(n.kind, n.op_type, n.nodes) for n in notes] == [
        ("measured-mismatch", "ConvTranspose + BatchNormalization", ["bn"])]
    assert notes[0].factor == pytest.approx(2.0) and "ConvBNFusion" in notes[0].detail and notes[0].unconfirmed
    assert not emulation_notes(model, FP16, {"ct"})


def test_a_bias_add_before_an_erf_gelu_is_a_measured_mismatch():
    """GPU session F (H100): MatMul, a bias Add and the Erf form of Gelu ran as Gemm + Gelu, erring up to 1.37x the
    emulator's nodes: a measured mismatch naming the Gelu; without the bias Add (the Gelu alone, modelled) none."""
    node = helper.make_node
    rng = np.random.default_rng(0)
    f32 = lambda n, v: numpy_helper.from_array(np.asarray(v, np.float32), n)  # noqa: E731
    gelu = [node("Div", ["hb", "sqrt2"], ["d"], name="div"), node("Erf", ["d"], ["e"], name="erf"),
            node("Add", ["e", "one"], ["e1"], name="add1"), node("Mul", ["hb", "e1"], ["m"], name="mul"),
            node("Mul", ["m", "half"], ["y"], name="gelu_out")]
    nodes = [node("MatMul", ["x", "w"], ["h"], name="mm"), node("Add", ["h", "bias"], ["hb"], name="bias_add"), *gelu]
    inits = [f32("w", rng.standard_normal((8, 8))), f32("bias", rng.standard_normal(8)), f32("sqrt2", np.sqrt(2)),
             f32("one", 1.0), f32("half", 0.5)]
    vi = lambda n, shape: helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)  # noqa: E731
    g = helper.make_graph(nodes, "bias_gelu", [vi("x", [2, 8])], [vi("y", [2, 8])], inits)
    model = from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)], ir_version=8))
    everything = {n.name for n in model.nodes}
    notes = emulation_notes(model, FP16, everything)
    assert [(n.kind, n.op_type, n.nodes) for n in notes] == [("measured-mismatch", "MatMul + Add + Gelu", ["gelu_out"])]
    assert notes[0].factor == pytest.approx(1.37) and "Gemm + Gelu" in notes[0].detail
    assert not emulation_notes(model, FP16, everything - {"bias_add"})


def test_a_pass_never_rests_on_an_unmeasured_op_without_saying_so(planted_file, tmp_path, monkeypatch):
    """Issue 21: a model whose all-FP16 answer holds a Softplus (never measured on a GPU), certified by the
    emulator on a machine without a GPU: report.json's certified_by.unconfirmed names it, the verdict is PASSED ON
    THE EMULATOR and the headline and report.md say what to confirm; the same model with a Relu there says none
    of it."""
    import onnx

    from precision_doctor.render.verdict import headline
    from precision_doctor.results.verdict import Qualifier

    monkeypatch.setattr(registry, "cuda_machine", lambda: False)
    case, path, files = planted_file("clean", 10)  # 5 held out: enough to validate (results/verdict.USEFUL_BOUND)
    proto = onnx.load(str(path))
    relu = next(n for n in proto.graph.node if n.op_type == "Relu")
    relu.op_type = "Softplus"
    soft = tmp_path / "softplus.onnx"
    onnx.save(proto, str(soft))
    runs = {}
    for label, model in (("relu", path), ("softplus", soft)):
        spec = RunSpec(model=str(model)).with_settings({
            "inputs.files": [str(f) for f in files], "tolerance.atol": case.atol, "tolerance.rtol": case.rtol,
            "inputs.validation_split": 0.5})
        runs[label] = api.diagnose(spec, tmp_path / label)
    soft_report, relu_report = runs["softplus"], runs["relu"]
    assert soft_report.passed and relu.name not in soft_report.answer.fallback_nodes
    data = json.loads((tmp_path / "softplus" / "report.json").read_text())
    assert data["checks"]["certified_by"]["backend"] == "emulate" \
        and data["checks"]["certified_by"]["unconfirmed"] == ["Softplus"]
    assert Qualifier.ON_THE_EMULATOR in soft_report.statement.qualifiers
    text = headline(Report.from_json(data))
    assert text.startswith("PASSED, ON THE EMULATOR (CONFIRM ON A GPU): ")
    assert "1 Softplus node behaves on a GPU in a way never measured" in text and "confirm on the GPU" in text
    md = (tmp_path / "softplus" / "report.md").read_text()
    assert "Softplus" in md and "confirm it there" in md
    assert relu_report.passed and relu_report.checks.certified_by.unconfirmed == []
    assert Qualifier.ON_THE_EMULATOR not in relu_report.statement.qualifiers
    assert "never measured" not in headline(relu_report)


@pytest.mark.gpu
def test_auto_confirms_on_the_gpu(planted_file, tmp_path):
    if not registry.cuda_machine():
        pytest.skip("no CUDA GPU with onnxruntime-gpu here")
    case, path, files = planted_file("three_defects", 4)
    spec = RunSpec(model=str(path)).with_settings({
        "inputs.files": [str(f) for f in files], "tolerance.atol": case.atol, "tolerance.rtol": case.rtol})
    report = api.diagnose(spec, tmp_path / "run")
    c = report.checks.certified_by
    assert report.passed and (c.backend, c.how, c.gpu) == ("ort-cuda", "confirmation", True)


def test_compare_says_what_its_pass_rests_on(run_cli, planted_file, tmp_path):
    """`compare` all low precision on the emulator: a PASS over a never-measured op says so; one over measured
    ops does not."""
    import onnx

    case, path, files = planted_file("clean", 2)
    proto = onnx.load(str(path))
    next(n for n in proto.graph.node if n.op_type == "Relu").op_type = "Softplus"
    soft = tmp_path / "softplus.onnx"
    onnx.save(proto, str(soft))
    tol = ("--atol", case.atol, "--rtol", case.rtol)
    code, out, _ = run_cli("compare", soft, "--inputs", files[0], *tol, "--out", tmp_path / "c1")
    assert code == 0 and "PASS on the emulator (1 Softplus node behaves on a GPU in a way never measured: confirm" \
        in " ".join(out.split())
    code, out, _ = run_cli("compare", path, "--inputs", files[0], *tol, "--out", tmp_path / "c2")
    assert code == 0 and "PASS: all outputs" in out and "never measured" not in out
