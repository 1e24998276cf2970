"""Emulator fidelity against real low precision on ONNX Runtime's CUDA provider.

For every planted case and fallback set (all low precision, the certified minimum, all FP32) it
compares the emulator's verdict with the verdict of the real mixed-precision graph on the GPU. With
`--zoo DIR --answers BATCH_DIR` it does the same for each zoo model, with the set that an emulated
`precision-doctor batch` found (BATCH_DIR/<model>/report.json), on the recipe's samples and tolerance.
Needs onnxruntime-gpu and a GPU:

    python bench/gpu_fidelity.py --out DIR [--zoo zoo --answers reports/batch-zoo]
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
from precision_doctor.model import Model, from_proto
from precision_doctor.search import Oracle
from precision_doctor.tolerance import Tolerance, check_all

PROVIDERS = ["CUDAExecutionProvider", "CPUExecutionProvider"]


def tol_used_on_all(backend, fallback: frozenset[str], samples: list, refs: list, tol: Tolerance) -> float:
    """The share of the tolerance used over every sample (the oracle stops at the first failing one)."""
    runner = backend.prepare(fallback)
    return max(max(c.tol_used for c in check_all(runner.run(s, list(r)), r, tol).values()) for s, r in zip(samples, refs))


def compare(name: str, model: Model, samples: list, tol: Tolerance, answer: frozenset[str], answer_label: str) -> list[dict]:
    """Emulated and GPU verdicts of all-low, `answer` and all-FP32 on the same samples and references."""
    ref = ReferenceRunner(model)
    refs = [ref.run(s) for s in samples]
    emu_backend, gpu_backend = EmulateBackend(model), OrtBackend(model, "fp16", providers=PROVIDERS)
    emu = Oracle(emu_backend, samples, refs, tol)
    gpu = Oracle(gpu_backend, samples, refs, tol)
    everything = frozenset(n.name for n in model.candidates)
    rows = []
    for label, fb in {"all-fp16": frozenset(), answer_label: answer, "all-fp32": everything}.items():
        t = time.perf_counter()
        g = gpu.evaluate(fb)
        tg = time.perf_counter() - t
        e = emu.evaluate(fb)
        rows.append({
            "case": name, "set": label, "size": len(fb), "samples": len(samples), "emulated_pass": e.passed,
            "gpu_pass": g.passed, "agree": e.passed == g.passed, "gpu_max_abs": g.worst[1], "emu_max_abs": e.worst[1],
            "emu_tol_used": tol_used_on_all(emu_backend, fb, samples, refs, tol),
            "gpu_tol_used": tol_used_on_all(gpu_backend, fb, samples, refs, tol), "gpu_eval_s": tg,
        })
    return rows


def planted_rows(n_samples: int) -> list[dict]:
    rows = []
    for name, make in planted.CASES.items():
        case = make()
        model = from_proto(case.model)
        rows += compare(name, model, case.samples(n_samples, seed=123), Tolerance(case.atol, case.rtol),
                        frozenset(case.expected), "certified")
    return rows


def zoo_rows(zoo_dir: Path, answers: Path) -> list[dict]:
    from _zoo import zoo_works

    rows = []
    for w in zoo_works(zoo_dir):
        report = answers / w.name.removeprefix("zoo:") / "report.json"
        if not report.is_file():
            print(f"{w.name}: no {report}; skipped")
            continue
        answer = frozenset(json.loads(report.read_text())["fallback_nodes"])
        rows += compare(w.name, w.model, w.samples, w.tol, answer, "emulated answer")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/out")
    ap.add_argument("--samples", type=int, default=8, help="samples per planted case (seed 123)")
    ap.add_argument("--zoo", type=Path, help="fetched zoo folder")
    ap.add_argument("--answers", type=Path, help="an emulated batch's output folder (with --zoo)")
    ap.add_argument("--no-planted", action="store_true")
    ap.add_argument("--name", default="gpu_fidelity", help="results file name (NAME.json)")
    args = ap.parse_args()
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise SystemExit("no CUDAExecutionProvider: install onnxruntime-gpu on a GPU machine")
    rows = [] if args.no_planted else planted_rows(args.samples)
    if args.zoo:
        rows += zoo_rows(args.zoo, args.answers or Path("reports/batch-zoo"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(rows, indent=2, default=str))
    print("| case | set | size | samples | emulated | GPU (ORT CUDA fp16) | agree | tolerance used: emulated / GPU "
          "| max abs err: emulated / GPU |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['case']} | {r['set']} | {r['size']} | {r['samples']} | {'pass' if r['emulated_pass'] else 'fail'} | "
              f"{'pass' if r['gpu_pass'] else 'fail'} | {'yes' if r['agree'] else 'NO'} | "
              f"{r['emu_tol_used']:.3g} / {r['gpu_tol_used']:.3g} | {r['emu_max_abs']:.3g} / {r['gpu_max_abs']:.3g} |")
    agree = sum(r["agree"] for r in rows)
    print(f"\nagreement: {agree}/{len(rows)}; onnxruntime {ort.__version__}, providers {ort.get_available_providers()}")


if __name__ == "__main__":
    main()
