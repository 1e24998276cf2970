"""Fusion groups and the search over them: a group goes to FP32 whole or not at all unless a member alone is
proven to matter; FP16 gaps closed where their Casts cost more; what TensorRT-RTX fuses."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from pricing_helpers import conv_model

from precision_doctor import planted
from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.backends.tensorrt.kernels import parse_layer_dump
from precision_doctor.data.activations import captured_shapes
from precision_doctor.data.workload import Workload
from precision_doctor.graph.cost import cost_model
from precision_doctor.graph.formats import FP16
from precision_doctor.graph.groups import fusion_groups, group_of
from precision_doctor.graph.model import from_proto
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline.compare import capture_and_analyse
from precision_doctor.search import STRATEGIES, Oracle
from precision_doctor.search.space import build_space
from precision_doctor.spec import InputSpec


def _model(nodes, inits, shape=(2, 16)) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)],
                          ir_version=9)
    return onnx.shape_inference.infer_shapes(m)


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)


def test_conv_bn_activation_and_silu_are_one_group():
    model = from_proto(conv_model(["N", 3, "H", "W"]))
    groups = fusion_groups(model)
    assert [(g.kind, g.members) for g in groups] == [("conv", ("conv1", "bn1", "relu1")), ("conv", ("conv2", "scale_up"))]
    n = helper.make_node
    w = np.ones((4, 3, 1, 1), np.float32)
    silu = _model([n("Conv", ["x", "w"], ["c"], name="conv"), n("Sigmoid", ["c"], ["s"], name="sig"),
                   n("Mul", ["c", "s"], ["m"], name="mul"), n("Add", ["m", "x4"], ["y"], name="residual")],
                  [numpy_helper.from_array(w, "w"), _const("x4", np.zeros((1, 4, 4, 4)))], shape=(1, 3, 4, 4))
    assert [(g.kind, g.members) for g in fusion_groups(from_proto(silu))] == [
        ("conv", ("conv", "sig", "mul", "residual"))]


def test_matmul_gelu_layernorm_and_attention_groups():
    n = helper.make_node
    rng = np.random.default_rng(0)
    nodes = [
        n("MatMul", ["x", "w"], ["h"], name="fc"), n("Add", ["h", "b"], ["hb"], name="bias"),
        n("Div", ["hb", "sqrt2"], ["d"], name="g_div"), n("Erf", ["d"], ["e"], name="g_erf"),
        n("Add", ["e", "one"], ["e1"], name="g_add"), n("Mul", ["hb", "e1"], ["p"], name="g_mul"),
        n("Mul", ["p", "half"], ["gelu"], name="g_half"),
        n("ReduceMean", ["gelu"], ["mu"], name="ln_mean", axes=[-1]), n("Sub", ["gelu", "mu"], ["c"], name="ln_sub"),
        n("Pow", ["c", "two"], ["sq"], name="ln_pow"), n("ReduceMean", ["sq"], ["var"], name="ln_var", axes=[-1]),
        n("Add", ["var", "eps"], ["ve"], name="ln_eps"), n("Sqrt", ["ve"], ["sd"], name="ln_sqrt"),
        n("Div", ["c", "sd"], ["z"], name="ln_div"), n("Mul", ["z", "gamma"], ["zg"], name="ln_gamma"),
        n("Add", ["zg", "beta"], ["ln"], name="ln_beta"),
        n("Transpose", ["ln"], ["lt"], name="kt", perm=[1, 0]),
        n("MatMul", ["ln", "lt"], ["qk"], name="qk"), n("Mul", ["qk", "scale"], ["qks"], name="qk_scale"),
        n("Softmax", ["qks"], ["p_att"], name="softmax", axis=-1), n("MatMul", ["p_att", "ln"], ["y"], name="pv"),
    ]
    inits = [_const("w", rng.standard_normal((16, 16))), _const("b", np.zeros(16)), _const("sqrt2", 1.4142135),
             _const("one", 1.0), _const("half", 0.5), _const("two", 2.0), _const("eps", 1e-5),
             _const("gamma", np.ones(16)), _const("beta", np.zeros(16)), _const("scale", 0.25)]
    model = from_proto(_model(nodes, inits, (4, 16)))
    kinds = {g.kind: g.members for g in fusion_groups(model)}
    assert kinds["matmul"] == ("fc", "bias", "g_div", "g_erf", "g_add", "g_mul", "g_half")
    assert kinds["layernorm"] == ("ln_mean", "ln_sub", "ln_pow", "ln_var", "ln_eps", "ln_sqrt", "ln_div", "ln_gamma",
                                  "ln_beta")
    assert kinds["attention"] == ("qk", "qk_scale", "softmax", "pv")


def test_dense_layers_before_a_softmax_are_no_attention():
    model = from_proto(planted.CASES["softmax_no_max"]().model)
    assert [(g.kind, g.members) for g in fusion_groups(model)] == [("softmax", ("logit_scale", "exp", "sum", "normalize"))]


def _search(case_or_proto, samples, tol, objective="deploy"):
    model = from_proto(case_or_proto)
    with tempfile.TemporaryDirectory(prefix="pd-groups-") as tmp:
        return _search_in(Path(tmp), model, samples, tol, objective)


def _search_in(d, model, samples, tol, objective):
    analysis = capture_and_analyse(Workload(model, samples, InputSpec()), "fp16", tol, d)
    cm = cost_model(model, "fp16", {k: v.shape for k, v in samples[0].items()}, captured_shapes(d / "activations.h5"))
    space = build_space(model, analysis, FP16, objective, cost_model=cm)
    ref = ReferenceRunner(model)
    oracle = Oracle(EmulateBackend(model), samples, [ref.run(s) for s in samples], tol, cost_of=space.cost)
    return model, space, oracle, STRATEGIES["auto"](oracle, space)


def _group_kept_whole_unless_proven(space, oracle, found):
    """Every group is wholly in the answer, wholly out, or split with the proof: the answer passes with its
    released members in FP16, and the answer without the whole group fails (both evaluated)."""
    refined = space.refinements[-1]
    assert refined.answer == found and oracle.known(found).passed
    splits = {tuple(s.kept): s for s in refined.splits}
    split_at = found - {n for gap in refined.gaps_closed for n in gap}  # the answer when the groups were split
    for group in space.grouping.groups.values():
        inside = [m for m in group.members if m in found]
        if not inside or len(inside) == len(group.members):
            continue
        assert tuple(inside) in splits, f"{group.members} split without proof"
        without = oracle.known(split_at - set(inside))
        assert without is not None and not without.passed


def test_batchnorm_never_kept_apart_from_its_conv_unless_proven():
    """The conv model needs its Mul by 1e5 in FP32; the Conv+BN+Relu group stays whole or out. With a BN
    whose variance is tiny (its output overflows FP16), the BN is needed: kept with its Conv, or alone only with
    the proof recorded."""
    rng = np.random.default_rng(3)
    samples = [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(3)]
    tol = Tolerance(1e-2, 1e-2)
    model, space, oracle, found = _search(conv_model([1, 3, 8, 8]), samples, tol)
    assert oracle.passes(found) and "scale_up" in found
    _group_kept_whole_unless_proven(space, oracle, found)
    assert not ({"bn1"} <= found and "conv1" not in found and not space.refinements[-1].splits)
    hot = conv_model([1, 3, 8, 8])
    for init in hot.graph.initializer:
        if init.name == "var":
            init.CopyFrom(numpy_helper.from_array(np.full(8, 1e-9, np.float32), "var"))
    model, space, oracle, found = _search(hot, samples, tol)
    assert oracle.passes(found) and "bn1" in found
    _group_kept_whole_unless_proven(space, oracle, found)


@pytest.mark.parametrize("name", ["softmax_no_max", "near_constant_norm", "three_defects"])
def test_planted_answers_keep_groups_whole_unless_proven(name):
    case = planted.CASES[name]()
    model, space, oracle, found = _search(case.model, case.samples(4, 0), Tolerance(case.atol, case.rtol))
    assert oracle.passes(found) and case.planted & found
    _group_kept_whole_unless_proven(space, oracle, found)
    if name == "near_constant_norm":  # the LayerNorm group split: mean and center alone are proven to matter
        assert found == case.expected and space.refinements[-1].splits[0].kind == "layernorm"


def test_a_short_fp16_gap_between_fp32_neighbours_is_closed_when_it_pays():
    """x -> Mul 1e5 -> Mul 1e-5 -> Relu -> Mul 1e5 -> Mul 1e-5: the two Muls by 1e5 need FP32 (the constant does
    not fit FP16); the two nodes between them in FP16 cost two Casts, more than their FP32 arithmetic: they run in
    FP32 too (verified by the oracle), and so does the last Mul before the FP32 output."""
    n = helper.make_node
    nodes = [n("Mul", ["x", "up"], ["a"], name="up1"), n("Mul", ["a", "down"], ["b"], name="down1"),
             n("Relu", ["b"], ["r"], name="relu"), n("Mul", ["r", "up"], ["u"], name="up2"),
             n("Mul", ["u", "down"], ["y"], name="down2")]
    proto = _model(nodes, [_const("up", 1e5), _const("down", 1e-5)], (4, 64))
    rng = np.random.default_rng(0)
    samples = [{"x": (rng.standard_normal((4, 64)) * 0.1).astype(np.float32)} for _ in range(2)]
    model, space, oracle, found = _search(proto, samples, Tolerance(1e-3, 1e-3))
    _, nodes_space, nodes_oracle, by_nodes = _search(proto, samples, Tolerance(1e-3, 1e-3), "nodes")
    assert by_nodes == {"up1", "up2"} and nodes_space.grouping is None
    gaps = space.refinements[-1].gaps_closed
    assert ("down1", "relu") in gaps and ("down2",) in gaps
    assert found == {"up1", "down1", "relu", "up2", "down2"} and oracle.known(found).passed
    cm = space.cost_model
    assert cm.deploy_us(found) < cm.deploy_us(by_nodes) and cm.answer_cost(found).casts < cm.answer_cost(by_nodes).casts


def test_layer_dump_names_the_onnx_nodes_of_each_kernel():
    text = ("Layers:\nName: __myl_CorrSilu_myl0_4, LayerType: runtime_fusion, Inputs: [], Outputs: [], TacticName: t, "
            "StreamId: 0, Metadata: [ONNX Layer: /m/conv/Conv]\x1f[ONNX Layer: /m/act/Sigmoid]\x1f[ONNX Layer: /m/act/Mul]\n"
            "Name: entry^bb^wait^1_myl0_2, LayerType: wait, Inputs: [], Metadata: \n"
            "Name: __myl_Move_myl0_3, LayerType: kgen, Inputs: [], Metadata: ")
    kernels = parse_layer_dump(text)
    assert [(k.type, k.nodes) for k in kernels] == [
        ("runtime_fusion", ("/m/conv/Conv", "/m/act/Sigmoid", "/m/act/Mul")), ("kgen", ())]


def test_tensorrt_rtx_fuses_our_conv_groups(tmp_path):
    """What the TensorRT-RTX builder here does to a fixed.onnx: the Conv + BN + Relu group is one kernel."""
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX is not installed")
    from precision_doctor.backends.tensorrt.kernels import engine_kernels
    from precision_doctor.graph.mixed import build_mixed

    model = from_proto(conv_model([1, 3, 16, 16]))
    path = tmp_path / "fixed.onnx"
    onnx.save(build_mixed(model, frozenset({"scale_up"})), path)
    kernels = engine_kernels(path)
    if not kernels:
        pytest.skip("this TensorRT-RTX release logs no layer list (kernels.py reads it)")
    group = group_of(fusion_groups(model))["conv1"].members
    assert any(set(group) <= set(k.nodes) for k in kernels), [k.nodes for k in kernels]


def test_repair_over_units_keeps_a_passing_split_answer_and_grows_whole_groups():
    """The confirmation's repair with the deploy objective: a passing answer whose group was split stays as it is
    where it may not be pruned; a failing one grows by whole groups until it passes."""
    from precision_doctor.search.auto import repair

    case = planted.CASES["softmax_no_max"]()
    model, space, oracle, found = _search(case.model, case.samples(4, 0), Tolerance(case.atol, case.rtol))
    group = next(g for g in space.grouping.groups.values() if g.kind == "softmax")
    assert set(group.members) - found  # split: logit_scale released
    assert repair(oracle, space, found, prune_after=False) == found
    assert repair(oracle, space, found, keep_start=True) == found
    grown = repair(oracle, space, frozenset({"exp"}))
    assert grown is not None and oracle.known(grown).passed and set(group.members) <= grown
