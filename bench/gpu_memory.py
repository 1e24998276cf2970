"""What holds the GPU's memory: ONNX Runtime CUDA sessions' arenas under session settings, side by side (issue 35).

whisper-base's diagnosis on the H200 held 92-103 GB of the GPU with one search session and 139.8 GB in its capture,
then failed a new session with a cuBLAS error (docs/history/large-models.md). This runs a transformer-like graph
(built here: attention and MLP blocks over a dynamic sequence length, random weights) on samples of varying lengths,
as the search and the capture do, in a fresh process per setting, and reads the process's GPU memory
(`nvidia-smi`) after each sample: `single` one session, `chain` SESSIONS sessions alive at once run in turn.

    python3 bench/gpu_memory.py --samples 16 --blocks 12    # on the GPU machine, onnxruntime-gpu importable
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

SETTINGS = {
    "default": {},
    "no-pattern": {"pattern": False},
    "same-as-requested": {"extend": "kSameAsRequested"},
    "shrink": {"shrink": True},
    "no-pattern+shrink": {"pattern": False, "shrink": True},
    "all three": {"pattern": False, "extend": "kSameAsRequested", "shrink": True},
}


def model(blocks: int, d: int = 512, ff: int = 2048):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"

    def w(name, *shape):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name))
        return name

    for b in range(blocks):
        p = f"b{b}_"
        nodes += [
            helper.make_node("MatMul", [x, w(p + "wq", d, d)], [p + "q"]),
            helper.make_node("MatMul", [x, w(p + "wk", d, d)], [p + "k"]),
            helper.make_node("Transpose", [p + "k"], [p + "kt"], perm=[0, 2, 1]),
            helper.make_node("MatMul", [p + "q", p + "kt"], [p + "s"]),
            helper.make_node("Softmax", [p + "s"], [p + "a"], axis=-1),
            helper.make_node("MatMul", [p + "a", x], [p + "o"]),
            helper.make_node("Add", [x, p + "o"], [p + "r"]),
            helper.make_node("MatMul", [p + "r", w(p + "w1", d, ff)], [p + "h"]),
            helper.make_node("Relu", [p + "h"], [p + "hr"]),
            helper.make_node("MatMul", [p + "hr", w(p + "w2", ff, d)], [p + "m"]),
            helper.make_node("Add", [p + "r", p + "m"], [p + "y"]),
        ]
        x = p + "y"
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "S", d])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, "S", d])], inits)
    return onnx.helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()


def gpu_mib() -> int:
    """This process's GPU memory; the whole GPU's where nvidia-smi lists no process of this PID (a container whose
    PIDs it does not see: the bench then runs alone on the GPU)."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    mine = [int(m) for p, m in (line.split(", ") for line in out.strip().splitlines() if line) if int(p) == os.getpid()]
    if mine:
        return sum(mine)
    total = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True).stdout
    return int(total.split()[0])


def child(setting: str, kind: str, sessions: int, samples: int, blocks: int) -> dict:
    import onnxruntime as ort

    s = SETTINGS[setting]
    data = model(blocks)
    cuda = {"use_tf32": "0"} | ({"arena_extend_strategy": s["extend"]} if "extend" in s else {})

    def make():
        so = ort.SessionOptions()
        so.enable_mem_pattern = s.get("pattern", True)
        so.log_severity_level = 4
        return ort.InferenceSession(data, so, providers=[("CUDAExecutionProvider", cuda), "CPUExecutionProvider"])

    live = [make() for _ in range(sessions if kind == "chain" else 1)]
    ro = None
    if s.get("shrink"):
        ro = ort.RunOptions()
        ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "gpu:0")
    lengths = np.random.default_rng(1).integers(100, 1500, samples)
    after, peak = [], 0
    for n in lengths:
        x = np.random.default_rng(int(n)).standard_normal((1, int(n), 512)).astype(np.float32)
        for sess in live:
            sess.run(None, {"x": x}, ro)
        after.append(gpu_mib())
        peak = max(peak, after[-1])
    return {"setting": setting, "kind": kind, "after_first_mib": after[0], "after_last_mib": after[-1],
            "peak_mib": peak, "lengths": [int(n) for n in lengths[:5]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--blocks", type=int, default=12)
    ap.add_argument("--sessions", type=int, default=6, help="sessions alive at once in `chain`")
    ap.add_argument("--child", nargs=2, metavar=("SETTING", "KIND"))
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(*a.child, a.sessions, a.samples, a.blocks)))
        return
    print("| setting | sessions | after the first sample (MiB) | after the last | peak |\n|---|---|---|---|---|")
    for kind in ("single", "chain"):
        for setting in SETTINGS:
            r = subprocess.run([sys.executable, __file__, "--child", setting, kind, "--samples", str(a.samples),
                                "--blocks", str(a.blocks), "--sessions", str(a.sessions)],
                               capture_output=True, text=True)
            if r.returncode:
                print(f"| {setting} | {kind} | failed: {r.stderr.strip().splitlines()[-1:]} | | |", flush=True)
                continue
            j = json.loads(r.stdout.strip().splitlines()[-1])
            n = 1 if kind == "single" else a.sessions
            print(f"| {setting} | {n} | {j['after_first_mib']} | {j['after_last_mib']} | {j['peak_mib']} |", flush=True)


if __name__ == "__main__":
    main()
