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
from precision_doctor.graph.model import Model, from_proto
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline.validation import check_on_samples

PROVIDERS = ["CUDAExecutionProvider", "CPUExecutionProvider"]


def on_all(backend, fallback: frozenset[str], samples: list, refs: list, tol: Tolerance) -> tuple[bool, float, float]:
    """Pass, share of the tolerance used and max abs error over every sample (the oracle stops at the
    first failing sample, so its numbers cover only the samples it ran)."""
    outs = check_on_samples(backend, fallback, samples, refs, tol).outputs.values()
    return all(o.passed for o in outs), max(o.tol_used for o in outs), max(o.max_abs for o in outs)


def compare(name: str, model: Model, samples: list, tol: Tolerance, answer: frozenset[str], answer_label: str) -> list[dict]:
    """Emulated and GPU verdicts of all-low, `answer` and all-FP32 on the same samples and references."""
    ref = ReferenceRunner(model)
    refs = [ref.run(s) for s in samples]
    emu_backend, gpu_backend = EmulateBackend(model), OrtBackend(model, "fp16", providers=PROVIDERS)
    everything = frozenset(n.name for n in model.candidates)
    rows = []
    for label, fb in {"all-fp16": frozenset(), answer_label: answer, "all-fp32": everything}.items():
        t = time.perf_counter()
        g_pass, g_used, g_abs = on_all(gpu_backend, fb, samples, refs, tol)
        tg = time.perf_counter() - t
        e_pass, e_used, e_abs = on_all(emu_backend, fb, samples, refs, tol)
        rows.append({
            "case": name, "set": label, "size": len(fb), "samples": len(samples), "emulated_pass": e_pass,
            "gpu_pass": g_pass, "agree": e_pass == g_pass, "gpu_max_abs": g_abs, "emu_max_abs": e_abs,
            "emu_tol_used": e_used, "gpu_tol_used": g_used, "gpu_eval_s": tg,
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
    from _zoo import batch_answer, zoo_works

    rows = []
    for w in zoo_works(zoo_dir):
        answer = batch_answer(answers, w)
        if answer is None:
            print(f"{w.name}: no answer in {answers}; skipped")
            continue
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
