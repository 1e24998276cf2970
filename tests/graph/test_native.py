"""Real low-precision graphs (graph.native), the gated native backend, the node-wise fidelity
measures (fidelity.py) and node fixtures, on ONNX Runtime's CPU provider (bench/gpu_nodewise.py's own run on it:
bench/self_check.py).

The CPU provider computes FP16 nodes in FP32 (it drops the Casts around ops without FP16 kernels),
so these tests check structure and plumbing; the numbers come from a GPU (bench/gpu_nodewise.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.backends.ort_gated import OrtGatedBackend, offered_forms
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.data.activations import REFERENCE, ActivationStore
from precision_doctor.graph.emulate import local_graph, local_output
from precision_doctor.graph.formats import FP16
from precision_doctor.graph.mixed import forced_fp32
from precision_doctor.graph.model import from_proto
from precision_doctor.graph.native import GATE_PREFIX, gated_native_graph, native_local_graph, saturated
from precision_doctor.graph.ort_session import make_session, with_outputs
from precision_doctor.measure.capture import capture_run
from precision_doctor.measure.fidelity import GPU_LOCAL, agreement, by_op, capture_local_with, error_stats, node_rows, ratio, ulp
from precision_doctor.measure.node_fixture import fixture_entries, read_fixture, replay, write_fixture
from precision_doctor.planted import CASES, IR_VERSION, OPSET


def _mixed_ops_model():
    """A Conv, a Resize (float scales stay FP32), a Cast to float, a TopK (no FP16 kernel: FP32), a
    multiplication by a constant beyond FP16's range (saturated), a Constant node, an int Shape."""
    node = helper.make_node
    inits = [
        numpy_helper.from_array(np.full((2, 2, 1, 1), 0.5, np.float32), "w"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
        numpy_helper.from_array(np.array([-3.4e38, 1.0, 7e4, 2.0], np.float32).reshape(1, 1, 1, 4), "big"),
        numpy_helper.from_array(np.array([3], np.int64), "k"),
    ]
    nodes = [
        node("Conv", ["x", "w"], ["c"], name="conv"),
        node("Resize", ["c", "", "scales"], ["r"], name="resize", mode="nearest"),
        node("Constant", [], ["half"], name="half", value=numpy_helper.from_array(np.array(1e5, np.float32))),
        node("Mul", ["r", "big"], ["m"], name="mul_big"),
        node("Div", ["m", "half"], ["d"], name="div_const"),
        node("Shape", ["d"], ["shp"], name="shape"),
        node("Cast", ["shp"], ["shpf"], name="to_float", to=TensorProto.FLOAT),
        node("TopK", ["d", "k"], ["top", "idx"], name="topk", axis=-1),
    ]
    vi = lambda n, t, s: helper.make_tensor_value_info(n, t, s)  # noqa: E731
    outs = [vi(t, TensorProto.FLOAT, shape) for t, shape in (("top", [1, 2, 4, 3]), ("shpf", [4]), ("d", [1, 2, 4, 4]))]
    g = helper.make_graph(nodes, "mixed_ops", [vi("x", TensorProto.FLOAT, [1, 2, 2, 2])], outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


X = {"x": np.array([0.1, -2.0, 3.3, 1e-3, 5.0, 6.25, -7.0, 8.5], np.float32).reshape(1, 2, 2, 2)}


def _types(proto):
    inferred = onnx.shape_inference.infer_shapes(proto)
    return {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info) + list(inferred.graph.output)}


def test_saturated_clips_to_the_format_and_keeps_nan():
    got = saturated(np.array([-3.4e38, -np.inf, 7e4, 1.0, np.nan], np.float32), FP16)
    assert got.dtype == np.float16
    assert got[:4].tolist() == [-65504.0, -65504.0, 65504.0, 1.0] and np.isnan(got[4])


def test_native_local_graph_computes_each_node_in_fp16():
    model = from_proto(_mixed_ops_model())
    proto, feeds = native_local_graph(model, FP16, model.candidates)
    types = _types(proto)
    by_name = {n.name.rsplit("__pdn", 1)[0]: n for n in proto.graph.node if not n.name.startswith("cast__")}
    assert types[by_name["conv"].output[0]] == TensorProto.FLOAT16
    assert types[by_name["mul_big"].output[0]] == TensorProto.FLOAT16
    assert types[by_name["to_float"].output[0]] == TensorProto.FLOAT16  # Cast to float becomes a Cast to FP16
    assert by_name["resize"].input[2] == "scales"  # scales stay FP32
    assert "topk" in forced_fp32(model) and by_name["topk"].input[0] == "d"  # FP32, on the exact input
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    big = inits[by_name["mul_big"].input[1]]
    assert big.dtype == np.float16 and big.ravel().tolist() == [-65504.0, 1.0, 65504.0, 2.0]  # saturated
    assert inits[by_name["div_const"].input[1]].tolist() == 65504.0  # the Constant node's 1e5, saturated
    assert {o.name for o in proto.graph.output} == {local_output(t) for n in model.candidates for t in n.float_outputs}
    assert all(t in model.tensor_types for t in feeds) and "half" not in feeds  # the constant is converted, not fed
    names = list(dict.fromkeys(t for n in model.nodes for t in n.outputs if t))
    exact = dict(zip(names, make_session(with_outputs(model.proto, names, model.tensor_types)).run(names, X)), **X)
    outs = [o.name for o in proto.graph.output]
    got = dict(zip(outs, make_session(proto, optimize=False).run(outs, {t: exact[t] for t in feeds})))
    assert all(v.dtype == np.float32 for v in got.values())
    np.testing.assert_array_equal(got[local_output("top")], exact["top"])  # TopK stays FP32
    emu_proto, _ = local_graph(model, FP16, model.candidates)
    assert [o.name for o in emu_proto.graph.output] == outs  # the same contract as the emulator's local graph


def test_gated_native_graph_all_fp32_is_the_reference_and_then_branches_are_fp16():
    model = from_proto(_mixed_ops_model())
    g = gated_native_graph(model, FP16)
    assert "topk" not in g.candidates and "conv" in g.candidates
    ifs = {n.name.rsplit("__pdn", 1)[0]: n for n in g.proto.graph.node if n.op_type == "If"}
    then = next(a.g for a in ifs["conv"].attribute if a.name == "then_branch")
    conv = next(n for n in then.node if n.op_type == "Conv")
    cast_in = next(n for n in then.node if n.op_type == "Cast" and n.output[0] == conv.input[0])
    assert helper.get_attribute_value(cast_in.attribute[0]) == TensorProto.FLOAT16
    gates = [i.name for i in g.proto.graph.input if i.name.startswith(GATE_PREFIX)]
    assert gates == [f"{GATE_PREFIX}{i}" for i in range(len(g.candidates))]
    feeds = g.feeds(set(g.candidates))
    assert not any(v[0] for v in feeds.values())
    names = ["top", "shpf", "d"]
    sess = make_session(with_outputs(g.proto, names, model.tensor_types))
    ref = ReferenceRunner(model, names).run(X)
    for got, t in zip(sess.run(names, {**X, **feeds}), names):
        np.testing.assert_array_equal(got, ref[t])
    low = sess.run(names, {**X, **g.feeds(set())})  # all low precision runs
    assert all(np.all(np.isfinite(a)) for a in low[:1])


@pytest.mark.parametrize("case", ["three_defects", "large_reducesum", "deep_stack_one_bad"])
def test_gated_native_backend_runs_every_set_in_one_session(case):
    c = CASES[case]()
    model = from_proto(c.model)
    be = OrtGatedBackend(model, "fp16", ["CPUExecutionProvider"])
    assert be.name == "ort-cpu-gated"
    session = be.session
    s = c.samples(1, 0)[0]
    ref = ReferenceRunner(model).run(s)
    everything = frozenset(n.name for n in model.candidates)
    for fb in (frozenset(), frozenset(c.expected), everything):
        out = be.prepare(fb).run(s)
        assert set(out) == set(model.outputs) and all(o.dtype == np.float32 for o in out.values())
    for t, v in be.prepare(everything).run(s).items():
        np.testing.assert_array_equal(v, ref[t])
    assert be.session is session


def test_metrics():
    assert ulp(np.array([1.0, 1.5, 2.0, 0.0, 1e-6]), FP16).tolist() == [2**-10, 2**-10, 2**-9, 2**-24, 2**-24]
    a = np.array([1.0, 2.0, np.nan, 4.0], np.float32)
    b = np.array([1.0, 2.0 + 2**-9, np.nan, 4.0], np.float32)
    assert agreement(a, b, FP16) == {"exact": 0.75, "max_ulp_diff": 1.0}
    assert agreement(a, np.array([1, 2, 3, 4], np.float32), FP16)["max_ulp_diff"] == float("inf")
    st = error_stats(np.array([1.0, 2.001, np.inf]), np.array([1.0, 2.0, 3.0]), FP16)
    assert st["nonfinite"] == 1 and st["max_abs"] == pytest.approx(1e-3, rel=1e-3)
    assert st["max_ulp"] == pytest.approx(1e-3 / 2**-9, rel=1e-3)
    assert ratio(0.0, 0.0) == 1.0 and ratio(1.0, 0.0) == float("inf") and ratio(2.0, 1.0) == 2.0


def test_node_rows_and_fixture_round_trip(tmp_path):
    """A store with the reference, the standard local run and a 'provider' local run (here the CPU):
    rows for every candidate, per-op aggregates, and a fixture whose replay is the emulator's output."""
    case = CASES["three_defects"]()
    model = from_proto(case.model)
    samples = case.samples(2, 0)
    budget = 1 << 28
    with ActivationStore(tmp_path / "a.h5", "w") as store:
        store.set_attrs(precision="fp16", samples=2)
        for i, s in enumerate(samples):
            for k, v in s.items():
                store.write(REFERENCE, k, i, 2, v)
        names = [t for n in model.nodes for t in n.outputs if t]
        capture_run(store, REFERENCE, model.proto, model, names, samples, {}, budget, None)
        capture_local_with(store, "local", model, lambda g: local_graph(model, FP16, g), model.candidates, 2, budget)
        # the 'provider' here is the emulator itself: every ratio is 1 and every element agrees
        capture_local_with(store, GPU_LOCAL, model, lambda g: local_graph(model, FP16, g), model.candidates, 2, budget)
        rows = node_rows(store, model, FP16, ["standard"])
        entries = fixture_entries(store, model, model.candidates[:3], "planted:three_defects")
    assert [r["node"] for r in rows] == [n.name for n in model.candidates]
    assert all(r["ratio"]["standard"] == 1.0 and not r["mismatch"]["standard"] for r in rows)
    assert all(r["agree"]["standard"]["exact"] == 1.0 for r in rows)
    table = by_op(rows, ["standard"])
    assert sum(e["nodes"] for e in table.values()) == len(rows)
    path = write_fixture(tmp_path / "fixture.npz", entries)
    back = read_fixture(path)
    assert [r["node"] for r, _ in back] == [n.name for n in model.candidates[:3]]
    for record, arrays in back:
        got = replay(record, arrays, FP16)
        for j, t in enumerate(record["outputs"]):
            np.testing.assert_array_equal(got[t], arrays[f"out{j}"].astype(np.float32))


def test_the_where_form_of_the_gated_graph_has_no_if_and_its_all_fp32_set_is_the_reference():
    """form="where" (bench/gated_forms.py): each candidate computed both ways, a Where on a scalar gate picks each
    output; with every candidate in FP32 it computes the model itself."""
    model = from_proto(_mixed_ops_model())
    g = gated_native_graph(model, FP16, form="where")
    assert not any(n.op_type == "If" for n in g.proto.graph.node)
    assert sum(n.op_type == "Where" for n in g.proto.graph.node) >= len(g.candidates)
    feeds = g.feeds(set(g.candidates))
    assert all(v.shape == () and not v for v in feeds.values())
    names = ["top", "shpf", "d"]
    sess = make_session(with_outputs(g.proto, names, model.tensor_types))
    ref = ReferenceRunner(model, names).run(X)
    for got, t in zip(sess.run(names, {**X, **feeds}), names):
        np.testing.assert_array_equal(got, ref[t])


def test_the_gated_backend_times_its_forms_keeps_the_faster_and_computes_the_same_values():
    """On a GPU the gated backend times the If and the Where form on a sample and keeps the faster (which one wins
    depends on the model: bench/gpu_set_cost.py); here, on the CPU provider, the same plumbing is asked for by name.
    A runner prepared before the choice runs on the kept form, with the same outputs; the kept form is made again
    after a pause; a second choice times nothing."""
    c = CASES["three_defects"]()
    model = from_proto(c.model)
    assert OrtGatedBackend(model, "fp16", ["CPUExecutionProvider"]).untimed == ()  # the CPU: nothing to choose
    assert offered_forms(gpu=True, units=False) == ("if", "where") and offered_forms(gpu=True, units=True) == ("if",)
    assert offered_forms(gpu=False, units=False) == ("if",)
    be = OrtGatedBackend(model, "fp16", ["CPUExecutionProvider"], forms=("if", "where"))
    assert be.form == "if" and be.untimed == ("where",)
    s = c.samples(1, 0)[0]
    runner = be.prepare(frozenset(c.expected))
    before = runner.run(s)
    line = be.choose_form(s)
    assert set(be.form_times) == {"if", "where"} and all(t > 0 for t in be.form_times.values())
    assert be.form == min(be.form_times, key=be.form_times.get) and be.graph.form == be.form
    assert f"{'If' if be.form == 'if' else 'Where'} form kept" in line and "ms" in line
    for t, v in runner.run(s).items():
        np.testing.assert_array_equal(v, before[t])
    be.pause()
    assert set(runner.run(s)) == set(before) and be.graph.form == be.form
    assert be.choose_form(s) is None
    be.close()
    # a form that cannot be made or run on the GPU (its memory, most likely) leaves the other, said in the line
    # without the failure's advice (the run goes on)
    from precision_doctor.graph.ort_session import GpuRunError

    be = OrtGatedBackend(model, "fp16", ["CPUExecutionProvider"], forms=("if", "where"))
    made = be._made_with

    def out_of_memory(form, *rest):
        if form == "where":
            raise GpuRunError("m.onnx: ONNX Runtime's CUDA provider failed at node 'x' (memory error)")
        return made(form, *rest)

    be._made_with = out_of_memory
    line = be.choose_form(s)
    assert be.form == "if" and set(be.form_times) == {"if"}
    assert line.endswith("; the Where form could not run here (ONNX Runtime's CUDA provider failed at node 'x' "
                         "(memory error))"), line
    for t, v in be.prepare(frozenset(c.expected)).run(s).items():
        np.testing.assert_array_equal(v, before[t])
    be.close()


def test_a_form_onnx_runtime_cannot_run_leaves_the_other_and_teaches_nothing():
    """A candidate with a boolean output (Dropout's mask): ONNX Runtime has no Where kernel for bool, so the Where
    form's session is refused; the trial keeps the If form, says why in a few words, and records no refusal."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    nodes = [helper.make_node("Mul", ["x", "x"], ["m"], name="mul"),
             helper.make_node("Dropout", ["m"], ["d", "mask"], name="drop"),
             helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Add", ["d", "maskf"], ["y"], name="add")]
    proto = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=IR_VERSION)
    model = from_proto(proto)
    be = OrtGatedBackend(model, "fp16", ["CPUExecutionProvider"], forms=("if", "where"))
    s = {"x": np.linspace(-2, 2, 16, dtype=np.float32).reshape(2, 8)}
    line = be.choose_form(s)
    assert be.form == "if" and set(be.form_times) == {"if"} and be.kept_fp32 == {}
    assert "the Where form could not run here (" in line and len(line) < 400, line
    assert be.prepare(frozenset()).run(s)["y"].shape == (2, 8)
    be.close()


def test_the_onnx_runtime_backends_pause_their_sessions_and_make_them_again():
    """`pause` (through a capture, the other runtime's check) drops the gated session and the mixed graphs' cached
    ones, which on a GPU hold their arenas; the next run makes the gated session again, with the same outputs."""
    from precision_doctor.graph.ort_session import bounded_arena

    c = CASES["three_defects"]()
    model = from_proto(c.model)
    be = OrtGatedBackend(model, "fp16", ["CPUExecutionProvider"])
    s = c.samples(1, 0)[0]
    runner = be.prepare(frozenset(c.expected))
    before = runner.run(s)
    be.mixed.prepare(frozenset(c.expected))
    be.pause()
    assert be.session is None and not be.mixed._cache
    for t, v in runner.run(s).items():  # a runner prepared before the pause runs on the session made again
        np.testing.assert_array_equal(v, before[t])
    assert be.session is not None
    # in BF16 another backend may learn a refusal meanwhile: the graph made again leaves that op ungated, and a
    # runner prepared before computes its gates for the new graph
    be.kept_fp32["Mul"] = "refused elsewhere"
    be.pause()
    assert set(runner.run(s)) == set(before) and "Mul" not in {model.node(n).op_type for n in be.graph.candidates}
    be.close()
    # the CUDA provider's arena grows by what a run asks for, unless the caller said otherwise
    assert bounded_arena(["CUDAExecutionProvider", "CPUExecutionProvider"]) == [
        ("CUDAExecutionProvider", {"arena_extend_strategy": "kSameAsRequested"}), "CPUExecutionProvider"]
    assert bounded_arena([("CUDAExecutionProvider", {"arena_extend_strategy": "kNextPowerOfTwo", "use_tf32": "0"})]) \
        == [("CUDAExecutionProvider", {"arena_extend_strategy": "kNextPowerOfTwo", "use_tf32": "0"})]
