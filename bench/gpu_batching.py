"""Issue 20's 60 s: can the gated graph's evaluations run several samples at once on ORT CUDA?

    python3 bench/gpu_batching.py --zoo zoo --out $OUT          # on the GPU machine (onnxruntime-gpu)

On nudenet-320n (a dynamic batch dimension) and 32 natural-image renders, for two fallback sets (all FP16, every
other candidate FP32), the If form of the gated native graph:

- batches of 1, 4, 8, 16 and 32 samples along the batch dimension: milliseconds per sample, how far each sample's
  outputs are from its batch-of-1 run, and the largest share of the tolerance (atol 1e-3, rtol 1e-2, against the
  all-FP32 batch-of-1 outputs) either way;
- cuDNN's HEURISTIC algorithm choice, one session and 4 sessions on 4 threads (batch of 1): milliseconds per
  sample, and how far the 4 sessions' outputs are from the one's.

Writes batching.json under --out and prints it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime as ort
from natural_images import natural_images_nchw

from precision_doctor.backends.ort import CUDA
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.model import load_model
from precision_doctor.graph.native import gated_native_graph
from precision_doctor.graph.ort_session import make_session, with_outputs
from precision_doctor.measure.tolerance import Tolerance, check_all


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, default=Path("zoo"))
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cpu", action="store_true", help="plumbing only (the CPU provider)")
    args = ap.parse_args()
    ort.set_default_logger_severity(4)
    model = load_model(str(args.zoo / "nudenet-320n.onnx"))
    outs = list(model.outputs)
    xs = natural_images_nchw(args.samples, 320, 320, seed=11)
    g = gated_native_graph(model, get_format("fp16"))
    proto = with_outputs(g.proto, outs, model.tensor_types)

    def providers(algo: str = "EXHAUSTIVE"):
        return ["CPUExecutionProvider"] if args.cpu else [(CUDA, {"use_tf32": "0", "cudnn_conv_algo_search": algo})]

    sess = make_session(proto, providers())
    tol = Tolerance(atol=1e-3, rtol=1e-2)
    cands = g.candidates
    sets = {"all16": [], "half": cands[::2]}
    ref = [dict(zip(outs, sess.run(outs, {"images": x, **g.feeds(cands)}))) for x in xs]
    report: dict = {"samples": len(xs), "batches": {}, "threads": {}}
    for label, fb in sets.items():
        gates = g.feeds(fb)
        one = None
        for b in (1, 4, 8, 16, 32):
            sess.run(outs, {"images": np.concatenate(xs[:b]), **gates})  # the batch size's algorithms timed first
            t = time.perf_counter()
            got: list[dict] = []
            for k in range(0, len(xs), b):
                res = sess.run(outs, {"images": np.concatenate(xs[k:k + b]), **gates})
                got += [{o: r[j:j + 1] for o, r in zip(outs, res)} for j in range(len(xs[k:k + b]))]
            ms = 1e3 * (time.perf_counter() - t) / len(xs)
            one = one or got
            diff = max(float(np.max(np.abs(a[o].astype(np.float64) - c[o]))) for a, c in zip(got, one) for o in outs)
            share = max(float(c.tol_used) for r, a in zip(ref, got) for c in check_all(a, r, tol).values())
            report["batches"][f"{label}/{b}"] = {"ms_per_sample": ms, "max_diff_vs_batch1": diff, "max_share": share}
            print(label, b, json.dumps(report["batches"][f"{label}/{b}"]), flush=True)
    gates = g.feeds(sets["half"])
    h1 = make_session(proto, providers("HEURISTIC"))
    h1.run(outs, {"images": xs[0], **gates})
    t = time.perf_counter()
    base = [h1.run(outs, {"images": x, **gates}) for x in xs]
    report["threads"]["heuristic_1_ms"] = 1e3 * (time.perf_counter() - t) / len(xs)
    hs = [make_session(proto, providers("HEURISTIC")) for _ in range(4)]
    for s in hs:
        s.run(outs, {"images": xs[0], **gates})

    def part(k: int) -> list:
        return [(i, hs[k].run(outs, {"images": xs[i], **gates})) for i in range(k, len(xs), 4)]

    t = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        parts = [r for p in pool.map(part, range(4)) for r in p]
    report["threads"]["heuristic_4_ms"] = 1e3 * (time.perf_counter() - t) / len(xs)
    report["threads"]["max_diff_4_vs_1"] = max(
        float(np.max(np.abs(a.astype(np.float64) - c))) for i, res in parts for a, c in zip(res, base[i]))
    print("threads", json.dumps(report["threads"]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "batching.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
