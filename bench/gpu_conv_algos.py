"""Why an emulated answer can fail on the GPU: the same fallback set on ORT CUDA under each cuDNN
convolution-algorithm search and with/without ORT's graph fusions, against the emulator.

    python bench/gpu_conv_algos.py --zoo zoo --answers .gpu/answers-margin20 --out DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _zoo import batch_answer, zoo_works
from gpu_fidelity import on_all

from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.ort import OrtBackend
from precision_doctor.backends.reference import ReferenceRunner

ALGOS = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, required=True)
    ap.add_argument("--answers", type=Path, required=True)
    ap.add_argument("--only", action="append", default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/out"))
    args = ap.parse_args()
    rows = []
    for w in zoo_works(args.zoo, set(args.only) if args.only else None):
        answer = batch_answer(args.answers, w)
        if answer is None:
            print(f"{w.name}: no answer in {args.answers}; skipped")
            continue
        ref = ReferenceRunner(w.model)
        refs = [ref.run(s) for s in w.samples]
        for label, fb in (("all-fp16", frozenset()), ("answer", answer)):
            emulated = on_all(EmulateBackend(w.model), fb, w.samples, refs, w.tol)[1]
            row = {"model": w.name, "set": label, "size": len(fb), "emulated": emulated}
            for algo in ALGOS:
                for optimize in (True, False):
                    prov = [("CUDAExecutionProvider", {"use_tf32": "0", "cudnn_conv_algo_search": algo}),
                            "CPUExecutionProvider"]
                    be = OrtBackend(w.model, "fp16", providers=prov, optimize=optimize)
                    key = f"{algo.lower()}{'' if optimize else ' no-fusion'}"
                    row[key] = on_all(be, fb, w.samples, refs, w.tol)[1]
            rows.append(row)
            print(json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_conv_algos.json").write_text(json.dumps(rows, indent=1))
    cols = [k for k in rows[0] if k not in ("model", "set", "size")]
    print("| model | set | size | " + " | ".join(f"tolerance used: {c}" for c in cols) + " |")
    print("|---|---|---|" + "---|" * len(cols))
    for r in rows:
        print(f"| {r['model']} | {r['set']} | {r['size']} | " + " | ".join(f"{r[c]:.3g}" for c in cols) + " |")


if __name__ == "__main__":
    main()
