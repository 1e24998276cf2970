"""A sample's check beside the next sample's run (measure/checked.py), against one after the other, side by side.

    .venv/bin/python bench/check_overlap.py [--samples 16] [--repeats 3]

The model: a MatMul of a [1, 40, K] input by a [K, 51865] weight (K: `--inner`), whisper-base's logits ([1, 40, 51865], 2M
elements: their check costs about 0.1 s on one core here). It runs on ONNX Runtime's CPU provider with one thread, a
stand-in for a GPU run (a CPU core left free for the check, as on the GPU machine's 16); the run's cost here is not a
GPU's, so the ratio says what the overlap saves where a run and a check cost what they cost here, no more.
Prints a table and writes bench/out/check_overlap.json.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnxruntime as ort
from _common import machine, write_results
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.measure.checked import checked_runs
from precision_doctor.measure.tolerance import Tolerance


def _model(inner: int) -> bytes:
    w = np.random.default_rng(0).standard_normal((inner, 51865)).astype(np.float32) / np.float32(np.sqrt(inner))
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["logits"])], "logits",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 40, inner])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 40, 51865])],
                          [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()


class _Runner:
    def __init__(self, session: ort.InferenceSession):
        self.session = session

    def run(self, feeds, outputs=None):
        return dict(zip(["logits"], self.session.run(None, {"x": feeds["x"]})))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--inner", type=int, default=1536, help="the MatMul's inner size: what a run costs")
    args = ap.parse_args()
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    runner = _Runner(ort.InferenceSession(_model(args.inner), so, providers=["CPUExecutionProvider"]))
    rng = np.random.default_rng(1)
    samples = [{"x": rng.standard_normal((1, 40, args.inner)).astype(np.float32)} for _ in range(args.samples)]
    refs = [{"logits": runner.run(s)["logits"] + rng.standard_normal((1, 40, 51865)).astype(np.float32) * 1e-3}
            for s in samples]
    tol = Tolerance(atol=0.1, rtol=1e-2)
    run_s = min(_timed(lambda: runner.run(samples[0])) for _ in range(3))
    times = {False: [], True: []}
    for _ in range(args.repeats):
        for overlap in (False, True):  # interleaved: the machine's load falls on both alike
            times[overlap].append(_timed(lambda o=overlap: list(checked_runs(runner, samples, refs,
                                                                             range(len(samples)), tol, o))))
    one, beside = min(times[False]), min(times[True])
    rows = {"samples": args.samples, "inner": args.inner, "run_s": run_s, "sequential_s": one, "overlap_s": beside,
            "ratio": beside / one}
    print("| samples | inner | one run | one after the other | check beside the next run | ratio |\n|---|---|---|---|---|---|")
    print(f"| {args.samples} | {args.inner} | {run_s * 1e3:.0f} ms | {one:.2f} s | {beside:.2f} s | {beside / one:.2f} |")
    write_results("check_overlap", {"machine": machine(), "results": rows})


def _timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
