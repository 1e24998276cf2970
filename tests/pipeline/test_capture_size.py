"""The capture's size known before it starts (pipeline/capture_size.py): the estimate against real captures, the
refusal when the run directory's file system has no room (free space patched: the one stand-in), the notice."""

from __future__ import annotations

import h5py
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_doctor import api, storage
from precision_doctor.cli.shared import PROGRESS_LINE
from precision_doctor.data.activations import stored_bytes
from precision_doctor.data.keep_plan import KeepPlan
from precision_doctor.data.workload import Workload
from precision_doctor.errors import SpecError
from precision_doctor.graph.model import from_proto
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline import capture_size
from precision_doctor.pipeline.compare import run_compare
from precision_doctor.planted import IR_VERSION, OPSET
from precision_doctor.spec import CaptureSpec, InputSpec, RunSpec

BIG, SMALL = (368, 368), (64, 96)  # at BIG the first Conv's output (8 x 368 x 368 FP32) is over 4 MiB: HDF5 chunks it


def _model() -> onnx.ModelProto:
    """Conv 4->8 3x3, Relu, Conv 8->2 1x1, Sigmoid on a 1x4xHxW input of dynamic H and W."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.normal(0, 0.2, (8, 4, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.2, (2, 8, 1, 1)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
        helper.make_node("Sigmoid", ["c2"], ["y"], name="sig"),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, "h", "w"])], [w1, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def _samples() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [{"x": rng.normal(size=(1, 4, *hw)).astype(np.float32)} for hw in (BIG, BIG, SMALL)]


@pytest.fixture
def files(tmp_path):
    """The model and its samples on disk: (model path, the folder of its sample files)."""
    path = tmp_path / "convs.onnx"
    onnx.save(_model(), str(path))
    (tmp_path / "samples").mkdir()
    for i, s in enumerate(_samples()):
        np.savez(tmp_path / "samples" / f"s{i}.npz", **s)
    return path, tmp_path / "samples"


def test_estimate_matches_a_real_capture_of_two_shape_groups(tmp_path):
    model = from_proto(_model())
    work = Workload(model, _samples(), InputSpec())
    size = capture_size.estimate(model, work.samples)
    assert [(g.samples, g.group.as_dict()["x"][2:]) for g in size.groups] == [(2, list(BIG)), (1, list(SMALL))]
    assert size.samples == 3 and not size.guessed and size.peak == size.nbytes
    run_compare(work, "fp16", Tolerance(), tmp_path, CaptureSpec(keep="all"))
    path = tmp_path / "activations.h5"
    real = path.stat().st_size
    assert abs(size.nbytes / real - 1) < 0.05, (size.nbytes, real)
    with h5py.File(path) as f:  # the layout: each dataset's allocated bytes, HDF5's own chunks (edges whole) too
        datasets = [ds for run in ("reference", "lowp", "local") for ds in f[run].values()]
        assert any(ds.chunks[0] == 1 and ds.chunks[1:] != ds.shape[1:] for ds in datasets)  # one HDF5 chunked
        for ds in datasets:
            assert stored_bytes(ds.shape[0], ds.shape[1:], ds.dtype) == ds.id.get_storage_size(), ds.name
        data = sum(ds.id.get_storage_size() for ds in datasets)
    assert data == sum(g.nbytes for g in size.groups)


@pytest.mark.parametrize("keep", ["summary", "top:1", "top:0,relu1"])
def test_a_summary_is_bounded_by_its_top_layers_not_every_tensor(tmp_path, keep):
    """Without `all` the file holds the statistics, the graph outputs and the tensors of the top layers (bounded by
    the largest layers before the capture ranks them) and of the names: the estimate bounds the file, and is far
    below every tensor's."""
    model = from_proto(_model())
    work = Workload(model, _samples(), InputSpec())
    plan = KeepPlan.parse(keep)
    size, every = capture_size.estimate(model, work.samples, plan), capture_size.estimate(model, work.samples)
    run_compare(work, "fp16", Tolerance(), tmp_path, CaptureSpec(keep=keep))
    real = (tmp_path / "activations.h5").stat().st_size
    # the per-dataset overhead is an average (DATASET_OVERHEAD): 1% for the small files' index blocks
    assert real <= size.nbytes * 1.01 and size.nbytes <= every.nbytes, (real, size.nbytes, every.nbytes)
    if plan.top <= 1:  # of 4 layers, the summary's 3 are about all of it
        assert size.nbytes < 0.75 * every.nbytes


def test_keep_all_counts_the_fixed_runs_copy():
    model = from_proto(_model())
    plain = capture_size.estimate(model, _samples())
    copied = capture_size.estimate(model, _samples(), copied=True)
    assert copied.peak == 2 * plain.nbytes + sum(g.lowp for g in plain.groups)
    assert copied.per_sample > 2 * plain.per_sample


def test_no_room_is_refused_before_anything_is_written_naming_the_flag_that_fits(run_cli, files, tmp_path, monkeypatch):
    path, inputs = files
    size = capture_size.estimate(from_proto(_model()), _samples())
    free = int(size.peak * 0.75)  # two of the three samples fit
    monkeypatch.setattr(storage, "free_space", lambda p: free)
    out = tmp_path / "run"
    code, _, err = run_cli("compare", path, "--inputs", inputs, "--out", out, "--keep-activations", "all")
    room = free - capture_size.keep_free(free)
    n = size.samples_within(room)
    said = [ln for ln in err.strip().splitlines() if not PROGRESS_LINE.match(ln)]  # stderr is not a terminal here
    assert code == 2 and 0 < n < 3 and len(said) == 1 and said[0].startswith("error: "), err
    line = said[0]
    assert str(out) in line and f"--capture-samples {n} fits" in line and "Traceback" not in err
    assert f"about {capture_size.fmt_decimal_bytes(size.peak)}" in line
    assert f"{capture_size.fmt_decimal_bytes(free)} is free" in line
    assert not out.exists()  # the run directory it made is gone: nothing was written

    monkeypatch.setattr(capture_size, "LARGE_BYTES", 0)  # announce it, however small
    code, _, err = run_cli("compare", path, "--inputs", inputs, "--out", out, "--capture-samples", n,
                           "--keep-activations", "all")
    assert code in (0, 1), err
    assert (out / "activations.h5").stat().st_size <= room  # the number it named does fit
    assert "note: the capture will write about" in err and "all of it is kept" in err


def test_diagnose_is_refused_before_the_capture_and_counts_keep_all(files, tmp_path, monkeypatch):
    path, inputs = files
    size = capture_size.estimate(from_proto(_model()), _samples(), copied=True)  # every sample is searched
    free = int(size.peak * 0.6)
    monkeypatch.setattr(storage, "free_space", lambda p: free)
    n = size.samples_within(free - capture_size.keep_free(free))
    out = tmp_path / "run"
    spec = RunSpec(str(path), inputs=InputSpec(files=(str(inputs),)), capture=CaptureSpec(keep="all"))
    with pytest.raises(SpecError) as exc:
        api.diagnose(spec, out)
    assert exc.value.setting == "capture.max_samples"
    assert "with the copy capture.keep all makes for the fixed run" in str(exc.value)
    assert n and f"capture.max_samples {n} fits" in str(exc.value)
    assert not out.exists()


def test_not_even_one_sample_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(storage, "free_space", lambda p: 20 << 20)
    work = Workload(from_proto(_model()), _samples(), InputSpec())
    with pytest.raises(SpecError, match="not even one sample fits: free some space or choose another out_dir"):
        run_compare(work, "fp16", Tolerance(), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_file_size_limit_bounds_each_file_not_the_sum(tmp_path, monkeypatch):
    """ulimit -f bounds each file: with keep=all the capture and its copy (with the fixed run) are two files, so a
    limit above the larger of them passes where their sum would not; below it, the refusal names the limit a file."""
    size = capture_size.estimate(from_proto(_model()), _samples(), copied=True)
    assert size.nbytes < size.largest_file < size.peak
    monkeypatch.setattr(storage, "free_space", lambda p: 1 << 40)
    monkeypatch.setattr(storage, "file_size_limit", lambda: size.largest_file + storage.RESERVE_BYTES)
    assert size.peak > size.largest_file + storage.RESERVE_BYTES  # the sum would not have fit
    assert capture_size.check_room(size, tmp_path) == 1 << 40
    monkeypatch.setattr(storage, "file_size_limit", lambda: size.largest_file // 2 + storage.RESERVE_BYTES)
    with pytest.raises(SpecError) as exc:
        capture_size.check_room(size, tmp_path)
    n = size.samples_within(size.largest_file // 2, one_file=True)
    assert "the file size limit (ulimit -f) allows" in str(exc.value) and f"capture.max_samples {n} fits" in str(exc.value)
    assert 0 < n < size.samples
