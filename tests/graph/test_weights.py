"""Large weights in files (graph/weights.py): the graphs that sessions are made of carry none of a model's large
weights, each weight and each rounded copy is written once per model, sessions over the files compute what sessions
over the weights themselves computed (to the last bit), a session maps the files instead of holding a copy of its
own, and the search backend's session is paused through a capture (the memory of a run over a large model:
docs/history/large-models.md)."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_doctor import api, planted
from precision_doctor.backends.base import active_holders
from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.control import CaptureEvent, PhaseEvent
from precision_doctor.graph import weights
from precision_doctor.graph.emulate import gated_graph, local_graph
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.model import from_proto
from precision_doctor.graph.ort_session import make_session, with_outputs
from precision_doctor.measure.capture import capture
from precision_doctor.spec import BackendSpec, InputSpec, RunSpec

WIDTH = 512  # a [512, 512] FP32 weight is 1 MiB: weights.MIN_BYTES


def _mlp(layers: int = 2, width: int = WIDTH) -> onnx.ModelProto:
    """MatMul + Add + Relu blocks of [width, width] weights, one value of each over FP16's range (saturated when
    rounded), biases far below MIN_BYTES."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        w[i, 3 * i] = 70000.0
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.full(width, 0.1, np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"matmul{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, width])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _samples(n: int, width: int = WIDTH, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(0, 1, (1, width)).astype(np.float32)} for _ in range(n)]


def _inline(proto: onnx.ModelProto) -> list[str]:
    """The initializers of `proto` that hold MIN_BYTES or more of their data in the proto itself."""
    return [t.name for t in proto.graph.initializer if weights.large(t)]


def test_graphs_for_sessions_carry_no_large_weights_and_each_file_is_written_once():
    model = from_proto(_mlp())
    assert sorted(_inline(model.proto)) == ["w0", "w1"]  # the model keeps its own
    fp16 = get_format("fp16")
    graphs = [model.lean_proto(), gated_graph(model, fp16).proto, gated_graph(model, fp16, rules="ort-cuda").proto,
              local_graph(model, fp16, model.candidates)[0], gated_graph(model, get_format("bf16")).proto]
    for proto in graphs:
        assert _inline(proto) == [] and weights.in_files(proto)
    assert model.weights.written == 2 + 2 + 2  # the FP32 weights, their FP16 and their BF16 roundings: once each
    assert sum(f.stat().st_size for f in model.weights.dir.iterdir()) == 6 * WIDTH * WIDTH * 4
    # a graph copy with other outputs (what every session of the capture and the backends is made of) is as lean
    assert _inline(with_outputs(graphs[1], ["m0"], model.tensor_types)) == []
    files = model.weights.dir
    model.weights.close()
    assert not files.exists()


def _small_and_large(monkeypatch, name: str):
    """The same planted case as two models: one whose weights stay in its graphs (as where the temporary directory
    has no room: `WeightFiles.full`), one with every weight of 64 bytes or more in files (scalars stay: ONNX
    Runtime's shape inference reads a Resize's scales from the graph)."""
    case = planted.CASES[name]()
    monkeypatch.setattr(weights, "MIN_BYTES", 64)
    inline = from_proto(case.model)
    inline.weights.full = True
    in_files = from_proto(case.model)
    assert weights.in_files(in_files.lean_proto()) or not case.model.graph.initializer
    fp16 = get_format("fp16")
    for proto in (inline.lean_proto(), gated_graph(inline, fp16).proto, gated_graph(inline, fp16, rules="ort-cuda").proto):
        assert not weights.in_files(proto) and not any(t.data_location == TensorProto.EXTERNAL
                                                        for t in proto.graph.initializer)
    return case, inline, in_files


@pytest.mark.parametrize("name", ["three_defects", "softmax_no_max", "cancellation", "overflow_island"])
def test_sessions_over_weight_files_compute_the_same_to_the_last_bit(tmp_path, monkeypatch, name):
    """The capture's statistics, the emulator's outputs for a few fallback sets and the FP32 reference's are the same
    numbers whether the weights are in the graphs or in files."""
    if name not in planted.CASES:
        pytest.skip(f"no planted case {name}")
    case, inline, in_files = _small_and_large(monkeypatch, name)
    samples, fmt, rules = case.samples(3, seed=2), get_format("fp16"), BackendSpec().rules
    a = capture(inline, samples, fmt, tmp_path / "a.h5", group_mb=256.0, compression=None, rules=rules)
    b = capture(in_files, samples, fmt, tmp_path / "b.h5", group_mb=256.0, compression=None, rules=rules)
    assert {t: repr(s) for t, s in a.items()} == {t: repr(s) for t, s in b.items()}
    names = [n.name for n in inline.candidates]
    sets = [frozenset(), frozenset(names[:1]), frozenset(names[::2])]
    with EmulateBackend(inline, rules=rules) as x, EmulateBackend(in_files, rules=rules) as y, \
            ReferenceRunner(inline) as rx, ReferenceRunner(in_files) as ry:
        for s in samples:
            for fallback in sets:
                got, want = y.prepare(fallback).run(s), x.prepare(fallback).run(s)
                assert all(np.array_equal(got[k], want[k], equal_nan=True) for k in want)
            assert all(np.array_equal(ry.run(s)[k], v, equal_nan=True) for k, v in rx.run(s).items())


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_sessions_map_the_weight_files_instead_of_copying_them():
    """Four sessions over a graph whose 64 MiB weight is in a file hold less than one copy of it between them (a
    Gather reads a few rows: nothing prepacked); each held two copies (ONNX Runtime's and its parsed graph's) when
    made from the serialized graph."""
    rows, cols = 4096, 4096
    table = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    g = helper.make_graph([helper.make_node("Gather", ["table", "i"], ["y"], axis=0, name="gather")], "lookup",
                          [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, cols])],
                          [numpy_helper.from_array(table, "table")])
    model = from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    lean = with_outputs(model.lean_proto(), ["y"], model.tensor_types)
    before = _rss()
    sessions = [make_session(lean, optimize=False) for _ in range(4)]
    grown = _rss() - before
    for s in sessions:
        assert np.array_equal(s.run(["y"], {"i": np.array([3, 4095])})[0], table[[3, 4095]])
    assert grown < table.nbytes, f"{grown / 2**20:.0f} MiB for 4 sessions over a {table.nbytes / 2**20:.0f} MiB weight"


def test_the_emulator_pauses_its_session_where_it_can_make_it_again():
    model, small = from_proto(_mlp()), from_proto(planted.CASES["three_defects"]().model)
    s = _samples(1)[0]
    with EmulateBackend(model) as big, EmulateBackend(small) as kept:
        want = big.prepare(frozenset({"matmul0"})).run(s)
        big.pause()
        assert big.session is None  # its graph's weights in files: made again when next run
        got = big.prepare(frozenset({"matmul0"})).run(s)
        assert big.session is not None and all(np.array_equal(got[k], want[k], equal_nan=True) for k in want)
        kept.pause()
        assert kept.session is not None  # its graph not kept (its weights in it): the session stays


def test_the_capture_runs_without_the_search_backends_and_the_references_sessions(tmp_path):
    """While the capture's sessions compute (each CaptureEvent of a diagnosis: the capture, the fixed capture), and as
    the other runtime's check starts, the emulator the search runs on and the FP32 reference runner hold none of theirs:
    only the step's own sessions hold (what ONNX Runtime prepacks of) the weights."""
    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), str(path))
    files = []
    for i, s in enumerate(_samples(3, seed=1)):
        files.append(tmp_path / f"s{i}.npz")
        np.savez(files[-1], **s)
    seen: list[tuple[str, list[str]]] = []

    def sink(event) -> None:
        if isinstance(event, CaptureEvent) or (isinstance(event, PhaseEvent) and event.phase == "other-runtime"):
            seen.append((getattr(event, "stage", None) or event.phase,
                         [h.name for h in active_holders()
                          if isinstance(h, (EmulateBackend, ReferenceRunner)) and h.session is not None]))

    spec = RunSpec(str(path), inputs=InputSpec(files=tuple(map(str, files)))).with_settings(
        {"backends.backend": "emulate", "capture.keep": "none"})
    api.diagnose(spec, tmp_path / "run", progress=sink)
    assert {"statistics", "fixed", "other-runtime"} <= {stage for stage, _ in seen}
    assert [(stage, holders) for stage, holders in seen if holders] == []


def test_no_room_for_the_files_keeps_the_weights_in_the_graphs(monkeypatch):
    """Where the temporary directory has no room, the weights stay in the graphs (more memory, nothing refused): the
    file that did not fit is not left behind, and no later weight tries."""
    from precision_doctor import storage

    model = from_proto(_mlp())
    fp16 = get_format("fp16")
    gated_graph(model, fp16)  # w0, w1 and their roundings in files
    assert model.weights.written == 4

    def no_room(path, need):
        raise storage.DiskFull(path.parent, 28, path.name, "0 MiB left")

    monkeypatch.setattr(storage, "check_room", no_room)
    bf16 = gated_graph(model, get_format("bf16")).proto
    assert model.weights.full and model.weights.written == 4 and len(list(model.weights.dir.iterdir())) == 4
    rounded = [t for t in bf16.graph.initializer if t.name.startswith(("w0_rounded", "w1_rounded"))]
    assert len(rounded) == 2 and all(weights.large(t) for t in rounded)  # BF16's roundings inline, w0, w1 in files
    assert sum(t.data_location == TensorProto.EXTERNAL for t in bf16.graph.initializer) == 2
    fresh = from_proto(_mlp())
    fresh.weights.full = True
    assert _inline(fresh.lean_proto()) == ["w0", "w1"]


def test_a_folded_weight_is_written_once_for_every_graph():
    """The same large value made again by each graph (a Conv's folded BatchNorm weight under the ort-cuda rules) goes
    to one file (the files are keyed by content)."""
    model = from_proto(_mlp())
    value = np.arange(WIDTH * WIDTH, dtype=np.float32).reshape(WIDTH, WIDTH)
    a, b = model.weights.array("fold_a", value), model.weights.array("fold_b", value.copy())
    c = model.weights.array("fold_c", value + 1)
    assert model.weights.written == 2 and a.name == "fold_a" and b.name == "fold_b"
    assert [e.value for e in a.external_data if e.key == "location"] == [e.value for e in b.external_data
                                                                         if e.key == "location"]
    assert [e.value for e in c.external_data if e.key == "location"] != [e.value for e in a.external_data
                                                                         if e.key == "location"]


def test_a_killed_processs_weight_directory_is_removed_by_the_next(tmp_path):
    """A process killed before its exit leaves its weight directory: the next process's `root()` removes every one
    whose lock no live process holds, and keeps the locked ones and those without a lock file."""
    import fcntl
    import subprocess

    dead, alive, lockless = (tmp_path / f"{weights.ROOT_PREFIX}{n}" for n in ("dead", "alive", "new"))
    for d in (dead, alive, lockless):
        d.mkdir()
        (d / "1.bin").write_bytes(b"x" * 100)
    (dead / weights.LOCK).touch()
    (alive / weights.LOCK).touch()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time\n"
                               f"f = open({str(alive / weights.LOCK)!r}); fcntl.flock(f, fcntl.LOCK_EX)\n"
                               "print('held', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert weights.sweep_stale(tmp_path) == [dead]
        assert not dead.exists() and alive.exists() and lockless.exists()
    finally:
        holder.kill()
        holder.wait()
    assert weights.sweep_stale(tmp_path) == [alive]  # its process is gone now
    del fcntl


def test_a_model_with_other_shapes_shares_its_weight_files():
    """probe-ops' model with the shapes the samples fixed (`Model.with_tensor_shapes`) writes no weight again."""
    model = from_proto(_mlp())
    gated_graph(model, get_format("fp16"))
    shaped = model.with_tensor_shapes(dict(model.tensor_shapes))
    gated_graph(shaped, get_format("fp16"))
    assert shaped.weights is model.weights and model.weights.written == 4


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_trials_mixed_graph_refers_to_files_and_computes_what_the_inline_one_did(precision):
    """The ORT backend's mixed graphs (`build_mixed(lean=True)`) carry no large weight: the FP32 ones and their
    low-precision copies are files of the model (each copy written once), holding the bytes the inline graph held;
    a session over it gives the inline graph's outputs to the last bit."""
    from precision_doctor.backends.ort import OrtBackend
    from precision_doctor.graph.mixed import build_mixed

    model = from_proto(_mlp(width=2 * WIDTH))  # FP16 copies of 2 MiB: large too
    for fallback in (frozenset(), frozenset({"matmul1"})):
        inline, lean = build_mixed(model, fallback, precision), build_mixed(model, fallback, precision, lean=True)
        assert _inline(inline) and not _inline(lean) and weights.in_files(lean)
        written = model.weights.written
        assert not _inline(build_mixed(model, fallback, precision, lean=True)) and model.weights.written == written
        lean_values = {t.name: t for t in lean.graph.initializer}
        for t in inline.graph.initializer:
            stub = lean_values[t.name]
            if weights.large(t):
                onnx.external_data_helper.load_external_data_for_tensor(stub, str(weights.root()))
            assert (stub.data_type, list(stub.dims), stub.raw_data) == (t.data_type, list(t.dims), t.raw_data), t.name
        assert [v.SerializeToString() for v in lean.graph.value_info] == \
            [v.SerializeToString() for v in inline.graph.value_info]
    if precision == "fp16":  # ONNX Runtime's CPU provider has no bf16 kernels
        x = _samples(1, width=2 * WIDTH)[0]
        backend = OrtBackend(model, "fp16", ["CPUExecutionProvider"])
        got = backend.prepare(frozenset({"matmul1"})).run(x)
        backend.close()
        sess = make_session(build_mixed(model, frozenset({"matmul1"}), "fp16"))
        want = dict(zip(model.outputs, sess.run(model.outputs, x)))
        assert all(np.array_equal(got[k], want[k].astype(np.float32)) for k in want)
