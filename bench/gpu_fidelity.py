"""Emulator fidelity against real low precision on ONNX Runtime's CUDA provider.

For every planted case and fallback set (all low precision, the certified minimum, all FP32) it
compares the emulator's verdict with the verdict of the real mixed-precision graph on the GPU.
Needs onnxruntime-gpu and a GPU:  python bench/gpu_fidelity.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import onnxruntime as ort

from precision_doctor import planted
from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.ort import OrtBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.model import from_proto
from precision_doctor.search import Oracle
from precision_doctor.tolerance import Tolerance


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/out")
    ap.add_argument("--samples", type=int, default=8)
    args = ap.parse_args()
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise SystemExit("no CUDAExecutionProvider: install onnxruntime-gpu on a GPU machine")
    rows = []
    for name, make in planted.CASES.items():
        case = make()
        model = from_proto(case.model)
        samples = case.samples(args.samples, seed=123)
        ref = ReferenceRunner(model)
        refs = [ref.run(s) for s in samples]
        tol = Tolerance(case.atol, case.rtol)
        emu = Oracle(EmulateBackend(model), samples, refs, tol)
        gpu_backend = OrtBackend(model, "fp16", providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
        gpu = Oracle(gpu_backend, samples, refs, tol)
        everything = frozenset(n.name for n in model.candidates)
        sets = {"all-fp16": frozenset(), "certified": frozenset(case.expected), "all-fp32": everything}
        for label, fb in sets.items():
            t = time.perf_counter()
            g = gpu.evaluate(fb)
            tg = time.perf_counter() - t
            e = emu.evaluate(fb)
            rows.append({
                "case": name, "set": label, "size": len(fb), "emulated_pass": e.passed, "gpu_pass": g.passed,
                "agree": e.passed == g.passed, "gpu_max_abs": g.worst[1], "emu_max_abs": e.worst[1], "gpu_eval_s": tg,
            })
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_fidelity.json").write_text(json.dumps(rows, indent=2, default=str))
    print("| case | set | size | emulated | GPU (ORT CUDA fp16) | agree | GPU max abs err |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['case']} | {r['set']} | {r['size']} | {'pass' if r['emulated_pass'] else 'fail'} | "
              f"{'pass' if r['gpu_pass'] else 'fail'} | {'yes' if r['agree'] else 'NO'} | {r['gpu_max_abs']:.3g} |")
    agree = sum(r["agree"] for r in rows)
    print(f"\nagreement: {agree}/{len(rows)}; onnxruntime {ort.__version__}, providers {ort.get_available_providers()}")


if __name__ == "__main__":
    main()
