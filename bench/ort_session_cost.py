"""What one confirmation trial costs on ONNX Runtime CUDA, and whether cuDNN's algorithm choice moves its verdict.

A confirmation trial on `ort-cuda` is a new session over a new mixed graph: the graph rewrite, the session, its
first run (where cuDNN's EXHAUSTIVE search times every convolution's algorithms) and one run per sample. This
times each part for the all-FP16 graph and a given fallback set, with `cudnn_conv_algo_search` EXHAUSTIVE (ONNX
Runtime's default, what a user deploys), HEURISTIC and DEFAULT, EXHAUSTIVE twice (its choice is by timing, so it
may differ run to run); and compares each sample's share of the tolerance between the variants.

    python3 bench/ort_session_cost.py --zoo zoo --fallback FILE --out $OUT     # on the GPU machine

--fallback: a file with one node name per line (autocast_nodes_to_exclude.txt of a run); samples: the natural-image
renders of bench/gpu_calibration.py (seed 2026), the first --samples. Writes ort_session_cost.json under --out.
"""

from __future__ import annotations

import json
import time

import numpy as np
from recipe_renders import parser, recipe_renders

from precision_doctor.backends.ort import CUDA, OrtBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.measure.headroom import shares_of
from precision_doctor.measure.tolerance import check_all

VARIANTS = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT", "EXHAUSTIVE")


def trial(model, precision: str, algo: str, fallback: frozenset[str], samples: list[dict], refs: list[dict],
          tol, cpu: bool = False) -> dict:
    """One trial as the confirmation makes it, timed part by part (`cpu`: on the CPU provider, plumbing only)."""
    cuda = (CUDA, {"use_tf32": "0", "cudnn_conv_algo_search": algo})
    backend = OrtBackend(model, precision, providers=[cuda] * (not cpu) + ["CPUExecutionProvider"])
    t0 = time.perf_counter()
    runner = backend.prepare(fallback)
    t1 = time.perf_counter()
    first = runner.run(samples[0], list(refs[0]))
    t2 = time.perf_counter()
    outs = [first] + [runner.run(s, list(r)) for s, r in zip(samples[1:], refs[1:])]
    t3 = time.perf_counter()
    shares = shares_of([check_all(o, r, tol) for o, r in zip(outs, refs)])
    backend.close()
    return {"algo": algo, "prepare_s": t1 - t0, "first_run_s": t2 - t1, "rest_s": t3 - t2,
            "per_sample_ms": 1e3 * (t3 - t2) / max(1, len(samples) - 1),
            "shares": [s.share for s in shares], "failures": sum(not s.passed for s in shares)}


def main() -> None:
    args = parser(__doc__, "the CPU provider (a plumbing check, no cuDNN)").parse_args()
    spec, model, samples, answer = recipe_renders(args)
    ref = ReferenceRunner(model)
    refs = [ref.run(s) for s in samples]
    rows = []
    for label, fallback in (("all-fp16", frozenset()), ("answer", answer)):
        for algo in VARIANTS:
            row = {"set": label, "size": len(fallback), **trial(model, spec.precision, algo, fallback, samples, refs,
                                                                   spec.tolerance, args.cpu)}
            rows.append(row)
            print(f"{label:9s} {algo:10s} prepare {row['prepare_s']:.2f} s, first run {row['first_run_s']:.2f} s, "
                  f"{row['per_sample_ms']:.1f} ms a sample, worst share {max(row['shares']):.3f}, "
                  f"{row['failures']} failed", flush=True)
    for label in ("all-fp16", "answer"):
        mine = [r for r in rows if r["set"] == label]
        base = np.array(mine[0]["shares"])
        for r in mine[1:]:
            d = np.abs(np.array(r["shares"]) - base)
            print(f"{label:9s} EXHAUSTIVE vs {r['algo']:10s}: share moves by at most {d.max():.4f} "
                  f"(median {np.median(d):.4f})")
    (args.out / "ort_session_cost.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
