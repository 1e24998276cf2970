"""Issue 19, the file and CLI side: sample files are data (never references, bounded before they are read),
names from a model never run as shell commands, files the tool did not write are never replaced, a full disk
is one line and a resumable run, and bad numbers, JSON, checkpoints and settings are one-line refusals.

Each test is a reproducer of what the issue's tester did; the bad-input replay (tests/badinputs) runs the
same files through the CLI as a user would."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import onnx
import pytest
from evil_files import INJECTED, evil_h5, h5_bomb, injected_model, non_utf8_model, npz_bomb

from precision_doctor import planted, storage
from precision_doctor.cli.shared import PROGRESS_LINE
from precision_doctor.data.activations import ActivationStore
from precision_doctor.data.inputs import input_bounds, load_samples, parse_input_shapes
from precision_doctor.errors import SpecError, UserError
from precision_doctor.graph.model import load_model
from precision_doctor.results import commands, emit
from precision_doctor.results.commands import EmitOptions

ROOT = Path(__file__).resolve().parents[2]
TOL = ["--atol", "1e-2", "--rtol", "1e-2"]


def cli(*args, cwd: Path, preexec=None, prelude: str = "") -> subprocess.CompletedProcess:
    """The CLI in a fresh process (`prelude`: Python run before `main()`, e.g. a smaller disk reserve)."""
    code = f"import sys\n{prelude}\nfrom precision_doctor.cli import main\nsys.argv = ['precision-doctor', *sys.argv[1:]]\nmain()"
    env = {**os.environ, "PRECISION_DOCTOR_ORT_THREADS": "1", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env, preexec_fn=preexec, check=False)


def one_line(proc: subprocess.CompletedProcess) -> str:
    """The one line of a refusal (stderr is not a terminal here: the run's progress lines before it do not count)."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not PROGRESS_LINE.match(ln)]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return lines[0]


@pytest.fixture
def good(tmp_path) -> Path:
    path = tmp_path / "good.onnx"
    onnx.save(planted.cancellation().model, str(path))  # x: float32 [2, 16]
    return path


# -- 1. sample files are data -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["external_storage", "external_link", "virtual", "soft_link"])
def test_h5_sample_that_reads_another_file_is_refused(tmp_path, good, kind):
    path = evil_h5(tmp_path)[kind]
    with pytest.raises(UserError) as err:
        load_samples([path], input_bounds(load_model(good)))
    msg = str(err.value)
    assert path.name in msg and "'x'" in msg and "hold its data itself" in msg
    assert "root:" not in msg


def test_h5_plain_dataset_still_reads(tmp_path, good):
    with h5py.File(tmp_path / "ok.h5", "w") as f:
        f["x"] = np.arange(32, dtype=np.float32).reshape(2, 16)
    (s,) = load_samples([tmp_path / "ok.h5"], input_bounds(load_model(good)))
    assert s["x"].shape == (2, 16) and float(s["x"][1, 15]) == 31.0


def test_h5_filter_needing_a_plugin_is_refused(tmp_path, good):
    with h5py.File(tmp_path / "bz.h5", "w") as f:  # a registered third-party filter id, not built into HDF5
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((1, 16))
        dcpl.set_filter(307, h5py.h5z.FLAG_OPTIONAL, ())  # bzip2's id: optional, so HDF5 writes without it
        space = h5py.h5s.create_simple((2, 16))
        h5py.h5d.create(f.id, b"x", h5py.h5t.NATIVE_FLOAT, space, dcpl=dcpl)
    with pytest.raises(UserError, match="filter 307, which needs a plugin"):
        load_samples([tmp_path / "bz.h5"], input_bounds(load_model(good)))


_PEAK = """
import resource, sys
from precision_doctor.data.inputs import input_bounds, load_samples
from precision_doctor.errors import UserError
from precision_doctor.graph.model import load_model
bounds = input_bounds(load_model(sys.argv[1]))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    load_samples([sys.argv[2]], bounds)
    print("READ")
except UserError as exc:
    print("REFUSED", exc)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


@pytest.mark.parametrize("kind", ["h5", "npz"])
def test_allocation_bomb_is_refused_before_reading(tmp_path, good, kind):
    """The tester's 1,400-byte .h5 declaring 2 GiB; an .npz inflating 1 MB to 256 MiB (the replay has the 2 GiB
    one): refused by their headers, with the process's peak memory unchanged (measured in a fresh process)."""
    if kind == "h5":
        path = h5_bomb(tmp_path / "bomb.h5")
        assert path.stat().st_size < 4096
    else:
        path = npz_bomb(tmp_path / "bomb.npz", elements=2**26)
        assert path.stat().st_size < 2 << 20
    proc = subprocess.run([sys.executable, "-c", _PEAK, str(good), str(path)], capture_output=True, text=True,
                          timeout=120, check=True)
    status, grew_kib = proc.stdout.splitlines()
    assert status.startswith("REFUSED") and "refused before reading it" in status and "holds 32" in status, status
    assert int(grew_kib) < 32 * 1024, f"peak memory grew by {int(grew_kib) >> 10} MiB"


def test_dynamic_input_bounded_by_the_stated_maximum(tmp_path):
    g = planted.cancellation().model
    g.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    del g.graph.value_info[:]
    onnx.save(g, str(tmp_path / "dyn.onnx"))
    model = load_model(tmp_path / "dyn.onnx")
    with pytest.raises(UserError, match=r"2\*\*28 = 268,435,456 elements"):
        load_samples([h5_bomb(tmp_path / "bomb.h5")], input_bounds(model))
    np.savez(tmp_path / "ok.npz", x=np.zeros((5, 16), np.float32))  # any N up to the maximum reads
    assert load_samples([tmp_path / "ok.npz"], input_bounds(model))[0]["x"].shape == (5, 16)


def test_nothing_is_unpickled(tmp_path, good):
    """Object arrays (a pickle inside the .npy) are refused from their header, in .npz files and in polygraphy
    JSON payloads; a member that is no .npy (numpy would hand over its raw bytes) is refused too."""
    import base64
    import io

    bounds = input_bounds(load_model(good))
    np.savez(tmp_path / "obj.npz", x=np.array([{"a": 1}, None], dtype=object))
    with pytest.raises(UserError, match="Python objects"):
        load_samples([tmp_path / "obj.npz"], bounds)
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    payload = {"array": base64.b64encode(buf.getvalue()).decode(), "polygraphy_class": "ndarray"}
    (tmp_path / "obj.json").write_text(json.dumps([{"x": payload}]))
    with pytest.raises(UserError, match="Python objects"):
        load_samples([tmp_path / "obj.json"], bounds)
    import zipfile

    with zipfile.ZipFile(tmp_path / "raw.npz", "w") as z:
        z.writestr("x.npy", b"not an array" * 100)
    with pytest.raises(UserError, match="not a readable .npy array"):
        load_samples([tmp_path / "raw.npz"], bounds)


def test_polygraphy_json_payloads_are_bounded(tmp_path, good):
    """A .npy payload must hold the bytes its header declares; an old-style .npz payload is checked by its
    member's header; a torch payload is refused (polygraphy would torch.load it)."""
    import base64
    import io

    bounds = input_bounds(load_model(good))
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f4", "fortran_order": False, "shape": (2, 16)})
    short = {"array": base64.b64encode(head.getvalue() + bytes(16)).decode(), "polygraphy_class": "ndarray"}
    (tmp_path / "short.json").write_text(json.dumps([{"x": short}]))
    with pytest.raises(UserError, match="payload holds 16 bytes"):
        load_samples([tmp_path / "short.json"], bounds)
    bomb = npz_bomb(tmp_path / "bomb.npz", elements=2**22).read_bytes()
    (tmp_path / "bomb.json").write_text(json.dumps([{"x": {"array": base64.b64encode(bomb).decode(),
                                                           "polygraphy_class": "ndarray"}}]))
    with pytest.raises(UserError, match="model's largest input holds 32"):
        load_samples([tmp_path / "bomb.json"], bounds)
    (tmp_path / "torch.json").write_text(json.dumps([{"x": {"tensor": "AA==", "polygraphy_class": "Tensor"}}]))
    with pytest.raises(UserError, match="torch tensor"):
        load_samples([tmp_path / "torch.json"], bounds)


@pytest.mark.parametrize("dims", ["x:[4000000000,16]", "x:[99999999999999999999,16]"])
def test_input_shapes_beyond_the_maximum_are_refused(dims):
    with pytest.raises(SpecError, match=r"more than the limit of 2\*\*28") as err:
        parse_input_shapes([dims])
    assert err.value.setting == "inputs.input_shapes"


# -- 2. names are untrusted text ----------------------------------------------------------------------

STUB = """#!/usr/bin/env bash
f="$ARGV_DIR/$(date +%s%N).$$"
printf '%s\\0' "$(basename "$0")" "$@" > "$f"
"""


@pytest.fixture
def stubs(tmp_path):
    """`trtexec` and `polygraphy` that record their argv (NUL-separated, so any byte survives) and do nothing."""
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    bindir, argv_dir = tmp_path / "stubbin", tmp_path / "argv"
    bindir.mkdir()
    argv_dir.mkdir()
    for name in ("trtexec", "polygraphy"):
        (bindir / name).write_text(STUB)
        (bindir / name).chmod(0o755)

    def run(script: Path, **env) -> list[list[str]]:
        for f in argv_dir.iterdir():
            f.unlink()
        subprocess.run(["bash", "-n", str(script)], check=True)
        full = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "ARGV_DIR": str(argv_dir), **env}
        res = subprocess.run(["bash", str(script)], env=full, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        return [f.read_bytes().decode().split("\0")[:-1] for f in sorted(argv_dir.iterdir())]

    return run


@pytest.fixture(scope="module")
def injected_run(tmp_path_factory):
    """A finished diagnosis of the tester's model (forced-FP32 Max named "maxnode\\ntouch MARKER #")."""
    root = tmp_path_factory.mktemp("injected")
    marker = root / "PWNED"
    onnx.save(injected_model(marker), str(root / "evil.onnx"))
    proc = cli("diagnose", "evil.onnx", "--samples", "2", *TOL, "--augment", "0", "--out", "run", cwd=root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root, marker, proc


def test_injected_node_name_is_renamed_with_a_warning(injected_run):
    root, marker, proc = injected_run
    warning = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warning) == 1 and "Max_5 (was 'maxnode\\ntouch" in warning[0], proc.stderr
    report = json.loads((root / "run" / "report.json").read_text())
    assert report["model"]["unsafe_names"] == {"Max_5": INJECTED.format(marker=marker).replace("\n", "\\n")}
    assert "Max_5" in report["answer"]["forced_fp32_nodes"]
    assert "named.onnx" in report["answer"]["artifacts"].values()
    md = (root / "run" / "report.md").read_text()
    assert "was renamed (shown escaped): `Max_5` (was `maxnode\\ntouch" in md
    for name in ("trtexec.sh", "tensorrt_rtx.sh", "layer_precisions.txt", "autocast_nodes_to_exclude.txt"):
        text = (root / "run" / name).read_text()
        assert "touch" not in text and "maxnode" not in text, name


def test_injected_node_name_never_runs(injected_run, stubs):
    """trtexec.sh (TensorRT 10 weak and strongly typed, TensorRT 11) and tensorrt_rtx.sh run for real with stub
    tools on PATH: the injected `touch` never runs, and the renamed node is the argument TensorRT gets."""
    root, marker, _ = injected_run
    calls = []
    for env in ({"TRT_MAJOR": "10"}, {"TRT_MAJOR": "10", "PD_STRONGLY_TYPED": "1"}, {"TRT_MAJOR": "11"}):
        calls += stubs(root / "run" / "trtexec.sh", **env)
    calls += stubs(root / "run" / "tensorrt_rtx.sh")
    assert not marker.exists()
    weak = calls[0]
    assert weak[0] == "trtexec" and "--onnx=named.onnx" in weak
    assert any(a.startswith("--layerPrecisions=") and "Max_5:fp32" in a for a in weak), weak
    assert [c[0] for c in calls] == ["trtexec", "trtexec", "trtexec", "polygraphy"]
    assert onnx.load(str(root / "run" / "named.onnx")).graph.node[-1].name == "Max_5"


HOSTILE = ["a$(touch {m})b", "b`touch {m}`c", "c;touch {m};d", 'd"e $HOME f', "e\\f", "g&&touch {m}", "-h", "i j",
           "/blk/k:v", "ñ"]


def test_hostile_names_stay_one_argument(tmp_path, stubs):
    """Names that need quoting but no renaming (no control characters) reach trtexec and polygraphy as one
    argument each, unchanged; a forced node whose name has a line break stays inside its comment."""
    m = tmp_path / "M"
    names = [n.format(m=m) for n in HOSTILE]
    forced = {"forced\ntouch " + str(m): "Max: no FP16/BF16 kernel in ONNX Runtime"}
    script = tmp_path / "trtexec.sh"
    script.write_text(commands.trtexec_script("my model.onnx", "fixed.onnx", names, EmitOptions("fp16", forced=forced)))
    (weak,) = stubs(script, TRT_MAJOR="10")
    (strong,) = stubs(script, TRT_MAJOR="11")
    assert not m.exists()
    spec = ",".join(f"{n}:fp32" for n in names)  # the forced name (a line break) is not expressible: left out
    assert weak[:3] == ["trtexec", "--onnx=my model.onnx", "--fp16"] and f"--layerPrecisions={spec}" in weak
    assert strong[:2] == ["trtexec", "--onnx=fixed.onnx"]
    shapes = {names[0]: [1, 16]}
    rtx = tmp_path / "tensorrt_rtx.sh"
    rtx.write_text(commands.tensorrt_rtx_script("fixed.onnx", EmitOptions(compute_capabilities=["8.6", f"$(touch {m})"],
                                                                          forced=forced), input_shapes=shapes))
    (conv,) = stubs(rtx)
    assert not m.exists()
    assert conv[conv.index("--input-shapes") + 1] == f"{names[0]}:[1,16]"
    ccs = conv[conv.index("--compute-capabilities") + 1: conv.index("--trt-config-postprocess-script")]
    assert ccs == ["8.6", "$(touch", f"{m})"]  # words of a quoted default, never a command substitution
    listed = emit.name_list([*names, *forced])
    assert listed.count("\n") == len(names) + 1 and "forced\\ntouch" in listed


def test_non_utf8_node_name_is_renamed_and_tensor_name_refused(tmp_path):
    (tmp_path / "node.onnx").write_bytes(non_utf8_model(node=True))
    model = load_model(tmp_path / "node.onnx")
    assert list(model.unsafe_names) == ["Tanh_1"] and model.unsafe_names["Tanh_1"].startswith("bad\\xff\\xfe\\x00name")
    assert all(isinstance(n.name, str) for n in model.nodes)
    (tmp_path / "tensor.onnx").write_bytes(non_utf8_model(node=False))
    with pytest.raises(UserError, match=r"tensor name of node 'pre_tanh' is not valid UTF-8 text \(bad\\xff"):
        load_model(tmp_path / "tensor.onnx")


# -- 3. files the tool did not write are never replaced -----------------------------------------------


def test_report_never_replaces_the_users_reports(injected_run, tmp_path):
    root, _, _ = injected_run
    folder = tmp_path / "mine"
    folder.mkdir()
    shutil.copy(root / "run" / "report.json", folder)
    (folder / "report.md").write_text("# my notes\n")
    (folder / "report.html").write_text("<p>mine</p>\n")
    line = one_line(cli("report", folder, cwd=tmp_path))
    assert "report.md, report.html would be replaced" in line and "--out" not in line
    assert (folder / "report.md").read_text() == "# my notes\n" and (folder / "report.html").read_text() == "<p>mine</p>\n"
    (folder / "report.md").unlink()
    (folder / "report.html").unlink()
    proc = cli("report", folder, cwd=tmp_path)  # nothing of the user's in the way: written, and from now on ours
    assert proc.returncode == 0, proc.stderr
    assert (folder / "report.md").is_file() and cli("report", folder, cwd=tmp_path).returncode == 0


def test_engine_never_replaces_a_plan_it_did_not_write(injected_run, tmp_path):
    root, _, _ = injected_run
    run = tmp_path / "run"
    shutil.copytree(root / "run", run)
    (run / "fixed.plan").write_bytes(b"my engine")
    line = one_line(cli("emit", run, "--format", "engine", cwd=tmp_path))
    assert "fixed.plan would be replaced" in line and "--out" not in line
    assert (run / "fixed.plan").read_bytes() == b"my engine"


def test_report_artifact_names_stay_in_the_run_directory(injected_run, tmp_path):
    root, _, _ = injected_run
    run = tmp_path / "run"
    shutil.copytree(root / "run", run)
    data = json.loads((run / "report.json").read_text())
    data["answer"]["artifacts"]["report_md"] = "../escaped.md"
    (run / "report.json").write_text(json.dumps(data))
    assert "must be a file name in the run directory" in one_line(cli("report", run, cwd=tmp_path))
    assert not (tmp_path / "escaped.md").exists()


# -- 4. a full disk -----------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of a chosen size (root only: skipped elsewhere); `resize(size)` changes it in place."""
    mnt = tmp_path / "disk"
    mnt.mkdir()

    def mount(size: str, *more: str) -> None:
        subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([*more, f"size={size}"]), "tmpfs", str(mnt)],
                       check=True, capture_output=True)

    mounted = []

    def make(size: str) -> Path:
        try:
            mount(size)
        except (subprocess.CalledProcessError, FileNotFoundError, PermissionError) as exc:
            pytest.skip(f"cannot mount a tmpfs here ({exc})")
        mounted.append(mnt)
        return mnt

    def resize(size: str) -> None:
        mount(size, "remount")

    yield make, resize
    for m in mounted:
        subprocess.run(["umount", str(m)], check=False)


def _deep(tmp_path: Path, depth: int = 120) -> Path:
    onnx.save(planted.deep_stack_one_bad(depth=depth, bad=depth // 2).model, str(tmp_path / "deep.onnx"))
    return tmp_path / "deep.onnx"


def test_hdf5_failing_on_a_full_disk_is_one_line(tmp_path, small_disk):
    """The tester's case: the capture fills the disk and HDF5 fails (the reserve set to 0 here, and the free space
    said to be plenty when the capture is sized, as when another process takes the space once it has started):
    before, 40,877 stderr lines of h5py tracebacks, then SIGSEGV (exit 139)."""
    make, _ = small_disk
    disk = make("300k")
    model = _deep(tmp_path)
    proc = cli("compare", model, "--samples", "8", "--out", disk / "run", cwd=tmp_path,
               prelude="from precision_doctor import storage; storage.RESERVE_BYTES = 0; storage.free_space = lambda p: 1 << 40")
    line = one_line(proc)
    assert f"{disk / 'run'}: no space left on the device while writing .activations.h5.partial" in line
    assert not (disk / "run").exists()  # nothing to resume: the directory it created is gone


@pytest.mark.slow
def test_disk_full_during_the_run_leaves_it_resumable(tmp_path, small_disk):
    """With --keep-activations all the capture fits, adding the fixed run (a copy of activations.h5) does not: one
    line saying how to continue; with room again, --resume finishes without repeating an evaluation. (Sized before
    it starts, such a run is refused, the copy counted: the sizing is told there is room, as if another process
    had freed it.)"""
    make, resize = small_disk
    model = _deep(tmp_path, depth=24)
    args = ["diagnose", model, "--samples", "8", *TOL]
    assert cli(*args, "--keep-activations", "all", "--out", tmp_path / "sized", cwd=tmp_path).returncode == 0
    size = (tmp_path / "sized" / "activations.h5").stat().st_size
    disk = make(str(storage.RESERVE_BYTES + size + size // 2))
    sized_wrong = "from precision_doctor.pipeline import capture_size; capture_size.check_room = lambda size, out: 1 << 40"
    line = one_line(cli(*args, "--keep-activations", "all", "--out", disk / "run", cwd=tmp_path, prelude=sized_wrong))
    assert "no space left on the device" in line and "--resume --out" in line, line
    evaluations = (disk / "run" / "search.jsonl").read_text().count("\n")
    resize("64m")
    proc = cli("diagnose", model, "--resume", "--out", disk / "run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (disk / "run" / "search.jsonl").read_text().count("\n") == evaluations
    assert json.loads((disk / "run" / "report.json").read_text())["passed"]


def test_file_size_limit_is_one_line(tmp_path, good):
    """RLIMIT_FSIZE (ulimit -f; no root needed): the capture is refused before it starts; where the room is said to
    be plenty when it is sized (an estimate short of the truth), the activation store stops before HDF5 meets EFBIG."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 20, 4 << 20))

    line = one_line(cli("compare", good, "--samples", "2", "--out", tmp_path / "run", cwd=tmp_path, preexec=limit))
    assert "the file size limit (ulimit -f) allows 4.19 MB a file" in line and "raise the file size limit" in line
    sized_wrong = "from precision_doctor.pipeline import capture_size; capture_size.check_room = lambda size, out: 1 << 40"
    line = one_line(cli("compare", good, "--samples", "2", "--out", tmp_path / "run", cwd=tmp_path, preexec=limit,
                        prelude=sized_wrong))
    assert "the file size limit (ulimit -f) is reached" in line and "raise the file size limit" in line


def test_store_failure_is_one_error_and_the_file_is_abandoned(tmp_path, small_disk):
    """In-process: a failed HDF5 write raises DiskFull once; the file is never closed again (HDF5 2.0 crashes)."""
    make, _ = small_disk
    disk = make("200k")
    script = textwrap.dedent(f"""
        import os, sys, numpy as np
        from precision_doctor import storage
        from precision_doctor.data.activations import ActivationStore
        storage.RESERVE_BYTES = 0
        try:
            with ActivationStore({str(disk / 'a.h5')!r}, "w") as st:
                for i in range(5000):
                    st.write("reference", f"t{{i}}", 0, 2, np.random.rand(256).astype(np.float32))
        except storage.DiskFull as exc:
            print("DiskFull", exc.code, exc.file, len(storage.abandoned))
        sys.stdout.flush()
        os._exit(0)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]
    assert proc.stdout.split() == ["DiskFull", "28", "a.h5", "1"]


def test_disk_full_recognised_in_h5py_text():
    err = RuntimeError("Can't decrement id ref count (file write failed: time = x, filename = 'r/a.h5', "
                       "file descriptor = 7, errno = 28, error message = 'No space left on device')")
    assert storage.disk_full(err) == (28, "r/a.h5")
    wrapped = UserError("cannot write r/x.json")
    wrapped.__cause__ = OSError(122, "Disk quota exceeded", "r/x.json")
    assert storage.disk_full(wrapped) == (122, "r/x.json")
    assert storage.disk_full(ValueError("errno = 5")) is None


def test_activation_store_still_round_trips(tmp_path):
    with ActivationStore(tmp_path / "a.h5", "w") as st:
        st.set_attrs(samples=2)
        for i in range(2):
            st.write("reference", "t", i, 2, np.full(4, i, np.float32))
    with ActivationStore(tmp_path / "a.h5") as st:
        assert st.read("reference", "t").tolist() == [[0.0] * 4, [1.0] * 4]


# -- 5. wrong exits -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("finished")
    onnx.save(planted.cancellation().model, str(root / "good.onnx"))
    proc = cli("diagnose", "good.onnx", "--samples", "2", *TOL, "--augment", "0", "--out", "run", cwd=root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root


def _copy_interrupted(finished_run: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(finished_run / "run", run)
    shutil.copy(finished_run / "good.onnx", tmp_path / "good.onnx")
    (run / "report.json").unlink()  # as if cut off before its report
    return run


@pytest.mark.parametrize("record, why", [
    ('{"step": 1, "fallback": "add_offset", "passed": true}', "'fallback' is not a list of node names"),
    ('{"step": 1, "fallback": [], "passed": "yes"}', "'passed' is not true or false"),
    ('{"step": 1, "fallback": [], "passed": true, "outputs": {"y": {"passed": true, "max_abs": "x"}}}',
     "output 'y'"),
    ("[1, 2, 3]", "not a JSON object"),
])
def test_checkpoint_record_of_wrong_types_is_refused(finished_run, tmp_path, record, why):
    run = _copy_interrupted(finished_run, tmp_path)
    with (run / "search.jsonl").open("a") as f:
        f.write(record + "\n")
    line = one_line(cli("diagnose", "good.onnx", "--resume", "--out", "run", cwd=tmp_path))
    assert "search.jsonl line" in line and why in line, line


def test_checkpoint_that_is_a_directory_is_refused(finished_run, tmp_path):
    run = _copy_interrupted(finished_run, tmp_path)
    (run / "search.jsonl").unlink()
    (run / "search.jsonl").mkdir()
    line = one_line(cli("diagnose", "good.onnx", "--resume", "--out", "run", cwd=tmp_path))
    assert "search.jsonl is not a file" in line


@pytest.mark.parametrize("change, why", [
    (lambda d: {}, "lacks 'model_hash'"),
    (lambda d: {k: v for k, v in d.items() if k != "tolerance"}, "lacks 'tolerance'"),
    (lambda d: {**d, "samples": "2"}, "has a 'samples' of the wrong type"),
    (lambda d: {**d, "spec": {"model": 3}}, "holds a 'spec' that cannot be read"),
    (lambda d: [d], "is not a JSON object"),
])
def test_run_settings_that_cannot_be_trusted_are_refused(finished_run, tmp_path, change, why):
    """Never a silent re-diagnosis with default settings over the old report."""
    run = _copy_interrupted(finished_run, tmp_path)
    path = run / "run_settings.json"
    path.write_text(json.dumps(change(json.loads(path.read_text()))))
    before = path.read_text()
    line = one_line(cli("diagnose", "good.onnx", "--resume", "--out", "run", cwd=tmp_path))
    assert "run_settings.json" in line and why in line and "--force instead of --resume" in line, line
    assert path.read_text() == before and not (run / "report.json").exists()


@pytest.mark.parametrize("command", [["report"], ["emit"]])
def test_deeply_nested_report_json_is_refused(finished_run, tmp_path, command):
    run = tmp_path / "run"
    shutil.copytree(finished_run / "run", run)
    (run / "report.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert "nested too deeply" in one_line(cli(*command, run, cwd=tmp_path))


def test_out_on_a_symlink_loop_is_refused(good, tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    line = one_line(cli("compare", good, "--out", tmp_path / "a" / "sub", cwd=tmp_path))
    assert line.startswith("error: --out") and "symbolic links" in line
