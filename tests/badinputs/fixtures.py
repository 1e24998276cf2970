"""Files the replay's cases start from, built once per replay into one directory.

Every case copies the fixtures it names into its own directory, so no case can change another's.
Models are small (a planted-defect MLP and variants broken in one way each); input files are
real .npz/.json/.h5 files, broken in one way each.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import onnx
from evil_files import (
    evil_h5,
    h5_bomb,
    injected_model,
    million_samples_npz,
    non_utf8_model,
    npz_bomb,
    polygraphy_payload_json,
    wide_text_h5,
    wide_text_npz,
)
from onnx import TensorProto, helper, numpy_helper

from precision_doctor import planted

OPSET = planted.OPSET
IR = planted.IR_VERSION
GOOD_ARGS = ["--atol", "1e-2", "--rtol", "1e-2"]
GOOD_OUTPUT = "post_out"  # good.onnx's output  # the planted model's tolerance: a search of a few evaluations


def _model(nodes, inputs, outputs, inits=(), opsets=None, name: str = "g", ir: int = IR) -> onnx.ModelProto:
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=opsets or [helper.make_opsetid("", OPSET)], ir_version=ir)


def _vi(name: str, dims, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def _w(name: str, shape, seed: int = 0, dtype=np.float32) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(dtype), name)


def _cancel_nodes(x: str = "x") -> tuple[list, list]:
    """MatMul + Tanh + (x+4096-4096) + MatMul: the cancellation defect, 5 candidate nodes."""
    nodes = [
        helper.make_node("MatMul", [x, "w1"], ["h"], name="pre"),
        helper.make_node("Tanh", ["h"], ["t"], name="pre_tanh"),
        helper.make_node("Add", ["t", "off"], ["up"], name="add_offset"),
        helper.make_node("Sub", ["up", "off"], ["down"], name="sub_offset"),
        helper.make_node("MatMul", ["down", "w2"], ["y"], name="post"),
    ]
    inits = [_w("w1", (16, 16), 1), _w("w2", (16, 8), 2), numpy_helper.from_array(np.float32(4096.0), "off")]
    return nodes, inits


def models() -> dict[str, onnx.ModelProto]:
    """Every model fixture by file name."""
    out: dict[str, onnx.ModelProto] = {}
    out["good.onnx"] = planted.cancellation().model  # x [2,16] -> y; minimal set {add_offset, sub_offset}
    nodes, inits = _cancel_nodes()
    out["dyn.onnx"] = _model(nodes, [_vi("x", ["N", 16])], [_vi("y", ["N", 8])], inits)
    # The second dim is dynamic: generated as 1 (polygraphy's default), which the MatMul cannot take.
    out["dyn_fails.onnx"] = _model(nodes, [_vi("x", [1, "C"])], [_vi("y", [1, 8])], inits)
    custom = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="pre"),
        helper.make_node("Frob", ["h"], ["f"], name="frob", domain="com.example"),
        helper.make_node("Tanh", ["f"], ["y"], name="post_tanh"),
    ]
    out["custom_op.onnx"] = _model(
        custom, [_vi("x", [2, 16])], [_vi("y", [2, 16])], [_w("w1", (16, 16))],
        opsets=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.example", 1)],
    )
    out["opset99.onnx"] = _model(nodes, [_vi("x", [2, 16])], [_vi("y", [2, 8])], inits,
                                 opsets=[helper.make_opsetid("", 99)])
    out["ir99.onnx"] = _model(nodes, [_vi("x", [2, 16])], [_vi("y", [2, 8])], inits, ir=99)
    ints = [helper.make_node("Add", ["a", "b"], ["c"], name="add")]
    out["nofloat.onnx"] = _model(ints, [_vi("a", [2], TensorProto.INT64), _vi("b", [2], TensorProto.INT64)],
                                 [_vi("c", [2], TensorProto.INT64)])
    const = [
        helper.make_node("Constant", [], ["k"], name="k", value=numpy_helper.from_array(np.ones((2, 4), np.float32))),
        helper.make_node("Tanh", ["k"], ["y"], name="tanh"),
    ]
    out["noinputs.onnx"] = _model(const, [], [_vi("y", [2, 4])])
    strings = [helper.make_node("Cast", ["s"], ["f"], name="parse", to=TensorProto.FLOAT),
               helper.make_node("Tanh", ["f"], ["y"], name="tanh")]
    out["string_in.onnx"] = _model(strings, [_vi("s", [2], TensorProto.STRING)], [_vi("y", [2])])
    f64 = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="pre"), helper.make_node("Tanh", ["h"], ["y"], name="t")]
    out["f64.onnx"] = _model(f64, [_vi("x", [2, 16], TensorProto.DOUBLE)], [_vi("y", [2, 16], TensorProto.DOUBLE)],
                             [_w("w1", (16, 16), dtype=np.float64)])
    out["ghost_out.onnx"] = _model(nodes, [_vi("x", [2, 16])], [_vi("y", [2, 8]), _vi("ghost", [2, 8])], inits)
    untyped = helper.make_graph(nodes, "g", [_vi("x", [2, 16])], [helper.ValueInfoProto(name="y")], inits)
    out["untyped_out.onnx"] = helper.make_model(untyped, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR)
    unnamed = [helper.make_node(n.op_type, n.input, n.output) for n in nodes]
    out["unnamed.onnx"] = _model(unnamed, [_vi("x", [2, 16])], [_vi("y", [2, 8])], inits)
    out["slow.onnx"] = _slow_model()
    out["injected.onnx"] = injected_model(Path("PWNED"))  # a forced-FP32 Max named "maxnode\ntouch PWNED #"
    quote = _model(_cancel_nodes("it's")[0], [_vi("it's", ["N", 16])], [_vi("y", ["N", 8])], inits)
    out["quote_in.onnx"] = quote  # a dynamic input trtexec's --shapes cannot name (issue 32)
    return out


def _slow_model(depth: int = 40, width: int = 512, batch: int = 256) -> onnx.ModelProto:
    """A deep dense+tanh stack: a linear search over it takes seconds (each evaluation tens of milliseconds on one
    core, about 160 of them), long enough to interrupt once its first evaluation is checkpointed."""
    nodes, inits, h = [], [], "x"
    for i in range(depth):
        inits.append(_w(f"w{i}", (width, width), i))
        nodes.append(helper.make_node("MatMul", [h, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"t{i}"], name=f"tanh{i}"))
        h = f"t{i}"
    return _model(nodes, [_vi("x", [batch, width])], [_vi(h, [batch, width])], inits)


def sample(rng: np.random.Generator, shape=(2, 16)) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal(shape).astype(np.float32)}


def input_files(root: Path) -> None:
    """Input files for good.onnx (x: float32 [2,16]) and dyn.onnx (x: float32 [N,16]), good and broken."""
    rng = np.random.default_rng(0)
    for i in range(4):
        np.savez(root / f"ok{i}.npz", **sample(rng))
    x = sample(rng)["x"]
    np.savez(root / "wrongname.npz", y=x)
    np.savez(root / "extra.npz", x=x, z=x)
    np.savez(root / "wrongshape.npz", x=x[:, :8])
    np.savez(root / "wrongrank.npz", x=x.ravel())
    np.savez(root / "scalar.npz", x=np.float32(1.0))
    np.savez(root / "int.npz", x=(x * 10).astype(np.int32))
    np.savez(root / "f64.npz", x=x.astype(np.float64))
    np.savez(root / "bool.npz", x=x > 0)
    np.savez(root / "complex.npz", x=x.astype(np.complex64))
    np.savez(root / "nan.npz", x=np.where(x > 1, np.nan, x).astype(np.float32))
    np.savez(root / "inf.npz", x=np.where(x > 1, np.inf, x).astype(np.float32))
    np.savez(root / "empty_tensor.npz", x=np.zeros((0, 16), np.float32))
    np.savez(root / "noarrays.npz")
    np.savez(root / "object.npz", x=np.array([{"a": 1}, None], dtype=object))
    (root / "corrupt.npz").write_bytes(bytes(rng.integers(0, 256, 600, dtype=np.uint8)))
    (root / "text.npz").write_text("x = [1, 2, 3]\n")
    (root / "zero.npz").write_bytes(b"")
    np.save(root / "array.npy", x)
    shutil.copy(root / "array.npy", root / "npy_as.npz")
    ok = (root / "ok0.npz").read_bytes()
    (root / "truncated.npz").write_bytes(ok[: len(ok) // 2])
    _polygraphy_json(root / "ok.json", [sample(rng), sample(rng)])
    (root / "truncated.json").write_text((root / "ok.json").read_text()[:200])
    (root / "text.json").write_text("hello\n")
    (root / "numbers.json").write_text("[1, 2, 3]\n")
    (root / "empty_list.json").write_text("[]\n")
    (root / "empty_obj.json").write_text("{}\n")
    (root / "plain_lists.json").write_text(json.dumps({"x": x.tolist()}))
    (root / "plain_wrongshape.json").write_text(json.dumps({"x": x[:, :3].tolist()}))
    with h5py.File(root / "ok.h5", "w") as f:
        f["x"] = x
    with h5py.File(root / "group_only.h5", "w") as f:
        f.create_group("x")
    with h5py.File(root / "strings.h5", "w") as f:
        f["x"] = np.array([b"a", b"b"])
    (root / "corrupt.h5").write_bytes(bytes(rng.integers(0, 256, 600, dtype=np.uint8)))
    shutil.copy(root / "ok.h5", root / "h5_as.npz")
    shutil.copy(root / "ok0.npz", root / "npz_as.json")
    shutil.copy(root / "ok0.npz", root / "npz_as.h5")
    (root / "data.txt").write_text("1 2 3\n")
    (root / "dir.npz").mkdir()
    # issue 19: samples that read other files, an allocation bomb, payloads that are no plain arrays
    evil_h5(root)  # ext_storage.h5, ext_link.h5, virtual.h5, soft_link.h5 (and target.h5, what they point to)
    h5_bomb(root / "bomb.h5")  # 1,400 bytes declaring 2 GiB
    npz_bomb(root / "bomb_small.npz", elements=2**26)  # 1 MB inflating to 256 MiB (bomb.npz: build_bomb)
    import zipfile

    with zipfile.ZipFile(root / "raw_member.npz", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", bytes(1 << 20))  # no .npy inside: numpy would hand over the inflated bytes
    (root / "torch.json").write_text(json.dumps([{"x": {"tensor": "AA==", "polygraphy_class": "Tensor"}}]))
    # issue 32: bounded by bytes (wide.npz and wide.json: build_wide; the million-sample files: build_million)
    wide_text_h5(root / "wide.h5")  # 1,400 bytes declaring 1 GiB of text for a float input
    npz_bomb(root / "zero_lead.npz", shape=(0, 2, 16))  # samples stacked on a leading axis of 0
    npz_bomb(root / "negative_lead.npz", shape=(-3, 2, 16), data=False)  # a header numpy reads as it is
    (root / "gdir" / "sub").mkdir(parents=True)  # for 'gdir/*/../ok0.npz'
    for name, text in LOADERS.items():
        (root / name).write_text(text)


def reference_files(root: Path) -> None:
    """Reference outputs of good.onnx for ok0..ok3.npz as polygraphy's `run --save-outputs` writes them (its
    own RunResults.save), good and broken."""
    from precision_doctor.backends.reference import ReferenceRunner
    from precision_doctor.data.inputs import load_samples
    from precision_doctor.graph.model import load_model

    runner = ReferenceRunner(load_model(root / "good.onnx"))
    refs = [runner.run(s) for s in load_samples([root / f"ok{i}.npz" for i in range(4)])]
    _polygraphy_outputs(root / "refs.json", refs)
    _polygraphy_outputs(root / "refs_other.json", [{k: v + 10 for k, v in r.items()} for r in refs])
    y = GOOD_OUTPUT
    _polygraphy_outputs(root / "refs_noy.json", [{"z": r[y]} for r in refs])
    _polygraphy_outputs(root / "refs_shape.json", [{y: r[y][:1]} for r in refs])
    _polygraphy_outputs(root / "refs_int.json", [{y: r[y].astype(np.int32)} for r in refs])
    _polygraphy_outputs(root / "refs_two.json", refs, runners=("onnxrt-runner", "trt-runner"))
    text = (root / "refs.json").read_text()
    (root / "refs_truncated.json").write_text(text[: len(text) // 2])
    # an old-style .npz array payload inflating to 256 MiB in place of the first output's array
    bomb = base64.b64encode((root / "bomb_small.npz").read_bytes()).decode()
    (root / "refs_bomb.json").write_text(re.sub(r'"array": "[^"]*"', lambda m: f'"array": "{bomb}"', text, count=1))


def _polygraphy_outputs(path: Path, outputs: list[dict], runners=("onnxrt-runner",)) -> None:
    from polygraphy.comparator import IterationResult, RunResults
    from polygraphy.logger import G_LOGGER

    G_LOGGER.module_severity = G_LOGGER.ERROR

    results = RunResults()
    for name in runners:
        results.append((name, [IterationResult(dict(o), runner_name=name) for o in outputs]))
    results.save(str(path))


def _polygraphy_json(path: Path, samples: list[dict]) -> None:
    from polygraphy.json import save_json

    save_json(samples, str(path))


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI as a subprocess (what fixtures that are real runs are made with)."""
    return subprocess.run([sys.executable, "-m", "precision_doctor", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=child_env(), check=False)


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TERM")}
    env.update({"PRECISION_DOCTOR_ORT_THREADS": "1", "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"})
    return env


# Data loader scripts that exit (issue 32: sys.exit(0) made diagnose exit 0 with nothing written).
LOADERS = {
    "exit0.py": "import sys\ndef load_data():\n    sys.exit(0)\n",
    "exit_import.py": "import sys\nsys.exit(3)\n",
    "exit_later.py": ("import numpy as np\ndef load_data():\n    yield {'x': np.zeros((2, 16), np.float32)}\n"
                      "    raise SystemExit('done')\n"),
}


# A finished diagnose run of good.onnx (fixture `run_ok`, for `report` and `emit`); resume cases repeat it.
RUN_OK_ARGS = ["diagnose", "good.onnx", *[a for i in range(4) for a in ("--inputs", f"ok{i}.npz")], *GOOD_ARGS]


def build(root: Path) -> None:
    """Write every file fixture into `root` (fast: no CLI run)."""
    root.mkdir(parents=True, exist_ok=True)
    for name, m in models().items():
        onnx.save(m, str(root / name))
    good = (root / "good.onnx").read_bytes()
    (root / "truncated.onnx").write_bytes(good[: len(good) // 2])
    (root / "empty.onnx").write_bytes(b"")
    (root / "text.onnx").write_text("this is not a model\n")
    input_files(root)
    reference_files(root)
    (root / "nonutf8_node.onnx").write_bytes(non_utf8_model(node=True))
    (root / "nonutf8_tensor.onnx").write_bytes(non_utf8_model(node=False))
    shutil.copy(root / "ok0.npz", root / "zip.onnx")
    m = models()["good.onnx"]
    onnx.save(m, str(root / "extdata.onnx"), save_as_external_data=True, location="extdata.onnx.data",
              size_threshold=0)
    (root / "extdata.onnx.data").unlink()  # the weights file did not come along
    (root / "modeldir.onnx").mkdir()

    zoo = root / "zoo"
    zoo.mkdir()
    shutil.copy(root / "good.onnx", zoo / "good.onnx")
    recipe = {"inputs": {"samples": 2}, "tolerance": {"atol": 1e-2, "rtol": 1e-2}, "max_evaluations": 40}
    (zoo / "good.json").write_text(json.dumps(recipe))



def build_bomb(root: Path) -> None:
    """The fixture `bomb.npz`: an .npz of about 9 MB inflating to 2 GiB (5 s to make: only when a case needs it)."""
    npz_bomb(root / "bomb.npz")


def build_wide(root: Path) -> None:
    """The fixtures `wide.npz` (a few MB inflating to 1 GiB of text) and `wide.json` (it as a polygraphy payload):
    a second or two to make, only when a case needs them."""
    wide_text_npz(root / "wide.npz")
    polygraphy_payload_json(root / "wide.json", root / "wide.npz")


def build_million(root: Path) -> None:
    """The fixtures `m0.npz` .. `m7.npz`: each declares 2**20 samples of good.onnx's x (128 MiB of zeros, 130 KB)."""
    million_samples_npz(root / "m0.npz")
    for i in range(1, 8):
        shutil.copy(root / "m0.npz", root / f"m{i}.npz")


def build_run(root: Path) -> None:
    """The fixture `run_ok`: a real diagnose run (a few seconds), made only when a case needs it."""
    proc = cli(*RUN_OK_ARGS, "--out", "run_ok", cwd=root)
    if proc.returncode != 0:
        raise RuntimeError(f"fixture run failed ({proc.returncode}): {proc.stderr[-2000:]}")
