"""The real mixed-precision graph: structure (Casts only at island borders), validity, ORT runs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.backends.ort import OrtBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.mixed import build_mixed, forced_fp32, lowp_nodes
from precision_doctor.graph.model import from_proto, tensor_types_and_shapes
from precision_doctor.measure.tolerance import Tolerance, check
from precision_doctor.planted import CASES, IR_VERSION, OPSET

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


@pytest.fixture(scope="module")
def cases():
    out = {}
    for name, make in CASES.items():
        case = make()
        out[name] = (case, from_proto(case.model))
    return out


def fallback_sets(case, model):
    return {"none": set(), "expected": set(case.expected), "all": {n.name for n in model.candidates}}


def expected_border_casts(model, lowp: set[str], keep_io: bool) -> int:
    """Border-crossing tensors counted on the source graph (planted models: standard ops, no Constants)."""
    g = model.proto.graph
    prec = {n.name: ("lp" if n.name in lowp else "fp32") for n in g.node}
    producer_of = {t: prec[n.name] for n in g.node for t in n.output}
    readers: dict[str, set[str]] = {}
    for n in g.node:
        for t in n.input:
            readers.setdefault(t, set()).add(prec[n.name])
    inits = {i.name for i in g.initializer}
    count = 0
    for t, sides in readers.items():
        if t in inits or model.tensor_types.get(t) != F32:
            continue
        if t in model.inputs:
            producer = "fp32" if keep_io or sides != {"lp"} else "lp"
        else:
            producer = producer_of[t]
        count += len(sides - {producer})
    for t in model.outputs:  # an output made in low precision and read by no FP32 node needs its own Cast
        if keep_io and producer_of[t] == "lp" and "fp32" not in readers.get(t, set()):
            count += 1
    return count


def test_the_cost_models_casts_are_the_border_crossings_of_every_set(cases):
    """The cost model plans each set's Casts from a layout of the model made once and its forced-FP32 nodes computed
    once (a search costs every set it tries, 10 ms a set on whisper-base before): as many Casts as tensors crossing
    a precision border, counted on the source graph, for random sets of every planted case."""
    import random

    from precision_doctor.graph.cost import cost_model

    models = [(name, model) for name, (_, model) in cases.items()] + [("forced", _with_forced_nodes())]
    for name, model in models:
        for precision in ("fp16", "bf16"):
            cm = cost_model(model, precision, {i: tuple(d or 1 for d in model.tensor_shapes[i]) for i in model.inputs})
            names, rng = [n.name for n in model.candidates], random.Random(0)
            for k in (0, 1, len(names) // 3, len(names) // 2, len(names)):
                for _ in range(3):
                    fallback = frozenset(rng.sample(names, k))
                    lowp = lowp_nodes(model, fallback, precision=precision)
                    assert len(cm.casts(fallback)) == expected_border_casts(model, lowp, True), (name, precision, k)
    assert forced_fp32(models[-1][1]) == {"cumsum", "max"}  # what the cost model must not plan in low precision


def _with_forced_nodes():
    """x + c, its CumSum (no FP16 kernel in ONNX Runtime: forced FP32), times c, the Max (forced too) of that and the
    sum: Casts around the forced nodes whatever the set."""
    c = numpy_helper.from_array(np.full((1, 8), 0.5, np.float32), "c")
    axis = numpy_helper.from_array(np.array(1, np.int64), "axis")
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"),
             helper.make_node("CumSum", ["a", "axis"], ["b"], name="cumsum"),
             helper.make_node("Mul", ["b", "c"], ["m"], name="mul"),
             helper.make_node("Max", ["m", "a"], ["y"], name="max")]
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "forced", [vi("x", TensorProto.FLOAT, [1, 8])], [vi("y", TensorProto.FLOAT, [1, 8])], [c, axis])
    return from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION))


def check_structure(model, mixed: onnx.ModelProto, lowp: set[str]) -> int:
    """Every source node reads and writes its own precision; each Cast crosses precisions, and no
    tensor is cast twice to one type. Returns the number of Casts."""
    types, _ = tensor_types_and_shapes(mixed)
    by_name = {n.name: n for n in mixed.graph.node}
    for info in model.nodes:
        node = by_name[info.name]
        want = F16 if info.name in lowp else F32
        for t in [*node.input, *node.output]:
            if types.get(t) in (F32, F16):
                assert types[t] == want, (info.name, t, types[t])
    casts = [n for n in mixed.graph.node if n.op_type == "Cast"]
    keys = [(c.input[0], c.attribute[0].i) for c in casts]
    assert len(keys) == len(set(keys)), "a tensor is cast twice to the same type"
    for c in casts:
        assert types[c.input[0]] != types[c.output[0]]
    return len(casts)


def test_planted_cases_build_check_and_run(cases):
    for name, (case, model) in cases.items():
        feeds = case.samples(1, seed=3)[0]
        ref = ReferenceRunner(model).run(feeds)
        for label, fallback in fallback_sets(case, model).items():
            for keep_io in (True, False):
                mixed = build_mixed(model, fallback, keep_io_types=keep_io)
                onnx.checker.check_model(mixed, full_check=True)
                assert mixed.ir_version == model.proto.ir_version
                lowp = lowp_nodes(model, fallback)
                n_casts = check_structure(model, mixed, lowp)
                assert n_casts == expected_border_casts(model, lowp, keep_io), (name, label, keep_io)
                if keep_io:
                    assert all(v.type.tensor_type.elem_type == F32 for v in [*mixed.graph.input, *mixed.graph.output])
                sess = ort.InferenceSession(mixed.SerializeToString(), providers=["CPUExecutionProvider"])
                in_types = {i.name: i.type for i in sess.get_inputs()}
                fed = {k: v.astype(np.float16) if in_types[k] == "tensor(float16)" else v for k, v in feeds.items()}
                out = dict(zip(model.outputs, sess.run(model.outputs, fed)))
                assert all(np.all(np.isfinite(v)) or label == "none" for v in out.values())
                if label == "all":
                    assert n_casts == 0
                    for k, v in ref.items():
                        np.testing.assert_allclose(out[k], v, rtol=1e-6, atol=1e-6)


def test_initializers_follow_their_readers(cases):
    for case, model in cases.values():
        mixed = build_mixed(model, case.expected)
        lowp = lowp_nodes(model, case.expected)
        inits = {i.name: i.data_type for i in mixed.graph.initializer}
        for node in mixed.graph.node:
            for t in node.input:
                if inits.get(t) in (F32, F16):
                    assert inits[t] == (F16 if node.name in lowp else F32), (node.name, t)
        assert len(inits) == len(model.proto.graph.initializer)  # no weight has readers of both kinds here


def test_fp32_island_has_no_fp16_inside():
    """Exp feeding ReduceSum, both in fallback, exchange FP32 directly (per-node Casts would overflow)."""
    model = from_proto(CASES["softmax_no_max"]().model)
    mixed = build_mixed(model, {"exp", "sum", "normalize"})
    types, _ = tensor_types_and_shapes(mixed)
    nodes = {n.name: n for n in mixed.graph.node}
    assert nodes["sum"].input[0] == nodes["exp"].output[0] == nodes["normalize"].input[0]
    assert types[nodes["exp"].input[0]] == types[nodes["exp"].output[0]] == types[nodes["normalize"].output[0]] == F32
    casts = [n for n in mixed.graph.node if n.op_type == "Cast"]
    assert [c.attribute[0].i for c in casts] == [F16, F32, F16, F32]  # x in, logits out, p in, y out
    assert not any(c.input[0] == nodes["exp"].output[0] for c in casts)


def test_bf16_builds():
    case = CASES["three_defects"]()
    mixed = build_mixed(from_proto(case.model), case.expected, precision="bf16")
    onnx.checker.check_model(mixed, full_check=True)
    types, _ = tensor_types_and_shapes(mixed)
    assert TensorProto.BFLOAT16 in types.values() and F16 not in types.values()


def _special_model() -> onnx.ModelProto:
    """Shape/ConstantOfShape/Cast, a Constant and an initializer read by both precisions, Resize
    scales, TopK (no FP16 kernel) and an If whose branches read an outer low-precision tensor."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4), "w")
    cval = numpy_helper.from_array(np.array([1.5, -2.0, 0.25, 3.0], np.float32))
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")

    def branch(op):
        out = helper.make_tensor_value_info(f"b_{op}", F32, [2, 4])
        return helper.make_graph([helper.make_node(op, ["a", "one"], [f"b_{op}"], name=f"br_{op}")], op, [], [out], [one])

    half = numpy_helper.from_array(np.array([0.5], np.float32))
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("ConstantOfShape", ["s"], ["z"], name="zeros", value=half),
        helper.make_node("Cast", ["x"], ["xc"], name="cast_same", to=F32),
        helper.make_node("Add", ["xc", "z"], ["a"], name="add"),
        helper.make_node("Constant", [], ["c"], name="const", value=cval),
        helper.make_node("Mul", ["a", "c"], ["m1"], name="mul_lp"),
        helper.make_node("Mul", ["x", "c"], ["m2"], name="mul_fp"),
        helper.make_node("MatMul", ["m1", "w"], ["p1"], name="mm_lp"),
        helper.make_node("MatMul", ["m2", "w"], ["p2"], name="mm_fp"),
        helper.make_node("Add", ["p1", "p2"], ["q"], name="join"),
        helper.make_node("Reshape", ["q", "shape4"], ["q4"], name="to4d"),
        helper.make_node("Resize", ["q4", "", "scales"], ["up"], name="resize", mode="nearest"),
        helper.make_node("TopK", ["q", "k"], ["topv", "topi"], name="topk", axis=-1),
        helper.make_node("If", ["cond"], ["iff"], name="iff", then_branch=branch("Add"), else_branch=branch("Sub")),
        helper.make_node("Add", ["iff", "topv"], ["y2"], name="after_if"),
    ]
    inits = [
        w,
        numpy_helper.from_array(np.array([1, 1, 2, 4], np.int64), "shape4"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
        numpy_helper.from_array(np.array([4], np.int64), "k"),
        numpy_helper.from_array(np.array(True), "cond"),
    ]
    g = helper.make_graph(
        nodes, "special", [helper.make_tensor_value_info("x", F32, [2, 4])],
        [helper.make_tensor_value_info(o, F32, s) for o, s in (("up", [1, 1, 4, 8]), ("y2", [2, 4]), ("p2", [2, 4]))],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def test_special_ops():
    model = from_proto(_special_model())
    assert forced_fp32(model) == {"topk"}
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)}
    ref = ReferenceRunner(model).run(feeds)
    mixed = build_mixed(model, {"mul_fp", "mm_fp"})
    onnx.checker.check_model(mixed, full_check=True)
    types, _ = tensor_types_and_shapes(mixed)
    nodes = {n.name: n for n in mixed.graph.node}
    inits = {i.name: i for i in mixed.graph.initializer}
    # The weight read by both precisions: two copies, no Cast.
    assert inits[nodes["mm_lp"].input[1]].data_type == F16 and inits[nodes["mm_fp"].input[1]].data_type == F32
    # The Constant read by both: kept FP32, and a converted (saturating) twin for its low-precision reader.
    assert nodes["mul_fp"].input[1] == "c" and types[nodes["mul_lp"].input[1]] == F16
    twin = next(n for n in mixed.graph.node if n.output[0] == nodes["mul_lp"].input[1])
    assert twin.op_type == "Constant" and twin.attribute[0].t.data_type == F16
    # Type attributes inside low-precision regions; a low-precision Cast reads the FP32 input directly.
    assert nodes["cast_same"].attribute[0].i == F16 and nodes["cast_same"].input[0] == "x"
    assert nodes["zeros"].attribute[0].t.data_type == F16
    # Resize computes in FP16 with FP32 scales; TopK and the If stay FP32.
    assert types[nodes["resize"].input[0]] == F16 and inits[nodes["resize"].input[2]].data_type == F32
    assert types[nodes["topk"].input[0]] == F32
    inner = {n.input[0] for attr in nodes["iff"].attribute for n in attr.g.node}
    assert inner == {"a__pd_fp32"} and types["a"] == F16
    border = sorted(c.input[0] for c in mixed.graph.node if c.op_type == "Cast" and c.name != "cast_same")
    assert border == sorted(["a", "p2", "q", "up__pd_fp16", "topv", "iff", "y2__pd_fp16"])
    sess = ort.InferenceSession(mixed.SerializeToString(), providers=["CPUExecutionProvider"])
    for k, v in zip(model.outputs, sess.run(model.outputs, feeds)):
        np.testing.assert_allclose(v, ref[k], rtol=2e-2, atol=2e-2)
    # Everything in fallback: the source arithmetic, no Casts added.
    all_fp32 = build_mixed(model, {n.name for n in model.candidates})
    assert [n.name for n in all_fp32.graph.node if n.op_type == "Cast"] == ["cast_same"]
    sess = ort.InferenceSession(all_fp32.SerializeToString(), providers=["CPUExecutionProvider"])
    for k, v in zip(model.outputs, sess.run(model.outputs, feeds)):
        np.testing.assert_allclose(v, ref[k], rtol=1e-6, atol=1e-6)


def test_ort_backend_cpu_caches_and_returns_float32(cases):
    case, model = cases["overflow_island"]
    backend = OrtBackend(model, providers=["CPUExecutionProvider"], cache_size=2)
    assert backend.name == "ort-cpu"
    r1 = backend.prepare(frozenset(case.expected))
    assert backend.prepare(frozenset(case.expected)) is r1
    backend.prepare(frozenset())
    backend.prepare(frozenset({"rescale"}))
    assert backend.prepare(frozenset(case.expected)) is not r1  # evicted
    out = r1.run(case.samples(1)[0])
    assert set(out) == set(model.outputs) and all(v.dtype == np.float32 for v in out.values())
    lp_io = OrtBackend(model, providers=["CPUExecutionProvider"], keep_io_types=False).prepare(frozenset())
    assert lp_io.run(case.samples(1)[0])[model.outputs[0]].dtype == np.float32


@pytest.mark.gpu
@pytest.mark.skipif("CUDAExecutionProvider" not in ort.get_available_providers(), reason="needs onnxruntime-gpu")
def test_ort_cuda_expected_sets_pass(cases):
    for name, (case, model) in cases.items():
        tol = Tolerance(atol=case.atol, rtol=case.rtol)
        samples = case.samples(4, seed=0)
        ref = ReferenceRunner(model)
        backend = OrtBackend(model, providers=["CUDAExecutionProvider"])
        assert backend.name == "ort-cuda"

        def passes(fallback, backend=backend, ref=ref, samples=samples, tol=tol):
            runner = backend.prepare(frozenset(fallback))
            for feeds in samples:
                out, want = runner.run(feeds), ref.run(feeds)
                if not all(check(out[k], want[k], tol).passed for k in want):
                    return False
            return True

        assert passes(case.expected), name
        if case.expected:
            assert not passes(set()), name


def _inferred_value_info(mixed: onnx.ModelProto) -> list[bytes]:
    """What the mixed graph's value_info was before it was derived: ONNX's shape inference of the graph itself."""
    from precision_doctor.graph.model import infer_shapes

    bare = onnx.ModelProto()
    bare.CopyFrom(mixed)
    del bare.graph.value_info[:]
    g = bare.graph
    known = {v.name for v in g.input} | {v.name for v in g.output} | {i.name for i in g.initializer}
    return [v.SerializeToString() for v in infer_shapes(bare).graph.value_info if v.name not in known]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_the_mixed_graphs_value_info_is_onnx_shape_inference_of_it_to_the_byte(cases, precision):
    """The mixed graph's value_info, derived from the model's inferred shapes and each version's precision, is what
    ONNX's shape inference of the mixed graph gives, entry for entry and in its order: ONNX Runtime fuses by these
    shapes, so the sessions of trials and fixed.onnx compute what they did when the inference ran each time."""
    for name, (case, model) in cases.items():
        for label, fallback in fallback_sets(case, model).items():
            for keep_io in (True, False):
                mixed = build_mixed(model, fallback, precision, keep_io_types=keep_io)
                got = [v.SerializeToString() for v in mixed.graph.value_info]
                assert got == _inferred_value_info(mixed), (name, label, keep_io)
