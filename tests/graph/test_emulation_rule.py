"""The emulation rule, checked against numpy rounding on small graphs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.graph import emulate
from precision_doctor.graph.emulate import MASK_INPUT
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.model import from_proto
from precision_doctor.graph.ort_session import make_session, with_outputs
from precision_doctor.planted import CASES, IR_VERSION, OPSET

FMT = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}


def r(x, fmt):
    return np.asarray(x, np.float32).astype(FMT[fmt]).astype(np.float32)


def _model(const_node: bool = False):
    """y = (x * w) + b, with b an initializer or a Constant node; plus an int64 Reshape."""
    w = numpy_helper.from_array(np.array([1.0001, 3.14159, 70000.0, 1e-6], np.float32), "w")
    shape = numpy_helper.from_array(np.array([2, 2], np.int64), "shape")
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"], name="mul")]
    inits = [w, shape]
    b = np.array([0.1, 2049.0, -0.3333, 5e-5], np.float32)
    if const_node:
        nodes.append(helper.make_node("Constant", [], ["b"], name="bconst", value=numpy_helper.from_array(b)))
    else:
        inits.append(numpy_helper.from_array(b, "b"))
    nodes += [
        helper.make_node("Add", ["m", "b"], ["a"], name="add"),
        helper.make_node("Reshape", ["a", "shape"], ["y"], name="reshape"),
    ]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION), b


X = np.array([1.0009765625 + 1e-4, 0.333333, 1.5, 7.0], np.float32)
W = np.array([1.0001, 3.14159, 70000.0, 1e-6], np.float32)


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
@pytest.mark.parametrize("const_node", [False, True])
@pytest.mark.parametrize("fallback", [(), ("mul",), ("add",), ("mul", "add")])
def test_rule_matches_numpy(fmt, const_node, fallback):
    proto, b = _model(const_node)
    model = from_proto(proto)
    be = EmulateBackend(model, fmt)
    got = be.prepare(frozenset(fallback)).run({"x": X})["y"].ravel()
    with np.errstate(over="ignore", invalid="ignore"):
        if "mul" in fallback:  # FP32 on what it receives, output not rounded
            m = X * W
        else:  # rounds inputs (the initializer too) and its output
            m = r(r(X, fmt) * r(W, fmt), fmt)
        if "add" in fallback:  # fed by a low-precision node: takes the rounded value as it is
            a = m + b
        else:  # fed by an FP32 node: rounds that input itself
            a = r(r(m, fmt) + r(b, fmt), fmt)
        y = r(a, fmt)  # the Reshape is a low-precision node too: it rounds what it receives
    np.testing.assert_array_equal(got, y)


def test_all_lowp_overflows_fp16_but_not_bf16():
    proto, _ = _model()
    model = from_proto(proto)
    fp16 = EmulateBackend(model, "fp16").prepare(frozenset()).run({"x": X})["y"].ravel()
    bf16 = EmulateBackend(model, "bf16").prepare(frozenset()).run({"x": X})["y"].ravel()
    assert np.isinf(fp16[2])  # 70000 does not fit FP16
    assert np.isfinite(bf16[2])


def test_candidates_exclude_constants_and_integer_nodes():
    proto, _ = _model(const_node=True)
    model = from_proto(proto)
    assert [n.name for n in model.candidates] == ["mul", "add", "reshape"]
    assert model.node("bconst").is_candidate is False


def test_gated_graph_is_one_session_for_all_sets():
    proto, _ = _model()
    be = EmulateBackend(from_proto(proto), "fp16")
    session = be.session
    for fb in [(), ("mul",), ("add",)]:
        be.prepare(frozenset(fb)).run({"x": X})
    assert be.session is session


# -- the If-gated graph against the Where-gated form -------------------------------------------------
SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-8, -3e-6, 7e4, -7e4, 65504.0, 65520.0, 3.4e38, 1e-40], np.float32)


def _edge_model(opset: int):
    """Ops the If-gated graph treats specially: exact ops (Relu, Max, Concat, Split, Reshape, nearest
    Resize, Transpose, Clip with both bounds), a node fed by more candidates than it branches on, a
    double-typed island, a Constant, a graph input read by several nodes, multi-output nodes."""
    r = np.random.default_rng(3)
    f32 = lambda name, v: numpy_helper.from_array(np.asarray(v, np.float32), name)  # noqa: E731
    inits = [
        f32("w", r.standard_normal((4, 6)) * 3),
        f32("b", [0.1, 1e-8, -0.0, 7e4, 3.3333, -2.5]),
        numpy_helper.from_array(np.array([1e-3, 2049.0, 1 / 3, -1e-9, 5.0, 6e4], np.float64), "dconst"),
        numpy_helper.from_array(np.array([1, 3, 2, 2], np.int64), "shape"),
        f32("scales", [1, 1, 2, 1]),
        f32("roi", []),
        f32("lo", -3.3333),
        f32("hi", 7e4),
    ]
    clip_both = dict(inputs=["y2", "lo", "hi"]) if opset >= 11 else dict(inputs=["y2"], min=-3.3333, max=7e4)
    node = helper.make_node
    nodes = [
        node("MatMul", ["x", "w"], ["mm"], name="mm"),
        node("Add", ["mm", "b"], ["a"], name="add"),
        node("Constant", [], ["k"], name="k", value=numpy_helper.from_array(np.array(1.0009765625 + 1e-4, np.float32))),
        node("Mul", ["a", "k"], ["ak"], name="mulk"),
        node("Cast", ["ak"], ["ad"], name="to_double", to=TensorProto.DOUBLE),
        node("Add", ["ad", "dconst"], ["dd"], name="add_double"),
        node("Cast", ["dd"], ["df"], name="to_float", to=TensorProto.FLOAT),
        node("Relu", ["df"], ["r"], name="relu"),
        node("Neg", ["a"], ["na"], name="neg"),
        node("Max", ["r", "na", "x6"], ["mx"], name="max3"),
        node("Concat", ["mx", "df", "x6", "na", "mm"], ["cat"], name="cat", axis=0),  # 4 producing candidates
        node("Split", ["cat"], ["s1", "s2", "s3", "s4", "s5"], name="split", axis=0,
             **({"num_outputs": 5} if opset >= 18 else {})),
        node("Mul", ["s1", "s3"], ["p"], name="mul_split"),
        node("Sub", ["p", "s2"], ["q"], name="sub_split"),
        node("Reshape", ["q", "shape"], ["q4"], name="reshape"),
        node("Resize", ["q4", "roi", "scales"], ["up"], name="resize", mode="nearest"),
        node("Transpose", ["up"], ["tr"], name="transpose", perm=[0, 2, 1, 3]),
        node("Abs", ["tr"], ["ab"], name="abs"),
        node("Sqrt", ["ab"], ["y"], name="sqrt"),
        node("Div", ["x6", "s5"], ["y2"], name="div"),
        node("Clip", clip_both.pop("inputs"), ["c1"], name="clip_both", **clip_both),
        node("Mul", ["c1", "s4"], ["y3"], name="mul_clip"),
    ]
    out = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    g = helper.make_graph(nodes, "edge", [out("x", [2, 4]), out("x6", [2, 6])],
                          [out("y", [1, 4, 3, 2]), out("y2", [2, 6]), out("y3", [2, 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=7 if opset < 13 else IR_VERSION)


def _edge_samples(rng, n=4):
    out = []
    for i in range(n):
        s = {"x": (rng.standard_normal((2, 4)) * 10**i).astype(np.float32),
             "x6": (rng.standard_normal((2, 6)) * 100).astype(np.float32)}
        if i >= 2:
            for v in s.values():
                v.ravel()[rng.integers(0, v.size, 4)] = rng.choice(SPECIALS, 4)
        out.append(s)
    return out


def _session(proto, names, types):
    """Basic optimizations, no weight prepacking: MatMul on a constant weight (the If-gated graph) and
    on a Where's output (the Where-gated form) then run the same kernel, so the graphs compare bit for bit."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.log_severity_level = 3
    so.add_session_config_entry("session.disable_prepacking", "1")
    return ort.InferenceSession(with_outputs(proto, names, types).SerializeToString(), so, providers=["CPUExecutionProvider"])


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


def _compare(model, fmt, samples, graphs, masks):
    names = list(dict.fromkeys([t for n in model.nodes for t in n.float_outputs] + model.outputs))
    sessions = [_session(g.proto, names, model.tensor_types) for g in graphs]
    for mask in masks:
        for s in samples:
            results = [sess.run(names, {**s, MASK_INPUT: mask}) for sess in sessions]
            for other in results[1:]:
                bad = [t for t, a, b in zip(names, results[0], other) if not _same(a, b)]
                assert not bad, f"{fmt}: {bad[:3]} differ for mask {mask.astype(int)}"


def _masks(n, rng, k=12):
    return [np.ones(n, bool), np.zeros(n, bool)] + [rng.random(n) < p for p in np.linspace(0.1, 0.9, k)]


@pytest.mark.parametrize(("fmt", "opset"), [("fp16", 11), ("fp16", 18), ("bf16", 13)])
def test_if_gates_compute_what_where_gates_compute(fmt, opset, monkeypatch):
    """Every mask: the If-gated graph (nested gates, exact ops unrounded, rounded inputs taken as they
    are), a mix of If and Where nodes, and the Where-gated form give the same tensors."""
    model = from_proto(_edge_model(opset))
    f = get_format(fmt)
    if_graph = emulate.gated_graph(model, f)
    where_graph = emulate.gated_graph(model, f, where_gates=True)
    ops = {n.op_type for n in if_graph.proto.graph.node}
    assert "Where" not in ops and "If" in ops
    flip = iter(np.random.default_rng(1).random(1000) < 0.5)
    monkeypatch.setattr(emulate._GatedBuilder, "wrappable", lambda self, info: next(flip))
    mixed = emulate.gated_graph(model, f)
    assert {"If", "Where"} <= {n.op_type for n in mixed.proto.graph.node}
    rng = np.random.default_rng(opset)
    _compare(model, fmt, _edge_samples(rng), [where_graph, if_graph, mixed], _masks(len(if_graph.candidates), rng))


@pytest.mark.parametrize("case", ["three_defects", "deep_stack_one_bad", "softmax_no_max"])
def test_if_gates_match_where_gates_on_planted(case):
    c = CASES[case]()
    model = from_proto(c.model)
    rng = np.random.default_rng(0)
    samples = c.samples(2, 1)
    for v in samples[1].values():
        v.ravel()[rng.integers(0, v.size, 6)] = rng.choice(SPECIALS, 6)
    f = get_format("fp16")
    graphs = [emulate.gated_graph(model, f, where_gates=True), emulate.gated_graph(model, f)]
    _compare(model, "fp16", samples, graphs, _masks(len(graphs[0].candidates), rng, 8))


@pytest.mark.parametrize("case", ["large_reducesum", "overflow_island"])
def test_all_fp32_mask_is_the_reference(case):
    """With every candidate in the fallback set the gated graph computes the FP32 model bit for bit,
    with the session options of the references (large_reducesum: a K=4096 MatMul whose constant weight
    ORT prepacks; a Where-fed weight was not, and its sums differed in the last bits)."""
    c = CASES[case]()
    model = from_proto(c.model)
    names = list(dict.fromkeys([t for n in model.nodes for t in n.float_outputs] + model.outputs))
    ref = make_session(with_outputs(model.proto, names, model.tensor_types), optimize=False)
    be = EmulateBackend(model, "fp16", outputs=names)
    runner = be.prepare(frozenset(be.graph.candidates))
    for s in c.samples(2, 0):
        got = runner.run(s)
        for t, want in zip(names, ref.run(names, s)):
            assert np.array_equal(got[t], want, equal_nan=True) and np.array_equal(np.signbit(got[t]), np.signbit(want)), t


def test_negative_zero_keeps_its_sign():
    """-1e-9 rounds to -0 in FP16 and stays -0 (the Where-gated form gave +0: ORT's Where drops the sign)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    g = helper.make_graph([helper.make_node("Mul", ["x", "c"], ["y"], name="mul")], "g", [x], [y],
                          [numpy_helper.from_array(np.array([1.0, 1.0], np.float32), "c")])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    got = EmulateBackend(from_proto(proto), "fp16").prepare(frozenset()).run({"x": np.array([-1e-9, 1e-9], np.float32)})["y"]
    assert got.tolist() == [0.0, 0.0] and np.signbit(got).tolist() == [True, False]
