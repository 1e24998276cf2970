"""Where one ort-cuda evaluation's time goes (issue 20's 60 s target: the confirmation makes one session per
fallback set): for a few fallback sets of a zoo model, the mixed graph's rewrite, the session's creation, its first
run (cuDNN's algorithm choice happens there) and the runs after it, under each `cudnn_conv_algo_search` and
graph optimization level, and how far the outputs of those settings lie from one another. Also the gated graph's
one session and its per-set run.

    python3 bench/gpu_eval_profile.py --zoo zoo --out $OUT/eval-profile      # on the GPU machine

Writes eval_profile.json under --out and prints a table.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np
from natural_images import natural_images_nchw

from precision_doctor.backends.ort import CUDA, OrtBackend
from precision_doctor.backends.ort_gated import OrtGatedBackend
from precision_doctor.batch.recipes import discover
from precision_doctor.graph.mixed import build_mixed
from precision_doctor.graph.model import load_model
from precision_doctor.graph.ort_session import make_session
from precision_doctor.spec import RunSpec


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, default=Path("zoo"))
    ap.add_argument("--model", default="nudenet-320n")
    ap.add_argument("--samples", type=int, default=17)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cpu", action="store_true", help="a plumbing run on the CPU provider (timings mean nothing)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    spec = {s.name: s for s in discover(args.zoo, RunSpec(model=""))}[args.model].spec
    model = load_model(spec.model)
    x = model.inputs[0]
    samples = [{x: a} for a in natural_images_nchw(args.samples, 320, 320, seed=2026)]
    nodes = [n.name for n in model.candidates]
    rng = random.Random(0)
    sets = {"none": frozenset(), "20": frozenset(rng.sample(nodes, 20)), "60": frozenset(rng.sample(nodes, 60))}
    rows, outs = [], {}
    for algo in ("EXHAUSTIVE", "HEURISTIC", "DEFAULT"):
        for optimize in (True, False):
            providers = ["CPUExecutionProvider"] if args.cpu else \
                [(CUDA, {"use_tf32": "0", "cudnn_conv_algo_search": algo}), "CPUExecutionProvider"]
            for label, fb in sets.items():
                be = OrtBackend(model, spec.precision, providers, optimize=optimize, cache_size=0)
                proto, t_build = timed(build_mixed, model, fb, spec.precision, True)
                sess, t_sess = timed(make_session, proto, be.providers, optimize=optimize)
                names = [o.name for o in sess.get_outputs()]
                first, t_first = timed(sess.run, names, samples[0])
                t0 = time.perf_counter()
                res = [sess.run(names, s)[0] for s in samples[1:]]
                t_rest = (time.perf_counter() - t0) / max(1, len(samples) - 1)
                outs[(algo, optimize, label)] = [first[0]] + res
                rows.append({"algo": algo, "optimize": optimize, "set": label, "build_s": t_build, "session_s": t_sess,
                             "first_run_s": t_first, "run_s": t_rest})
                print(json.dumps(rows[-1]), flush=True)
                be.close()
    diffs, tol = [], spec.tolerance
    for label in sets:
        base = outs[("EXHAUSTIVE", True, label)]
        for key, o in outs.items():
            if key[2] == label and key != ("EXHAUSTIVE", True, label):
                d = [np.abs(a.astype(np.float32) - b.astype(np.float32)) for a, b in zip(base, o)]
                share = max(float(np.max(e / (tol.atol + tol.rtol * np.abs(a.astype(np.float32))))) for e, a in zip(d, base))
                diffs.append({"set": label, "vs": f"{key[0]}/{'all' if key[1] else 'basic'}",
                              "max_abs": max(float(e.max()) for e in d), "tolerance_share": share})
    for r in diffs:
        print(json.dumps(r), flush=True)
    gated, t_gated = timed(lambda: OrtGatedBackend(model, spec.precision,
                                                   ["CPUExecutionProvider"] if args.cpu else None))
    runner = gated.prepare(sets["20"])
    _, t_g1 = timed(runner.run, samples[0])
    t0 = time.perf_counter()
    for s in samples[1:]:
        runner.run(s)
    t_grest = (time.perf_counter() - t0) / max(1, len(samples) - 1)
    g = {"gated_session_s": t_gated, "gated_first_run_s": t_g1, "gated_run_s": t_grest}
    print(json.dumps(g), flush=True)
    (args.out / "eval_profile.json").write_text(json.dumps({"rows": rows, "diffs": diffs, "gated": g}, indent=1))


if __name__ == "__main__":
    main()
