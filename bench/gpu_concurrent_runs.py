"""Whether the oracle's concurrent runs (`concurrent_runs`, search/oracle.py) pay on a GPU: one zoo model's search
samples evaluated for a few fallback sets with 1, 2, 4 and 8 runs at once, on the gated graph (ort-cuda-gated: one
session) and on the real mixed graph (ort-cuda: a new session per set, its first run alone), checking that every
width gives the same verdicts.

    python3 bench/gpu_concurrent_runs.py --zoo zoo --out $OUT/concurrent       # on the GPU machine
    .venv/bin/python bench/gpu_concurrent_runs.py --zoo zoo --samples 6 --out /tmp/cr   # CPU: plumbing only

Writes concurrent_runs.json under --out and prints it.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from natural_images import natural_images_nchw

from precision_doctor.backends.ort import OrtBackend
from precision_doctor.backends.ort_gated import OrtGatedBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.batch.recipes import discover
from precision_doctor.graph.model import load_model
from precision_doctor.search import Oracle
from precision_doctor.spec import RunSpec

WIDTHS = (1, 2, 4, 8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, default=Path("zoo"))
    ap.add_argument("--model", default="nudenet-320n")
    ap.add_argument("--samples", type=int, default=24)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    spec = {s.name: s for s in discover(args.zoo, RunSpec(model=""))}[args.model].spec
    model = load_model(spec.model)
    name = model.inputs[0]
    samples = [{name: x} for x in natural_images_nchw(args.samples, 320, 320, seed=2026)]
    ref = ReferenceRunner(model)
    refs = [ref.run(s) for s in samples]
    ref.close()
    candidates = sorted(n.name for n in model.candidates)
    rng = random.Random(0)
    sets = {"none": frozenset(), "all": frozenset(candidates),
            **{f"random{k}": frozenset(rng.sample(candidates, k)) for k in (20, 60, 120)}}
    result: dict = {"samples": len(samples), "sets": {k: len(v) for k, v in sets.items()}}
    for label, make in (("gated", lambda: OrtGatedBackend(model, spec.precision)),
                        ("mixed", lambda: OrtBackend(model, spec.precision, cache_size=0))):
        backend = make()
        result[f"{label}_backend"] = backend.name
        rows, verdicts = {}, {}
        for width in WIDTHS:
            backend.concurrent_runs = width
            oracle = Oracle(backend, samples, refs, spec.search_tolerance)
            times = {}
            for key, fb in sets.items():
                t0 = time.perf_counter()
                v = oracle.evaluate(fb)
                times[key] = round(time.perf_counter() - t0, 4)
                verdicts.setdefault(key, set()).add((v.passed, v.failed_sample, repr(sorted(
                    (k, c.max_abs) for k, c in v.outputs.items()))))
            oracle._pool and oracle._pool.shutdown()
            rows[width] = times
            print(label, width, times, flush=True)
        backend.close()
        result[label] = rows
        result[f"{label}_same_verdicts"] = all(len(v) == 1 for v in verdicts.values())
        result[f"{label}_verdicts"] = {k: sorted(map(str, v))[0][:60] for k, v in verdicts.items()}
    (args.out / "concurrent_runs.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
