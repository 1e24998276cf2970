"""A model over 2 GB, its weights in an external data file (issue 35: "models over 2 GB with external data files load
and emit correctly"): `diagnose` on it, then its fixed.onnx loaded with its weights and run by ONNX Runtime.

    .venv/bin/python bench/over_2gb.py --dest /tmp/big              # 2.2 GB: peak RSS 10.46 GiB, 175 s (2-core machine)
    .venv/bin/python bench/over_2gb.py --dest /tmp/big8 --layers 8  # 537 MB: 3.13 GiB, 51 s

(2026-12-03, branch `over2gb`: the weights in files that sessions map, `graph/weights.py`; before, the 2.2 GB run was
killed at 23 GiB and the 537 MB one peaked at 10.69 GiB: docs/history/large-models.md.)

The model: `--layers` MatMul + Add + Relu blocks of [W, W] weights (FP32; 2.2 GB with the defaults) between an input
[1, W] and an output [1, W]; every weight matrix holds one value over FP16's range (70000), so every MatMul must stay
FP32 and fixed.onnx is over 2 GB too (its weights in fixed.onnx.data). Checks: the run's verdict, that fixed.onnx
names an external data file, that ONNX Runtime runs it, and that its outputs are the FP32 model's within the
tolerance. Prints one JSON line (wall time, the diagnose's peak RSS, bytes written, the checks).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from _common import run_measured, written_bytes
from onnx import TensorProto, helper, numpy_helper


def make(dest: Path, layers: int, width: int, samples: int) -> Path:
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        w[i % width, (7 * i) % width] = 70000.0  # over FP16's largest value: this MatMul stays FP32
        b = np.zeros(width, np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"matmul{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    nodes.append(helper.make_node("Mul", [x, "scale"], ["y"], name="scale_out"))
    inits.append(numpy_helper.from_array(np.array(1e-3, np.float32), "scale"))
    graph = helper.make_graph(nodes, "over_2gb", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "big.onnx"
    (dest / "big.onnx.data").unlink(missing_ok=True)  # onnx.save appends to an existing data file
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="big.onnx.data")
    inputs = dest / "inputs"
    inputs.mkdir(exist_ok=True)
    for j in range(samples):
        np.savez(inputs / f"s{j}.npz", x=rng.uniform(0, 1, (1, width)).astype(np.float32))
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dest", type=Path, required=True)
    ap.add_argument("--layers", type=int, default=33)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--samples", type=int, default=6)
    args = ap.parse_args()
    path = make(args.dest, args.layers, args.width, args.samples)
    size = path.stat().st_size + (args.dest / "big.onnx.data").stat().st_size
    run = args.dest / "run"
    cmd = [sys.executable, "-m", "precision_doctor", "diagnose", str(path), "--inputs", str(args.dest / "inputs"),
           "--atol", "1e-2", "--rtol", "1e-2", "--out", str(run), "--force"]
    t0 = time.monotonic()
    out, rc, rss_gib = run_measured(cmd)
    wall = time.monotonic() - t0
    fixed = run / "fixed.onnx"
    rec = {"model_bytes": size, "rc": rc, "wall_s": round(wall, 1), "peak_rss_gib": round(rss_gib, 2), "verdict": next(
               (line for line in out.splitlines() if line.startswith(("PASSED", "FAILED", "NO "))), None),
           "written_bytes": written_bytes(run) if run.is_dir() else 0}
    if fixed.is_file():
        import onnxruntime as ort

        proto = onnx.load(str(fixed), load_external_data=False)
        rec["fixed_external"] = sorted({e.value for t in proto.graph.initializer for e in t.external_data
                                        if e.key == "location"})
        so = ort.SessionOptions()
        so.log_severity_level = 3
        got = ort.InferenceSession(str(fixed), so, providers=["CPUExecutionProvider"])
        ref = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        worst = 0.0
        for f in sorted((args.dest / "inputs").glob("s*.npz")):
            feed = dict(np.load(f))
            a, b = got.run(None, feed)[0], ref.run(None, feed)[0]
            worst = max(worst, float(np.max(np.abs(a.astype(np.float32) - b) / (1e-2 + 1e-2 * np.abs(b)))))
        rec["fixed_worst_share"] = round(worst, 3)
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
