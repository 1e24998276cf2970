"""Issue 32, "Bounded by bytes": what a sample file's headers declare is counted in bytes (dtype itemsize x shape) and
checked against the model's input types before anything is read; a run (and a service job) holds a bounded number of
samples, kept compactly; a loader script's exit, a leading dimension of zero or below and a tolerance that would
overflow are one-line refusals; every emitted command carries every dynamic input or refuses its name.

Where memory is the point, the CLI runs in a child process under RLIMIT_AS (LIMIT_MB of address space) and its peak
RSS (`os.wait4`'s rusage) is asserted; the refusal's words are asserted too, so that a MemoryError that happens to
end the run in one line does not pass for the check. The daemon's side (pinning, globs, the worker's peak memory,
messages without server paths) is tests/service/test_service_bounds.py."""

from __future__ import annotations

import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import onnx
import pytest
from evil_files import million_samples_npz, npz_bomb, polygraphy_payload_json, wide_text_h5, wide_text_npz
from onnx import TensorProto, helper

from precision_doctor import planted
from precision_doctor.cli.shared import PROGRESS_LINE
from precision_doctor.data.input_spec import MAX_FILE_BYTES, MAX_RUN_BYTES, MAX_RUN_SAMPLES, MAX_SAMPLE_BYTES
from precision_doctor.data.inputs import input_bounds, load_samples
from precision_doctor.errors import SpecError, UserError
from precision_doctor.graph.model import Model, load_model
from precision_doctor.graph.shapes import InputShape
from precision_doctor.results import commands
from precision_doctor.results.commands import EmitOptions

LIMIT_MB = 512  # the child's address space: importing the tool and ONNX Runtime fits, a gigabyte of samples does not
PEAK_MB = 300  # the most a refused or bounded run may reach (resident); the cases reached 1.2 to 2.6 GB
ONE_THREAD = {"PRECISION_DOCTOR_ORT_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "MKL_NUM_THREADS": "1", "NO_COLOR": "1"}


@dataclass
class Ran:
    code: int
    stderr: str
    peak_mb: int

    def line(self) -> str:
        """The one line of a refusal (exit 2, no traceback; progress lines do not count)."""
        lines = [ln for ln in self.stderr.splitlines() if ln.strip() and not PROGRESS_LINE.match(ln)]
        assert self.code == 2, (self.code, self.stderr[-2000:])
        assert len(lines) == 1 and "Traceback" not in self.stderr, self.stderr[-2000:]
        return lines[0]


# The CLI, reporting its own peak RSS (VmHWM) as it exits: wait4's ru_maxrss would count the test process's resident
# memory at the fork too (Linux keeps the larger across exec), which the tests before this one move by hundreds of MB.
_LAUNCH = """import atexit, os, runpy, sys
out = os.environ.pop("PD_TEST_HWM")
def report():
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    with open(out, "w") as g:
        g.write(str(kb))
atexit.register(report)
sys.argv = ["precision-doctor", *sys.argv[1:]]
runpy.run_module("precision_doctor", run_name="__main__", alter_sys=True)
"""


def bounded(*args, cwd: Path, limit_mb: int = LIMIT_MB) -> Ran:
    """The CLI in a child process whose address space is limited to `limit_mb`: its exit code, stderr and peak RSS
    (its own: `_LAUNCH`)."""
    limit = limit_mb << 20

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    with tempfile.TemporaryFile() as err, tempfile.TemporaryDirectory() as tmp:
        hwm = Path(tmp) / "hwm"
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCH, *map(str, args)], cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err,
                                env={**os.environ, **ONE_THREAD, "PD_TEST_HWM": str(hwm)}, preexec_fn=cap)
        timer = threading.Timer(300, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode(errors="replace")
        peak_kb = int(hwm.read_text()) if hwm.is_file() else usage.ru_maxrss  # killed: no report, the upper bound
    return Ran(proc.returncode, text, peak_kb >> 10)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """The planted model (x: float32 [2, 16]) and the tester's files, built once."""
    root = tmp_path_factory.mktemp("bounded")
    onnx.save(planted.cancellation().model, str(root / "good.onnx"))
    wide_text_h5(root / "wide.h5")  # 1,400 bytes declaring 1 GiB of text
    wide_text_npz(root / "wide.npz")  # a few MB inflating to 1 GiB of text
    polygraphy_payload_json(root / "wide.json", root / "wide.npz")
    million_samples_npz(root / "m0.npz")  # 2**20 samples of [2, 16], 128 MiB deflated to well under a megabyte
    for i in range(1, 8):
        shutil.copy(root / "m0.npz", root / f"m{i}.npz")
    return root


# -- bytes, from the header, against the model's type ------------------------------------------------------------


@pytest.mark.parametrize("name, words", [
    ("wide.h5", "holds text of type |S33554432, but the model's input 'x' is float32"),
    ("wide.npz", "holds text of type |S33554432, but the model's input 'x' is float32"),
    ("wide.json", "declares shape [2, 16] of |S33554432 (1,073,741,824 bytes), more than 32 numbers take"),
])
def test_wide_text_is_refused_from_its_header(files, name, words):
    """The tester's files (1,400 bytes to 6 MB on disk, a gigabyte of text declared): 1.2 to 2.2 GB before, now one
    line naming the file and the array, with the peak memory of a refusal."""
    ran = bounded("compare", "good.onnx", "--inputs", name, "--out", "run", cwd=files)
    line = ran.line()
    assert name in line and words in line and "refused before reading it" in line, line
    assert ran.peak_mb < PEAK_MB, f"peak RSS {ran.peak_mb} MiB"
    assert not (files / "run").exists()


def test_numbers_of_another_kind_are_refused_from_the_header(tmp_path):
    onnx.save(planted.cancellation().model, str(tmp_path / "good.onnx"))
    bounds = input_bounds(load_model(tmp_path / "good.onnx"))
    for kind, arr in (("int32", np.zeros((2, 16), np.int32)), ("bool", np.zeros((2, 16), bool))):
        np.savez(tmp_path / f"{kind}.npz", x=arr)
        with h5py.File(tmp_path / f"{kind}.h5", "w") as f:
            f["x"] = arr
        for suffix in ("npz", "h5"):
            with pytest.raises(UserError, match=f"'x' holds values of type {kind}, but the model's input 'x' is float32; "
                               "refused before reading it"):
                load_samples([tmp_path / f"{kind}.{suffix}"], bounds)
    np.savez(tmp_path / "f64.npz", x=np.zeros((2, 16)))  # floating for a float input: read, then cast
    assert load_samples([tmp_path / "f64.npz"], bounds, load_model(tmp_path / "good.onnx"))[0]["x"].dtype == np.float32


def _dynamic(tmp_path: Path, inputs: dict[str, int]) -> Model:
    """A model whose inputs (name -> elem type) are all [N, 16]."""
    ins = [helper.make_tensor_value_info(n, t, ["N", 16]) for n, t in inputs.items()]
    nodes = [helper.make_node("Identity", [n], [f"{n}_out"], name=f"id_{n}") for n in inputs]
    outs = [helper.make_tensor_value_info(f"{n}_out", t, ["N", 16]) for n, t in inputs.items()]
    model = helper.make_model(helper.make_graph(nodes, "g", ins, outs), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = planted.IR_VERSION
    onnx.save(model, str(tmp_path / "dyn.onnx"))
    return load_model(tmp_path / "dyn.onnx")


def test_one_sample_is_bounded_in_bytes(tmp_path):
    """Two dynamic float64 inputs of 2**24 rows of 16 each: every array within the element limit and 2 GiB, 4 GiB
    together; an HDF5 of a few KB (nothing written) is refused by its datasets' shapes alone."""
    model = _dynamic(tmp_path, {"a": TensorProto.DOUBLE, "b": TensorProto.DOUBLE})
    with h5py.File(tmp_path / "big.h5", "w") as f:
        for n in "ab":
            f.create_dataset(n, shape=(2**24, 16), dtype="f8")  # 2**28 elements, 2 GiB: each within its limits
    assert (tmp_path / "big.h5").stat().st_size < 8192
    with pytest.raises(UserError, match=r"big.h5: one sample's arrays declare 4,294,967,296 bytes together, more than "
                       r"the 2 GiB one sample may hold; refused before reading it"):
        load_samples([tmp_path / "big.h5"], model=model)
    assert MAX_SAMPLE_BYTES == 2**31


def test_a_file_and_a_run_are_bounded_in_bytes(tmp_path):
    """Headers alone (no data): one file declaring 256 GiB is refused by its header; 17 files of 64 GiB each (each within
    a file's limit, 2**14 samples of 4 MiB) pass the run's 1 TiB at the 17th, which is named."""
    model = _dynamic(tmp_path, {"x": TensorProto.FLOAT})
    npz_bomb(tmp_path / "huge.npz", shape=(2**22, 2**10, 16), data=False)  # 2**22 samples of [1024, 16]: 256 GiB
    with pytest.raises(UserError, match=r"huge.npz: array 'x' declares shape \[4194304, 1024, 16\] of float32 "
                       r"\(274,877,906,944 bytes\), more than the 64 GiB one file may hold"):
        load_samples([tmp_path / "huge.npz"], model=model)
    per_file = MAX_FILE_BYTES // (65536 * 16 * 4)  # samples of [65536, 16] float32 (4 MiB) in 64 GiB: 2**14
    names = []
    for i in range(MAX_RUN_BYTES // MAX_FILE_BYTES + 1):
        names.append(tmp_path / f"part{i:02d}.npz")
        npz_bomb(names[-1], shape=(per_file, 65536, 16), data=False)
    with pytest.raises(UserError, match=r"part16.npz brings what the run's samples declare to 1,168,231,104,512 bytes, "
                       r"more than the 1 TiB one run may read"):
        load_samples(names, model=model)


def test_a_large_real_calibration_set_is_within_the_limits(tmp_path):
    """The limits bound what a header declares, not real data: 3,000 images of [1, 3, 1024, 1024] float32 (12 MiB each,
    35 GiB in all) as a directory of files, and 16 files of 5,000 such images each (60 GiB a file, 938 GiB in all),
    are listed within them (headers only here: reading is a sample at a time, data/samples.py)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 1024, 1024])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 1024, 1024])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = planted.IR_VERSION
    onnx.save(m, str(tmp_path / "image.onnx"))
    model = load_model(tmp_path / "image.onnx")
    (tmp_path / "dir").mkdir()
    for i in range(3000):
        npz_bomb(tmp_path / "dir" / f"img{i:04d}.npz", shape=(1, 3, 1024, 1024), data=False)
    bounds = input_bounds(model)
    assert len(load_samples([tmp_path / "dir"], bounds, model)) == 3000
    assert bounds.budget.nbytes == 3000 * 12 * 2**20
    for i in range(16):
        npz_bomb(tmp_path / f"stack{i:02d}.npz", shape=(5000, 1, 3, 1024, 1024), data=False)
    bounds = input_bounds(model)
    assert len(load_samples(sorted(tmp_path.glob("stack*.npz")), bounds, model)) == 80_000
    assert bounds.budget.nbytes == 80_000 * 12 * 2**20


def test_a_leading_dimension_of_zero_or_below_names_the_file(files, tmp_path):
    shutil.copy(files / "good.onnx", tmp_path)
    npz_bomb(tmp_path / "zero.npz", shape=(0, 2, 16))
    npz_bomb(tmp_path / "negative.npz", shape=(-3, 2, 16), data=False)
    npz_bomb(tmp_path / "concat.npz", shape=(0, 16))  # the model's rank: concatenated along its batch of 2
    line = bounded("compare", "good.onnx", "--inputs", "zero.npz", cwd=tmp_path).line()
    assert "zero.npz: array 'x' has shape [0, 2, 16]: its first axis holds no samples" in line, line
    line = bounded("compare", "good.onnx", "--inputs", "negative.npz", cwd=tmp_path).line()
    assert "negative.npz: array 'x' declares shape [-3, 2, 16], with a negative dimension" in line, line
    bounds = input_bounds(load_model(tmp_path / "good.onnx"))
    with pytest.raises(UserError, match=r"concat.npz: array 'x' has shape \[0, 16\]: its first axis holds no samples"):
        load_samples([tmp_path / "concat.npz"], bounds, load_model(tmp_path / "good.onnx"))


# -- the samples of a run: a bounded number, a few bytes each ------------------------------------------------------


def test_a_run_holds_a_bounded_number_of_samples(files):
    """The tester's 8 files of 347 bytes... here 130 KB (deflate, not bzip2), each declaring 2**20 samples: 2.6 GB
    before; refused at the second, by the run's limit, before any sample is read."""
    ran = bounded("compare", "good.onnx", *[a for i in range(8) for a in ("--inputs", f"m{i}.npz")], "--out", "run",
                  cwd=files)
    line = ran.line()
    assert f"m1.npz brings the run's samples to 2,097,152, more than the {MAX_RUN_SAMPLES:,} one run may hold" in line
    assert ran.peak_mb < PEAK_MB, f"peak RSS {ran.peak_mb} MiB"


def test_a_million_samples_in_one_file_still_run_and_cost_little(files):
    """A legitimate file of 2**20 samples (at the limit) with --max-samples 4: the run finishes within the address space
    (the per-sample objects of before took 300 MB), the four chosen samples read from the deflated member."""
    ran = bounded("compare", "good.onnx", "--inputs", "m0.npz", "--max-samples", "4", "--out", "run", cwd=files)
    assert ran.code in (0, 1), ran.stderr[-2000:]
    assert ran.peak_mb < PEAK_MB, f"peak RSS {ran.peak_mb} MiB"
    tracemalloc.start()
    try:
        samples = load_samples([files / "m0.npz"], model=load_model(files / "good.onnx"))
        held, _ = tracemalloc.get_traced_memory()
        groups = samples.groups()
        picked = samples.subset(range(0, len(samples), 4096))
        label = picked.label(255)
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(samples) == 2**20 and len(groups) == 1 and len(picked) == 256
    assert label.endswith("m0.npz (sample 1044480)")
    assert held < 1 << 20, f"{held >> 10} KiB held for 2**20 samples before any is read"
    assert peak < 64 << 20, f"{peak >> 20} MiB at the peak of listing the groups"
    assert picked[3]["x"].shape == (2, 16) and samples[5]["x"].shape == (2, 16)


def test_search_and_held_out_files_share_the_run_budget(files, tmp_path):
    model = load_model(files / "good.onnx")
    bounds = input_bounds(model)  # one run's: load_workload passes it to the held-out files' load too
    assert len(load_samples([files / "m0.npz"], bounds, model)) == MAX_RUN_SAMPLES
    np.savez(tmp_path / "ok.npz", x=np.zeros((2, 16), np.float32))
    with pytest.raises(UserError, match=r"inputs file .*ok.npz brings the run's samples to 1,048,577"):
        load_samples([tmp_path / "ok.npz"], bounds, model)
    assert len(load_samples([tmp_path / "ok.npz"], input_bounds(model), model)) == 1  # another run: its own budget


def test_globs_refuse_parent_steps_after_a_wildcard_and_read_each_file_once(files, tmp_path):
    (tmp_path / "d" / "e").mkdir(parents=True)
    np.savez(tmp_path / "d" / "s0.npz", x=np.zeros((2, 16), np.float32))
    (tmp_path / "d" / "link.npz").symlink_to(tmp_path / "d" / "s0.npz")
    shutil.copy(files / "good.onnx", tmp_path)
    with pytest.raises(SpecError, match=r"a pattern may not hold '\.\.' after a wildcard") as err:
        load_samples([str(tmp_path / "d") + "/*/.." * 6 + "/s0.npz"])
    assert err.value.setting == "inputs.files"
    assert [s.source for s in load_samples([str(tmp_path / "d" / "*.npz")])] == [str(tmp_path / "d" / "link.npz")]
    assert len(load_samples([str(tmp_path / "d" / ".." / "d" / "s*.npz")])) == 1  # '..' before a wildcard: a path
    line = bounded("compare", "good.onnx", "--inputs", "d/*/../s0.npz", cwd=tmp_path).line()
    assert "--inputs d/*/../s0.npz: a pattern may not hold '..' after a wildcard" in line, line


# -- a loader script that exits, a tolerance that overflows ----------------------------------------------------------

SCRIPTS = {
    "exit0.py": ("import sys\ndef load_data():\n    sys.exit(0)\n", "raised SystemExit: sys.exit(0) (line 3)"),
    "exit_import.py": ("import sys\nsys.exit(3)\n", "raised SystemExit: sys.exit(3) (line 2) when imported"),
    "exit_later.py": ("import numpy as np\ndef load_data():\n    yield {'x': np.zeros((2, 16), np.float32)}\n"
                      "    raise SystemExit('done')\n", "raised SystemExit: sys.exit('done') (line 4) while yielding sample 1"),
    "bad_str.py": ("class Odd(Exception):\n    def __str__(self):\n        raise RuntimeError('no words')\n"
                   "def load_data():\n    raise Odd()\n", "raised Odd (line 5)"),
    "bad_items.py": ("class Feed(dict):\n    def items(self):\n        raise SystemExit(4)\n"
                     "def load_data():\n    return [Feed(x=1)]\n", "sample 0: its items raised SystemExit: sys.exit(4) (line 3)"),
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_a_loader_script_that_exits_is_one_line(files, tmp_path, script):
    """`sys.exit(0)` in load_data made diagnose exit 0 with no output and no report; now exit 2, one line naming it."""
    text, words = SCRIPTS[script]
    (tmp_path / script).write_text(text)
    shutil.copy(files / "good.onnx", tmp_path)
    proc = subprocess.run([sys.executable, "-m", "precision_doctor", "diagnose", "good.onnx", "--data-loader-script",
                           script, "--atol", "1e-2", "--rtol", "1e-2", "--out", "run"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **ONE_THREAD})
    line = Ran(proc.returncode, proc.stderr, 0).line()
    assert f"data loader script {script}:load_data " in line and words in line, line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args, words", [
    (["--atol", "1e308"], "--atol must be at most 1e+300, got 1e+308"),
    (["--rtol", "1e301"], "--rtol must be at most 1e+300, got 1e+301"),
    (["--atol", "1e-3", "--atol", "post_out:1e305"], "--atol post_out:1e+305 must be at most 1e+300"),
])
def test_a_tolerance_that_would_overflow_is_refused_before_the_run(files, tmp_path, args, words):
    """`--atol 1e308` ran the whole diagnosis, then the trade-off's 4x made it inf (exit 2 at the end, "got inf")."""
    shutil.copy(files / "good.onnx", tmp_path)
    proc = subprocess.run([sys.executable, "-m", "precision_doctor", "diagnose", "good.onnx", "--samples", "2", *args,
                           "--out", "run"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **ONE_THREAD})
    line = Ran(proc.returncode, proc.stderr, 0).line()
    assert words in line and proc.stderr.strip() == line, proc.stderr  # refused before the run: no progress line
    assert not (tmp_path / "run").exists()


def test_the_largest_tolerance_runs_to_the_end(files, tmp_path):
    shutil.copy(files / "good.onnx", tmp_path)
    proc = subprocess.run([sys.executable, "-m", "precision_doctor", "diagnose", "good.onnx", "--samples", "2",
                           "--atol", "1e300", "--rtol", "1e300", "--augment", "0", "--out", "run"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={**os.environ, **ONE_THREAD})
    assert proc.returncode == 0 and (tmp_path / "run" / "report.json").is_file(), proc.stderr[-2000:]


# -- every emitted command carries every dynamic input, or refuses the name ------------------------------------------

STUB = """#!/usr/bin/env bash
printf '%s\\0' "$(basename "$0")" "$@" > "$ARGV_DIR/$(date +%s%N).$$"
"""


def _stubbed(tmp_path: Path, script: Path) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """Run `script` with stub trtexec and polygraphy on PATH that record their arguments."""
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    bindir, argv = tmp_path / "bin", tmp_path / "argv"
    bindir.mkdir(exist_ok=True)
    argv.mkdir(exist_ok=True)
    for f in argv.iterdir():
        f.unlink()
    for name in ("trtexec", "polygraphy"):
        (bindir / name).write_text(STUB)
        (bindir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "ARGV_DIR": str(argv), "TRT_MAJOR": "11"}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    return proc, [f.read_bytes().decode().split("\0")[:-1] for f in sorted(argv.iterdir())]


def _shape(name: str) -> InputShape:
    return InputShape(name, (None, 16), (1, 16), (2, 16), (4, 16))


def test_a_dynamic_input_trtexec_cannot_name_refuses_its_commands(tmp_path):
    """A dynamic input named with `'` was left out of trtexec.sh's --shapes without a word; now every trtexec command
    says it is not possible, and the script exits 2 with that line, while polygraphy's carry the input."""
    o = EmitOptions("fp16", shapes=[_shape("img"), _shape("it's")])
    for cmd in (commands.trtexec_trt10("model.onnx", ["a"], o), commands.trtexec_trt11("fixed.onnx", o)):
        assert cmd.startswith("# Not possible: trtexec cannot be given the shape of the dynamic input \"it's\""), cmd
    script = tmp_path / "trtexec.sh"
    script.write_text(commands.trtexec_script("model.onnx", "fixed.onnx", ["a"], o))
    proc, calls = _stubbed(tmp_path, script)
    assert proc.returncode == 2 and not calls and "trtexec cannot be given the shape" in proc.stderr, proc.stderr
    poly = shlex.split(commands.polygraphy_verify("fixed.onnx", o))
    assert poly[poly.index("--trt-opt-shapes") + 1: poly.index("--trt-opt-shapes") + 3] == ["img:[2,16]", "it's:[2,16]"]
    rtx = tmp_path / "tensorrt_rtx.sh"
    rtx.write_text(commands.tensorrt_rtx_script("fixed.onnx", o))
    proc, calls = _stubbed(tmp_path, rtx)
    assert proc.returncode == 0 and calls[0][calls[0].index("--trt-max-shapes") + 2] == "it's:[4,16]", calls


def test_a_dynamic_input_polygraphy_cannot_name_refuses_its_commands(tmp_path):
    o = EmitOptions("fp16", shapes=[_shape("-x")])
    for cmd in (commands.polygraphy_verify("fixed.onnx", o), commands.polygraphy_trt10("model.onnx", ["a"], o)):
        assert cmd.startswith("# Not possible: polygraphy cannot be given the shape of the dynamic input '-x'"), cmd
    rtx = tmp_path / "tensorrt_rtx.sh"
    rtx.write_text(commands.tensorrt_rtx_script("fixed.onnx", o))
    proc, calls = _stubbed(tmp_path, rtx)
    assert proc.returncode == 2 and not calls and "polygraphy cannot be given" in proc.stderr, proc.stderr
    script = tmp_path / "trtexec.sh"
    script.write_text(commands.trtexec_script("model.onnx", "fixed.onnx", ["a"], o))
    proc, calls = _stubbed(tmp_path, script)
    assert proc.returncode == 0 and "--shapes=-x:2x16" in calls[0], calls
    with pytest.raises(ValueError, match="not possible|Not possible"):
        commands.trtexec_shape_args([_shape("a'b")])


def test_a_diagnosed_model_with_such_an_input_says_so_in_its_scripts(tmp_path):
    """End to end: a model whose dynamic input is named "it's": trtexec.sh refuses, the report's commands say why."""
    g = planted.cancellation().model
    old = g.graph.input[0].name
    g.graph.input[0].name = "it's"
    g.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    for n in g.graph.node:
        n.input[:] = ["it's" if i == old else i for i in n.input]
    del g.graph.value_info[:]
    onnx.save(g, str(tmp_path / "quote.onnx"))
    proc = subprocess.run([sys.executable, "-m", "precision_doctor", "diagnose", "quote.onnx", "--samples", "2",
                           "--atol", "1e-2", "--rtol", "1e-2", "--augment", "0", "--out", "run"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={**os.environ, **ONE_THREAD})
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = (tmp_path / "run" / "trtexec.sh").read_text()
    assert "# Not possible: trtexec cannot be given the shape of the dynamic input \"it's\"" in text
    ran, calls = _stubbed(tmp_path, tmp_path / "run" / "trtexec.sh")
    assert ran.returncode == 2 and not calls
    assert shlex.quote("it's:[1,16]") in (tmp_path / "run" / "report.md").read_text()


def test_no_two_threads_parse_an_npy_header_at_once(tmp_path, monkeypatch):
    """NumPy parses .npy headers with ast.literal_eval, which CPython 3.11 cannot run in two threads at once (a
    service's thread workers failed a job with "SystemError: AST constructor recursion depth mismatch"): while one
    header is parsed, another thread cannot take the lock every header parse and array read goes through."""
    import threading

    import numpy.lib.format as npy

    from precision_doctor.data import arrayfiles
    from precision_doctor.data.arrayfiles import NPY_HEADERS, read_npz

    path = tmp_path / "s.npz"
    np.savez(path, x=np.zeros((2, 3), np.float32), y=np.ones(4, np.float32))
    others_could: list[bool] = []
    real = npy.read_array_header_1_0

    def parse(f, *a, **k):
        got: list[bool] = []
        t = threading.Thread(target=lambda: got.append(NPY_HEADERS.acquire(blocking=False)))
        t.start()
        t.join()
        if got[0]:
            NPY_HEADERS.release()
        others_could.append(got[0])
        return real(f, *a, **k)

    monkeypatch.setattr(npy, "read_array_header_1_0", parse)
    out = read_npz(path, arrayfiles.Bounds())
    assert sorted(out) == ["x", "y"] and others_could and not any(others_could), others_could
