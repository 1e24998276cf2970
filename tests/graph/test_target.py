"""`--target tensorrt|ort-cuda` (issue 35): the emulation rules, the GPU's measurement and the answer follow the runtime
that executes fixed.onnx. A decomposed LayerNorm (opset 14) with residual values in the hundreds overflows in FP16 when
TensorRT computes it node by node; ONNX Runtime fuses it and computes it in FP32. ONNX Runtime's optimizer is checked
on the CPU (its fusions and levels are the same there; FP16 patterns on the CPU get Casts first, so the FP16 checks
use opset 17, whose LayerNormalization fusion runs before them); the GPU paths skip without one."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from precision_doctor import api
from precision_doctor.backends import registry
from precision_doctor.errors import SpecError
from precision_doctor.graph.formats import FP16
from precision_doctor.graph.model import from_proto
from precision_doctor.graph.native import fusion_units, gated_native_graph
from precision_doctor.graph.ort_session import LEVELS
from precision_doctor.graph.rules import resolve_rules
from precision_doctor.graph.targets import RUNTIMES, runtime
from precision_doctor.pipeline.artifacts import TARGET_METADATA
from precision_doctor.pipeline.spec_check import validate_spec
from precision_doctor.planted import LAYERNORM_NODES, layernorm_block
from precision_doctor.results.report import Report
from precision_doctor.spec import RunSpec

LN_NODES = {f"{ln}_{n}" for ln in ("ln1", "ln2") for n in LAYERNORM_NODES}


def _optimized_ops(proto: onnx.ModelProto, level: str, tmp_path: Path) -> Counter:
    """The op types of `proto` after ONNX Runtime's CPU optimizer at `level`, counted in the main graph and in If
    branches (key "if:<op>")."""
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level])
    so.optimized_model_filepath = str(tmp_path / f"opt_{level}.onnx")
    so.log_severity_level = 3
    ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    opt = onnx.load(so.optimized_model_filepath)
    out: Counter = Counter()

    def walk(graph: onnx.GraphProto, prefix: str) -> None:
        for n in graph.node:
            out[prefix + n.op_type] += 1
            for a in n.attribute:
                if a.HasField("g"):
                    walk(a.g, "if:")

    walk(opt.graph, "")
    return out


def _norms(ops: Counter, prefix: str = "") -> int:
    """LayerNorm kernels among optimized ops: LayerNormalization, or SkipLayerNormalization (with the residual Add)."""
    return ops[prefix + "LayerNormalization"] + ops[prefix + "SkipLayerNormalization"]


# -- the rules and the setting ---------------------------------------------------------------------------------------


def test_the_tensorrt_profile_relies_on_no_onnx_runtime_rule_and_says_what_it_rests_on():
    trt, ort_rules = resolve_rules("tensorrt"), resolve_rules("ort-cuda")
    assert trt.rules == () and trt.fusions == () and trt.label == "tensorrt"
    assert "layernorm-fusion" in ort_rules.ort_fusions and ort_rules.label == "ort-cuda"
    assert resolve_rules("standard").label == "standard"
    facts = runtime("tensorrt").facts
    assert {f.basis for f in facts} == {"documented", "modelled", "measured"}
    assert all(f.source for f in facts if f.basis != "modelled")
    assert any("Pow" in f.what and f.basis == "documented" for f in facts)
    assert runtime("tensorrt").ort_level == "disabled" and not runtime("tensorrt").fused_units
    assert runtime("ort-cuda").ort_level == "all" and runtime("ort-cuda").fused_units
    assert set(RUNTIMES) == {"tensorrt", "ort-cuda"}


def test_the_target_is_checked_once_with_the_rules_and_backends_it_allows():
    spec = RunSpec(model="m.onnx")
    b = spec.backends
    assert (b.target, b.rules, b.emulation_rules) == ("tensorrt", None, "tensorrt")
    for changes, setting, words in [
        ({"backends.target": "onnxruntime"}, "backends.target", "unknown target 'onnxruntime'"),
        ({"backends.rules": "ort-cuda"}, "backends.rules", "ONNX Runtime's fusions"),
        ({"backends.rules": "layernorm-fusion"}, "backends.rules", "TensorRT does not make"),
        ({"backends.target": "ort-cuda", "backends.backend": "trt"}, "backends.backend", "measures TensorRT"),
        ({"backends.target": "ort-cuda", "backends.confirm_backend": "trt"}, "backends.confirm_backend", "TensorRT"),
    ]:
        with pytest.raises(SpecError) as e:
            validate_spec(spec.with_settings(changes))
        assert e.value.setting == setting and words in str(e.value), (changes, str(e.value))
    for ok in ({"backends.target": "ort-cuda", "backends.rules": "ort-cuda"}, {"backends.rules": "standard"},
               {"backends.rules": "ort-cuda-nodes"}, {"backends.target": "ort-cuda", "backends.rules": "tensorrt"}):
        validate_spec(spec.with_settings(ok))
    assert spec.with_settings({"backends.target": "ort-cuda"}).key() != spec.key()  # a cached capture is keyed by it
    assert RunSpec.from_json({"model": "m", "backends": {"target": "ort-cuda"}}).backends.emulation_rules == "ort-cuda"


def test_the_cli_names_the_target_flag(run_cli, planted_file, tmp_path):
    _, path, files = planted_file("clean", 2)
    code, _, err = run_cli("diagnose", path, "--inputs", files[0], "--target", "trt11", "--out", tmp_path / "r")
    assert code == 2 and "--target" in err and "tensorrt, ort-cuda" in err and "Traceback" not in err
    code, _, err = run_cli("diagnose", path, "--inputs", files[0], "--emulation-rules", "ort-cuda", "--out", tmp_path / "r")
    assert code == 2 and "--emulation-rules" in err and "--target ort-cuda" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


# -- ONNX Runtime's optimizer: what the target's GPU measurement relies on ---------------------------------------


def test_onnx_runtime_fuses_a_decomposed_layernorm_at_extended_in_if_branches_too_and_never_when_disabled(tmp_path):
    """The optimizer behaviour the targets rest on, checked on this ONNX Runtime (FP32 graphs: the CPU provider puts
    Casts around FP16 nodes it has no kernel for before the extended level, which stops the fusion there, as the CUDA
    provider, with FP16 kernels, does not). Below opset 17 the fusion is an extended-level one; from opset 17 the
    basic level makes it too: so the TensorRT target's GPU proxy disables optimizations rather than stopping at
    basic."""
    m14, m17 = layernorm_block(opset=14).model, layernorm_block(opset=17).model
    assert _norms(_optimized_ops(m14, "basic", tmp_path)) == 0
    assert _norms(_optimized_ops(m14, "extended", tmp_path)) == 2  # with the residual Add: SkipLayerNormalization
    assert _norms(_optimized_ops(m14, "all", tmp_path)) == 2
    assert _optimized_ops(m17, "basic", tmp_path)["LayerNormalization"] == 2
    for m in (m14, m17):
        ops = _optimized_ops(m, "disabled", tmp_path)
        assert _norms(ops) == 0 and ops["Pow"] == 2
    # inside an If branch (the gated search graph's units): the optimizer recurses into subgraphs
    model = from_proto(m14)
    per_node = gated_native_graph(model, FP16)
    assert per_node.units == []
    ops = _optimized_ops(per_node.proto, "all", tmp_path)
    assert _norms(ops, "if:") == 0  # one If per node: nothing to fuse, whatever the level
    whole = gated_native_graph(model, FP16, units=fusion_units(model, FP16))
    branch = next(a.g for n in whole.proto.graph.node if n.op_type == "If" and "ln1_add" in n.name
                  for a in n.attribute if a.name == "then_branch")
    fp32 = onnx.helper.make_model(  # the ln1 unit's then branch as a graph of its own, in FP32: the optimizer fuses it
        onnx.helper.make_graph([n for n in branch.node], "branch", [], list(branch.output)), opset_imports=m14.opset_import)
    assert {n.op_type for n in fp32.graph.node} >= {"Add", "ReduceMean", "Pow", "Sqrt", "Div"}


def test_the_gated_graph_keeps_each_fusion_site_whole_so_onnx_runtime_fuses_it_as_deployed(tmp_path):
    """For the ort-cuda target the search graph must not break ONNX Runtime's fusions: each fusion site is one If on
    the And of its members' gates whose then branch holds the whole pattern in FP16 with no Cast inside, and ONNX
    Runtime fuses it there (FP16 on the CPU at opset 17, whose fusion runs before the CPU's Casts). Where a member is
    FP32 the unit's else branch gates each node on its own: bit for bit the per-node graph (the deployed graph has
    Casts between such nodes and fuses nothing either)."""
    case = layernorm_block(opset=17)
    model = from_proto(case.model)
    units = fusion_units(model, FP16)
    assert set(LN_NODES) <= {n for u in units for n in u}
    whole = gated_native_graph(model, FP16, units=units)
    per_node = gated_native_graph(model, FP16)
    onnx.checker.check_model(whole.proto)
    assert whole.candidates == per_node.candidates and whole.units == units
    assert ("residual1", "ln1_mean", "ln1_sub", "ln1_pow", "ln1_var", "ln1_add_eps", "ln1_sqrt", "ln1_div", "ln1_mul",
            "ln1_add") in units  # the residual Add too: ONNX Runtime fuses it with the LayerNorm (SkipLayerNormalization)
    assert _norms(_optimized_ops(whole.proto, "all", tmp_path), "if:") == 2
    assert _norms(_optimized_ops(per_node.proto, "all", tmp_path), "if:") == 0
    # the where form (no If: both sides in the main graph) fuses each unit's low-type copy there, and only it
    where = gated_native_graph(model, FP16, form="where", units=units)
    assert where.units == units and not any(n.op_type == "If" for n in where.proto.graph.node)
    assert _norms(_optimized_ops(where.proto, "all", tmp_path)) == 2
    assert _norms(_optimized_ops(gated_native_graph(model, FP16, form="where").proto, "all", tmp_path)) == 0

    def run(graph, fallback, sample):
        sess = ort.InferenceSession(graph.proto.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, {**sample, **graph.feeds(fallback)})[0]

    sample = case.samples(1)[0]
    one_fp32_each = {u[1] for u in units}  # every unit goes to its else branch
    assert np.array_equal(run(whole, one_fp32_each, sample), run(per_node, one_fp32_each, sample))
    everything = set(whole.candidates)
    reference = ort.InferenceSession(case.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, sample)[0]
    np.testing.assert_allclose(run(whole, everything, sample), reference, rtol=1e-5, atol=1e-4)


def test_the_target_sets_how_onnx_runtime_measures(planted_file):
    """ONNX Runtime backends measure what the target executes: no graph optimization for TensorRT's proxy, ORT_ENABLE_ALL
    and whole fusion sites in the gated graph for ONNX Runtime (on the CPU provider here: the plumbing)."""
    from precision_doctor.backends.ort_gated import OrtGatedBackend

    model = from_proto(layernorm_block().model)
    for target, level in (("tensorrt", "disabled"), ("ort-cuda", "all"), (None, "all")):
        backend = registry.make_backend("ort-cpu", model, "fp16", model.outputs, target=target)
        assert backend.level == level
        backend.close()
    gated = OrtGatedBackend(model, "fp16", providers=["CPUExecutionProvider"], level="all", units=True)
    assert gated.level == "all" and len(gated.graph.units) == 4 and gated.prepare(frozenset()).run(
        layernorm_block().samples(1)[0])
    gated.close()


def _conv_bias_spec(tmp_path) -> RunSpec:
    """A Conv whose output overflows FP16 where ONNX Runtime rounds it before adding the bias (see below)."""
    from onnx import TensorProto, helper, numpy_helper

    w = np.full((4, 4, 1, 1), 5e3, np.float32) + 2e4 * np.eye(4, dtype=np.float32)[:, :, None, None]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.full(4, -6e4, np.float32), "b"),
             numpy_helper.from_array(np.array(1e4, np.float32), "s")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
             helper.make_node("Div", ["c", "s"], ["y"], name="scale")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(tmp_path / "m.onnx"))
    rng, files = np.random.default_rng(0), []
    for i in range(4):
        np.savez(tmp_path / f"s{i}.npz", x=rng.uniform(1.5, 2.0, (1, 4, 4, 4)).astype(np.float32))
        files.append(str(tmp_path / f"s{i}.npz"))
    spec = RunSpec(model=str(tmp_path / "m.onnx")).with_settings({
        "inputs.files": files, "tolerance.atol": 1e-2, "tolerance.rtol": 1e-2, "backends.backend": "emulate"})
    return spec


def test_an_answer_for_tensorrt_that_onnx_runtime_needs_more_of_gets_an_ort_cuda_folder(tmp_path):
    """The other direction: ONNX Runtime's CUDA Conv rounds the convolution to FP16 before adding the bias
    (`conv-bias-fp16`, measured); a convolution of 70000 with a bias of -60000 overflows there, not where the bias is
    added before the one rounding (TensorRT, modelled). The TensorRT answer keeps everything in FP16; ONNX Runtime's
    keeps the Conv in FP32, in ort-cuda/."""
    report = api.diagnose(_conv_bias_spec(tmp_path), tmp_path / "run")
    o = report.checks.other_runtime
    assert report.passed and report.search.target == "tensorrt" and report.answer.fallback_nodes == []
    assert (o.runtime, o.passed, o.directory) == ("ort-cuda", False, "ort-cuda") and "conv" in o.answer
    out = tmp_path / "run"
    assert {p.key: p.value for p in onnx.load(str(out / "ort-cuda" / "fixed.onnx")).metadata_props}[TARGET_METADATA] \
        == "ort-cuda"
    assert json.loads((out / "ort-cuda" / "ort_node_block_list.json").read_text())[:1] == ["conv"]
    md = (out / "report.md").read_text()
    assert "it FAILS (outputs that overflow to inf or NaN)" in md and "For ONNX Runtime CUDA run ort-cuda/fixed.onnx" in md
    assert "# This answer is for ONNX Runtime CUDA (--target ort-cuda)" in (out / "ort-cuda" / "trtexec.sh").read_text()


def test_the_unit_gated_graph_computes_the_deployed_graph_node_for_node():
    """Under ONNX's reference evaluator (each node in numpy's own FP16 arithmetic, no fusion, no Casts of its own) the
    unit-gated graph, the per-node gated graph (each in both forms, If and Where) and fixed.onnx's graph agree bit for
    bit on every set tried: the units' wiring (And of the gates, the low-type tensors between members, the else
    branch's renamed nodes) is exact."""
    from onnx.reference import ReferenceEvaluator

    from precision_doctor.graph.mixed import build_mixed

    case = layernorm_block()
    model = from_proto(case.model)
    units = fusion_units(model, FP16)
    whole, per_node = gated_native_graph(model, FP16, units=units), gated_native_graph(model, FP16)
    sample = case.samples(1)[0]
    forms = [gated_native_graph(model, FP16, form="where", units=units), gated_native_graph(model, FP16, form="where")]
    for fallback in (set(), {"ln1_mul"}, {u[1] for u in units}, set(case.expected), set(whole.candidates)):
        deployed = ReferenceEvaluator(build_mixed(model, frozenset(fallback))).run(None, sample)[0]
        for graph in (whole, per_node, *forms):
            got = ReferenceEvaluator(graph.proto).run(None, {**sample, **graph.feeds(fallback)})[0]
            assert np.array_equal(got, deployed, equal_nan=True), sorted(fallback)


@pytest.mark.parametrize("opset", [14, 17])
def test_without_units_the_two_forms_compute_the_same_values_under_onnx_runtime(opset):
    """What the gated backend's form trial relies on (`OrtGatedBackend.choose_form`, offered without fusion units
    only): the per-node If and Where forms give the same outputs to the bit under ONNX Runtime, optimized or not,
    on the extremes and on random sets. (With units they do not on the CPU, which removes Casts across the Where
    form's main graph: that form is not offered there.)"""
    import random

    case = layernorm_block(opset=opset)
    model = from_proto(case.model)
    forms = {f: gated_native_graph(model, FP16, form=f) for f in ("if", "where")}
    rng = random.Random(opset)
    cands = forms["if"].candidates
    sets = [set(), set(cands)] + [set(rng.sample(cands, rng.randint(1, len(cands) - 1))) for _ in range(12)]
    sample = case.samples(1)[0]
    for level in ("disabled", "all"):
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level])
        sessions = {f: ort.InferenceSession(g.proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
                    for f, g in forms.items()}
        for fallback in sets:
            got = {f: sessions[f].run(None, {**sample, **forms[f].feeds(fallback)})[0] for f in forms}
            assert np.array_equal(got["if"], got["where"], equal_nan=True), (level, sorted(fallback))


@pytest.mark.gpu
def test_on_the_gpu_the_search_graph_measures_what_the_target_executes():
    """On ONNX Runtime CUDA: for ort-cuda the unit-gated graph with every node FP16 computes what the deployed
    all-FP16 graph computes (the LayerNorms fused in both: the issue's 14 Pow/ReduceMean nodes that only the broken
    fusion needed are not needed); for tensorrt the per-node graph and the deployed graph without graph
    optimizations agree (neither fuses)."""
    if not registry.cuda_machine():
        pytest.skip("no CUDA GPU with onnxruntime-gpu here")
    case = layernorm_block()
    model = from_proto(case.model)
    sample = case.samples(1)[0]
    for target in ("ort-cuda", "tensorrt"):
        gated = registry.make_backend("ort-cuda-gated", model, "fp16", model.outputs, target=target)
        mixed = registry.make_backend("ort-cuda", model, "fp16", model.outputs, target=target)
        try:
            got = gated.prepare(frozenset()).run(sample)[model.outputs[0]]
            want = mixed.prepare(frozenset()).run(sample)[model.outputs[0]]
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3, err_msg=target)
        finally:
            gated.close()
            mixed.close()


# -- the test: a decomposed-LayerNorm transformer block, one answer per runtime --------------------------


@pytest.fixture(scope="module")
def block_runs(tmp_path_factory):
    """The block (opset 14) diagnosed for each target on the emulator, from the same 6 samples."""
    root = tmp_path_factory.mktemp("block")
    case = layernorm_block()
    onnx.save(case.model, str(root / "block.onnx"))
    files = []
    for i, s in enumerate(case.samples(6)):
        np.savez(root / f"s{i}.npz", **s)
        files.append(str(root / f"s{i}.npz"))
    runs = {}
    for target in ("tensorrt", "ort-cuda"):
        spec = RunSpec(model=str(root / "block.onnx")).with_settings({
            "inputs.files": files, "tolerance.atol": case.atol, "tolerance.rtol": case.rtol,
            "backends.backend": "emulate", "backends.target": target})
        runs[target] = (api.diagnose(spec, root / target), root / target)
    return case, runs


def test_for_tensorrt_the_layernorm_nodes_that_overflow_are_in_the_answer(block_runs):
    case, runs = block_runs
    report, out = runs["tensorrt"]
    assert report.passed and report.search.target == "tensorrt" and report.search.emulation_rules == "tensorrt"
    assert case.expected <= set(report.answer.fallback_nodes) <= LN_NODES  # each LayerNorm's Pow and the mean reading it
    assert report.analysis.baseline is not None and not report.analysis.baseline.passed  # all FP16: the Pows overflow
    o = report.checks.other_runtime
    assert (o.runtime, o.backend, o.measured, o.passed) == ("ort-cuda", "emulate", False, True) and o.answer is None
    assert not (out / "ort-cuda").exists()
    data = json.loads((out / "report.json").read_text())
    assert data["search"]["target"] == "tensorrt" and data["checks"]["other_runtime"]["passed"] is True
    assert Report.from_json(data).checks.other_runtime == o
    md = (out / "report.md").read_text()
    assert "The answer is for TensorRT (`--target tensorrt`)" in md and "## Target runtime" in md
    assert "On ONNX Runtime CUDA (emulated with the ort-cuda rules, 6 samples) it passes too" in md
    for name in ("trtexec.sh", "tensorrt_rtx.sh", "layer_precisions.txt"):
        assert "# This answer is for TensorRT (--target tensorrt)" in (out / name).read_text(), name
    assert {p.key: p.value for p in onnx.load(str(out / "fixed.onnx")).metadata_props}[TARGET_METADATA] == "tensorrt"
    assert json.loads((out / "run_settings.json").read_text())["target"] == "tensorrt"


def test_for_onnx_runtime_the_fused_pattern_is_not_and_tensorrt_gets_its_own_answer(block_runs):
    case, runs = block_runs
    report, out = runs["ort-cuda"]
    assert report.passed and report.search.target == "ort-cuda" and report.search.emulation_rules == "ort-cuda"
    assert not set(report.answer.fallback_nodes) & LN_NODES  # fused and computed in FP32 by ONNX Runtime: nothing to keep
    assert report.analysis.baseline is not None and report.analysis.baseline.passed
    o = report.checks.other_runtime  # the same answer on TensorRT: the Pows overflow
    assert (o.runtime, o.passed, o.directory) == ("tensorrt", False, "tensorrt") and o.tolerance_used > 10
    assert case.expected <= set(o.answer) and set(o.added) == set(o.answer) - set(report.answer.fallback_nodes)
    assert o.answer_tolerance_used < 1
    assert set(o.files) >= {"fixed_onnx", "trtexec", "tensorrt_rtx", "layer_precisions"}
    assert all((out / path).is_file() for path in o.files.values())
    props = {p.key: p.value for p in onnx.load(str(out / "tensorrt" / "fixed.onnx")).metadata_props}
    assert props[TARGET_METADATA] == "tensorrt" and "--target ort-cuda answer failed there" in props["precision_doctor.answer"]
    assert {p.key: p.value for p in onnx.load(str(out / "fixed.onnx")).metadata_props}[TARGET_METADATA] == "ort-cuda"
    ours = (out / "trtexec.sh").read_text()
    assert "# This answer is for ONNX Runtime CUDA (--target ort-cuda)" in ours
    assert "# On TensorRT (emulated with the tensorrt rules) it fails" in ours and "tensorrt/" in ours
    theirs = (out / "tensorrt" / "trtexec.sh").read_text()
    assert "# This answer is for TensorRT (--target tensorrt)" in theirs and "--onnx=../model.onnx" in theirs
    assert "../inputs.json" in (out / "tensorrt" / "tensorrt_rtx.sh").read_text() or "inputs" not in theirs
    lines = (out / "tensorrt" / "layer_precisions.txt").read_text().splitlines()
    assert {ln.split(":")[0] for ln in lines if not ln.startswith("#")} == set(o.answer)
    md = (out / "report.md").read_text()
    assert "The answer is for ONNX Runtime CUDA (`--target ort-cuda`)" in md
    # its first step checks it where it is deployed, never on TensorRT, where it fails
    assert "Check the fixed model on the target GPU with ONNX Runtime CUDA" in md
    assert "polygraphy run fixed.onnx --onnxrt --providers cuda --load-inputs inputs.json" in md
    assert "polygraphy run fixed.onnx --trt" not in md.split("## Next steps")[1].split("\n## ")[0]
    assert "it FAILS" in md and "`tensorrt/`" in md and "./tensorrt/trtexec.sh" in md
    data = json.loads((out / "report.json").read_text())
    assert data["search"]["target"] == "ort-cuda" and data["checks"]["other_runtime"]["answer"] == o.answer


def test_the_other_runtimes_answer_grows_on_the_gated_graph_first_and_the_real_graph_checks_it(
        block_runs, tmp_path, monkeypatch):
    """Where the other runtime's check makes a session per set (ort-cuda on a GPU), its growing runs on the gated
    graph first (`GROW_ON`) and the check's own backend sees two sets: the answer, then what was grown. Here the
    emulator stands for both (the GPU path is the same code with ort-cuda and ort-cuda-gated): the same answer as
    growing on the check's backend alone, from two evaluations there; grown on the search's working set, the other
    samples checked after."""
    from precision_doctor.pipeline import target

    monkeypatch.setattr(target, "GROW_ON", {"emulate": "emulate"})
    case, runs = block_runs
    before, _ = runs["ort-cuda"]
    onnx.save(case.model, str(tmp_path / "block.onnx"))
    files = []
    for i, s in enumerate(case.samples(6)):  # the fixture's samples
        np.savez(tmp_path / f"s{i}.npz", **s)
        files.append(str(tmp_path / f"s{i}.npz"))
    spec = RunSpec(model=str(tmp_path / "block.onnx")).with_settings({
        "inputs.files": files, "tolerance.atol": case.atol, "tolerance.rtol": case.rtol,
        "backends.backend": "emulate", "backends.target": "ort-cuda"})
    report = api.diagnose(spec, tmp_path / "run")
    o, was = report.checks.other_runtime, before.checks.other_runtime
    assert (o.passed, sorted(o.answer), o.added) == (was.passed, sorted(was.answer), was.added)
    checked = (tmp_path / "run" / "other-tensorrt.jsonl").read_text().splitlines()
    grown = (tmp_path / "run" / "other-tensorrt-gated.jsonl").read_text().splitlines()
    assert len(checked) == 2 and len(grown) >= 2 and o.evaluations == len(checked) + len(grown)
    # counterexample-guided as the search: grown on the search's samples, then checked on the others (here all pass)
    rounds = [json.loads(line) for line in (tmp_path / "run" / "other-tensorrt-gated-rounds.jsonl").read_text().splitlines()]
    assert [(r["round"], r["search"]) for r in rounds] == [(0, "other-tensorrt")]
    assert rounds[0]["working"] == list(range(4)) and rounds[0]["checked"] == 6 - 4 and rounds[0]["counterexamples"] == []
    assert sorted(rounds[0]["answer"]) == sorted(o.answer)


def test_the_cli_says_which_runtime_each_answer_is_for(run_cli, block_runs, tmp_path):
    case, runs = block_runs
    _, tensorrt_run = runs["tensorrt"]
    files = sorted(str(p) for p in tensorrt_run.parent.glob("s*.npz"))
    args = [a for f in files for a in ("--inputs", f)]
    code, out, err = run_cli("diagnose", tensorrt_run.parent / "block.onnx", *args, "--atol", str(case.atol), "--rtol",
                             str(case.rtol), "--target", "ort-cuda", "--backend", "emulate", "--out", tmp_path / "r")
    text = " ".join(out.split())
    assert code == 0, err
    assert "fp16 for ort-cuda on emulate" in text
    assert "The answer is for ONNX Runtime CUDA (--target ort-cuda)" in text and "`" not in text  # plain text
    assert "On TensorRT (emulated with the tensorrt rules, 6 samples) it FAILS" in text
    assert f"the answer for tensorrt: {tmp_path / 'r'}/tensorrt/" in text


def test_emit_warns_where_the_answer_fails_the_other_runtime_and_emits_that_runtimes_own(run_cli, block_runs):
    """`emit RUN --format trtexec` of an ort-cuda answer printed its TensorRT builds with no word that the same report
    says the answer fails on TensorRT; `emit RUN/tensorrt` said it held no report.json."""
    _, runs = block_runs
    _, run = runs["ort-cuda"]
    code, out, err = run_cli("emit", run, "--format", "trtexec")
    assert code == 0 and "# WARNING: it FAILS on TensorRT (" in out and f"emit {run / 'tensorrt'}" in out, out + err
    code, out, err = run_cli("emit", run / "tensorrt")
    assert code == 0, out + err
    assert f"# {run / 'tensorrt'} holds the answer for TensorRT (--target tensorrt) of the run in {run}:" in out
    assert "tensorrt/fixed.onnx" in out and "./tensorrt/trtexec.sh" in out
    code, out, err = run_cli("emit", run / "tensorrt", "--format", "engine")  # its own scripts build it
    assert code == 2 and "./tensorrt/trtexec.sh" in err and "report.json" not in err, out + err
    code, out, _ = run_cli("emit", run / "tensorrt", "--format", "json")
    assert code == 0 and json.loads(out)["target"] == "tensorrt" and json.loads(out)["fallback_nodes"]
    code, out, _ = run_cli("emit", runs["tensorrt"][1], "--format", "trtexec")  # its own runtime's answer: no warning
    assert code == 0 and "WARNING" not in out


@pytest.mark.tensorrt
def test_tensorrt_rtx_parses_and_builds_both_answers_and_warns_on_the_fp16_layernorm(block_runs):
    """TensorRT-RTX's parser and builder (the trt extra) take both fixed.onnx files of the ort-cuda run, each layer in
    the precision its answer says; its builder warns that the FP16 LayerNorm of the ort-cuda answer may overflow."""
    from trt_helpers import require_tensorrt_rtx

    from precision_doctor.backends.tensorrt import parse_onnx, trt_check
    from precision_doctor.graph.mixed import forced_fp32_nodes
    from precision_doctor.graph.model import load_model

    lib = require_tensorrt_rtx()
    _, runs = block_runs
    report, out = runs["ort-cuda"]
    model = load_model(out.parent / "block.onnx")
    cands = [n.name for n in model.candidates]
    assert report.tensorrt.check.ran and report.tensorrt.check.passed
    assert report.checks.other_runtime.trt_check.ran and report.checks.other_runtime.trt_check.passed
    for path, answer in ((out / "fixed.onnx", report.answer.fallback_nodes),
                         (out / "tensorrt" / "fixed.onnx", report.checks.other_runtime.answer)):
        res = trt_check(path, answer, cands, "fp16", forced=forced_fp32_nodes(model, answer), lib=lib)
        assert res.passed and res.checked_nodes == len(cands), [m.describe() for m in res.mismatches]
    parsed = parse_onnx(lib, out / "fixed.onnx")
    config = parsed.builder.create_builder_config()
    assert parsed.builder.build_serialized_network(parsed.network, config) is not None
    warnings = " ".join(m for _, m in parsed.logger.messages)
    assert "layernorm" in warnings.lower() and "may cause overflow" in warnings


def test_a_gpu_failure_in_the_other_runtimes_check_leaves_the_answer_and_says_it_was_not_checked(
        block_runs, tmp_path, monkeypatch):
    """The other runtime's check failing on the GPU (whisper-base on the H200: cuBLAS out of memory, 14 minutes in)
    ends neither the run nor its answer: the section says it was not checked and why."""
    from precision_doctor.graph.ort_session import GpuRunError
    from precision_doctor.pipeline import target

    made = target.make_backend

    def failing(*a, **k):
        backend = made(*a, **k)

        def prepare(fallback):
            raise GpuRunError("m.onnx: ONNX Runtime's CUDA provider failed at node 'ln' (cublas error: CudaCall)")

        backend.prepare = prepare
        return backend

    monkeypatch.setattr(target, "make_backend", failing)
    case, runs = block_runs
    onnx.save(case.model, str(tmp_path / "block.onnx"))
    files = []
    for i, s in enumerate(case.samples(6)):
        np.savez(tmp_path / f"s{i}.npz", **s)
        files.append(str(tmp_path / f"s{i}.npz"))
    spec = RunSpec(model=str(tmp_path / "block.onnx")).with_settings({
        "inputs.files": files, "tolerance.atol": case.atol, "tolerance.rtol": case.rtol, "backends.backend": "emulate"})
    report = api.diagnose(spec, tmp_path / "run")
    o, was = report.checks.other_runtime, runs["tensorrt"][0]
    assert report.passed and sorted(report.answer.fallback_nodes) == sorted(was.answer.fallback_nodes)
    assert o.passed is None and "the GPU failed the check" in o.reason and "cublas" in o.reason
    assert "Not checked on ONNX Runtime CUDA: the GPU failed the check" in (tmp_path / "run" / "report.md").read_text()


def test_a_gpu_failure_while_growing_the_other_runtimes_answer_keeps_the_failure_it_measured(tmp_path, monkeypatch):
    """The answer failed on the other runtime, then the GPU failed while its answer there was grown: the section
    still says it FAILS there (measured), and that no answer for it was grown, and why."""
    from precision_doctor.graph.ort_session import GpuRunError
    from precision_doctor.pipeline import target

    def failing(*a, **k):
        raise GpuRunError("m.onnx: ONNX Runtime's CUDA provider failed at node 'conv' (cublas error: CudaCall)")

    monkeypatch.setattr(target, "_grow_there", failing)
    report = api.diagnose(_conv_bias_spec(tmp_path), tmp_path / "run")
    o = report.checks.other_runtime
    assert report.passed and (o.runtime, o.passed, o.answer) == ("ort-cuda", False, None)
    assert o.reason.startswith("no answer for it was grown: the GPU failed") and o.evaluations >= 1
    assert "it FAILS (outputs that overflow to inf or NaN): no answer for it was grown: the GPU failed" in \
        (tmp_path / "run" / "report.md").read_text()
