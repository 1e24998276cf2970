"""Capture into HDF5 and the analysis: rankings, first divergence, round trip without the model."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from onnx import TensorProto, helper

from precision_doctor import planted
from precision_doctor.data.activations import LOCAL, LOWP, REFERENCE, ActivationStore, escape
from precision_doctor.data.workload import Workload
from precision_doctor.graph.model import from_proto
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline.compare import reanalyse, run_compare
from precision_doctor.planted import IR_VERSION, OPSET
from precision_doctor.spec import CaptureSpec, InputSpec

DEFECTS = [n for n in planted.CASES if n != "clean"]


def _compare(case, tmp_path, n=3):
    work = Workload(from_proto(case.model), case.samples(n), InputSpec())
    return run_compare(work, "fp16", Tolerance(case.atol, case.rtol), tmp_path)


@pytest.mark.parametrize("name", DEFECTS)
def test_planted_node_ranks_first_and_first_divergence(name, tmp_path):
    case = planted.CASES[name]()
    res = _compare(case, tmp_path)
    a = res.analysis
    assert a.ranking[0] in case.planted, (a.ranking[:5], case.planted)
    assert a.first_divergence == case.first_divergence
    assert not a.passed
    assert (tmp_path / "layers.csv").read_text().startswith("index,name,op_type")
    assert (tmp_path / "layers.json").exists()


def test_clean_model_passes_and_has_no_divergence(tmp_path):
    case = planted.clean()
    a = _compare(case, tmp_path).analysis
    assert a.passed and a.first_divergence is None


def test_hdf5_round_trip_reanalyses_without_the_model(tmp_path):
    case = planted.cancellation()
    a = _compare(case, tmp_path, n=4).analysis
    b = reanalyse(tmp_path / "activations.h5")
    assert b.ranking == a.ranking
    assert b.first_divergence == a.first_divergence
    assert [r.local_rel_l2 for r in b.layers] == [r.local_rel_l2 for r in a.layers]
    with ActivationStore(tmp_path / "activations.h5") as store:
        assert set(store.runs()) >= {REFERENCE, LOWP, LOCAL}
        assert store.n_samples() == 4
        assert store.attr("model_hash") == from_proto(case.model).model_hash
        ds = store.dataset(LOWP, "sub_offset_out")
        assert ds.shape[0] == 4 and ds.chunks[0] == 1 and ds.compression == CaptureSpec().compression
        assert store.attr("tolerance")["atol"] == case.atol


def test_escaped_names_round_trip(tmp_path):
    nodes = [
        helper.make_node("Relu", ["in/put.0"], ["/blk3/Relu_output_0"], name="/blk3/Relu"),
        helper.make_node("Exp", ["/blk3/Relu_output_0"], ["out%1"], name="/blk3/Exp"),
    ]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("in/put.0", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("out%1", TensorProto.FLOAT, [3])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    samples = [{"in/put.0": np.array([1.0, 2.0, 12.0], np.float32)}]
    run_compare(Workload(from_proto(m), samples, InputSpec()), "fp16", Tolerance(), tmp_path, CaptureSpec(keep="all"))
    with ActivationStore(tmp_path / "activations.h5") as store:
        assert store.tensor_names(LOWP) == ["/blk3/Relu_output_0", "out%1"]
        assert np.isinf(store.read(LOWP, "out%1")[0, 2])  # exp(12) > 65504
        with h5py.File(tmp_path / "activations.h5") as f:
            assert escape("/blk3/Relu_output_0") in f[REFERENCE]
            assert f[REFERENCE][escape("out%1")].attrs["onnx_name"] == "out%1"


def test_unnamed_nodes_get_stable_names():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"], name="named")]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    model = from_proto(m)
    assert model.renamed_nodes == ["Relu_0"]
    assert [n.name for n in model.nodes] == ["Relu_0", "named"]
    assert from_proto(m).model_hash == model.model_hash


def test_flops_estimate_for_matmul_and_conv():
    case = planted.overflow_island()
    model = from_proto(case.model)
    assert model.node("big_matmul").flops == 2 * 2 * 16 * 32  # [2,32] x [32,16]
    w = np.zeros((8, 3, 3, 3), np.float32)
    from onnx import numpy_helper

    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], [numpy_helper.from_array(w, "w")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    assert from_proto(m).node("conv").flops == 2 * (8 * 16 * 16) * (3 * 3 * 3)


def test_scalar_tensors_read_back_as_arrays(tmp_path):
    from precision_doctor.data.activations import ActivationStore

    with ActivationStore(tmp_path / "a.h5", "w") as store:
        store.set_attrs()
        store.write("reference", "s", 0, 1, np.float32(3.0))
    with ActivationStore(tmp_path / "a.h5") as store:
        assert isinstance(store.read("reference", "s", 0), np.ndarray)


def test_many_samples_are_written_at_once_across_shape_groups(tmp_path):
    """`write_many`: consecutive samples in one write per shape group they span, read back as written one by one."""
    from precision_doctor.data.activations import ActivationStore

    rng = np.random.default_rng(0)
    values = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3)] + \
        [rng.standard_normal((2, 5)).astype(np.float32) for _ in range(2)]
    with ActivationStore(tmp_path / "a.h5", "w") as one, ActivationStore(tmp_path / "b.h5", "w") as many:
        for store in (one, many):
            store.set_shape_groups([({"x": [2, 3]}, 3), ({"x": [2, 5]}, 2)])
        for i, v in enumerate(values):
            one.write("run", "t/0", i, 5, v)
        many.write_many("run", "t/0", 0, 5, values[:4])
        many.write_many("run", "t/0", 4, 5, values[4:])
        for i, v in enumerate(values):
            assert np.array_equal(one.read("run", "t/0", i), v) and np.array_equal(many.read("run", "t/0", i), v)
        with pytest.raises(Exception, match="in sample 1 but"):
            many.write_many("run", "u", 0, 5, [values[0], values[0][:, :2]])


@pytest.mark.parametrize("name", ["three_defects", "overflow_island"])
def test_fixed_errors_without_a_stored_run_are_the_stored_runs(tmp_path, name):
    """Unless `capture.keep` is `all`, the fixed run is not stored: its per-candidate errors, computed as it runs
    beside its own FP32 run (in groups of one layer here), are those computed from the stored fixed run against the
    stored reference (bit for bit), and the store is left as it was."""
    from precision_doctor.graph.formats import get_format
    from precision_doctor.measure.stats import RelL2
    from precision_doctor.pipeline.compare import FIXED_RUN, capture_fixed

    case = planted.CASES[name]()
    model = from_proto(case.model)
    work = Workload(model, case.samples(3, 0), InputSpec())
    run_compare(work, "fp16", Tolerance(case.atol, case.rtol), tmp_path, CaptureSpec(keep="all"))
    path, fmt = tmp_path / "activations.h5", get_format("fp16")
    fallback = frozenset(case.expected)
    before = path.stat().st_size
    streamed = capture_fixed(path, model, fmt, work.captured(), fallback, CaptureSpec(keep="summary", group_mb=1e-6))
    with h5py.File(path, "r") as f:
        assert FIXED_RUN not in f and path.stat().st_size == before
    stored = capture_fixed(path, model, fmt, work.captured(), fallback, CaptureSpec(keep="all"))
    assert stored.outputs is None and set(streamed.outputs) == {o.name for o in case.model.graph.output}
    with ActivationStore(path) as store:
        assert FIXED_RUN in store.runs()
        from_store = {}
        for n in model.candidates:
            errs = []
            for t in n.float_outputs:
                acc = RelL2()
                for i in range(store.n_samples()):
                    acc.add(store.read(FIXED_RUN, t, i), store.read(REFERENCE, t, i))
                errs.append(acc.result())
            from_store[n.name] = max(errs, default=0.0)
        for name, values in streamed.outputs.items():  # the graph outputs it gives back are the stored run's
            for i, v in enumerate(values):
                np.testing.assert_array_equal(v, store.read(FIXED_RUN, name, i))
    assert streamed.errors == stored.errors == from_store and set(from_store) == {n.name for n in model.candidates}


def test_rel_l2_alone_is_the_full_statistics_rel_l2():
    """`RelL2` (the fixed run's accumulator) gives the relative L2 error the full statistics give, bit for bit:
    finite data, NaN and Inf in either run, an empty tensor, shapes that differ, an all-zero reference."""
    from precision_doctor.graph.formats import get_format
    from precision_doctor.measure.stats import RelL2, _Acc

    rng = np.random.default_rng(0)
    ref = rng.normal(size=(3, 50)).astype(np.float32)
    out = ref + rng.normal(scale=1e-3, size=ref.shape).astype(np.float32)
    bad_out, bad_ref = out.copy(), ref.copy()
    bad_out[0, 3], bad_out[1, 4], bad_ref[2, 5] = np.nan, np.inf, np.inf
    cases = [[(out[i], ref[i]) for i in range(3)], [(bad_out[i], bad_ref[i]) for i in range(3)],
             [(np.zeros(0), np.zeros(0))], [(out[0], ref[0][:10])], [(np.zeros(4), np.zeros(4))],
             [(np.ones(4), np.zeros(4))], [(out[0], bad_ref[2])]]
    for pairs in cases:
        alone, full = RelL2(), _Acc(get_format("fp16"))
        for o, r in pairs:
            alone.add(o, r)
            full.add(o, r)
        assert repr(alone.result()) == repr(full.result().rel_l2)


def test_a_prepared_reference_gives_the_same_statistics_bit_for_bit():
    """The analysis prepares each reference sample once for the runs compared with it (`_Ref`): every statistic
    equals the one computed from the raw reference, for finite data, NaN and Inf in either run, zeros in the
    reference, values beyond FP16's range and below its normal range, an empty tensor and shapes that differ."""
    from precision_doctor.graph.formats import get_format
    from precision_doctor.measure.stats import _Acc, _Ref

    fmt = get_format("fp16")
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(3, 50)).astype(np.float32)
    ref[0, :3] = [0.0, 7e4, 1e-6]
    out = ref + rng.normal(scale=1e-3, size=ref.shape).astype(np.float32)
    bad_out, bad_ref = out.copy(), ref.copy()
    bad_out[0, 3], bad_out[1, 4], bad_ref[2, 5] = np.nan, np.inf, np.inf
    cases = [[(out[i], ref[i]) for i in range(3)], [(bad_out[i], ref[i]) for i in range(3)],
             [(out[i], bad_ref[i]) for i in range(3)], [(np.zeros(0, np.float32), np.zeros(0, np.float32))],
             [(out[0], ref[0][:10])], [(fmt.round(ref[1]), ref[1])]]
    for pairs in cases:
        raw, prepared = _Acc(fmt), _Acc(fmt)
        for o, r in pairs:
            raw.add(o, r)
            prepared.add(o, _Ref.of(r, fmt))
        assert repr(raw.result()) == repr(prepared.result())
