"""The capture's analysis with its tensors on one thread and on ANALYSIS_THREADS (measure/analysis.py), on one
zoo model's capture of natural-image renders: seconds for each, and whether the two analyses are identical.

    python3 bench/analysis_threads.py --zoo zoo --out $OUT/analysis     # on the GPU machine's 16 cores
    .venv/bin/python bench/analysis_threads.py --zoo zoo --samples 2 --out /tmp/at

Writes analysis_threads.json under --out and prints it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from natural_images import natural_images_nchw

from precision_doctor.batch.recipes import discover
from precision_doctor.data.activations import ActivationStore
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.model import load_model
from precision_doctor.measure import analysis
from precision_doctor.measure.capture import capture
from precision_doctor.spec import RunSpec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, default=Path("zoo"))
    ap.add_argument("--model", default="nudenet-320n")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    spec = {s.name: s for s in discover(args.zoo, RunSpec(model=""))}[args.model].spec
    model = load_model(spec.model)
    samples = [{model.inputs[0]: x} for x in natural_images_nchw(args.samples, 320, 320, seed=2026)]
    path = args.out / "activations.h5"
    t0 = time.perf_counter()
    capture(model, samples, get_format(spec.precision), path, group_mb=256.0, compression=None)
    result: dict = {"model": args.model, "samples": len(samples), "capture_s": round(time.perf_counter() - t0, 2)}
    seen = {}
    with ActivationStore(path) as store:
        for threads in (1, analysis.ANALYSIS_THREADS, 1):
            analysis.ANALYSIS_THREADS = threads
            t0 = time.perf_counter()
            got = analysis.analyse(store, model=model)
            result.setdefault(f"threads_{threads}_s", []).append(round(time.perf_counter() - t0, 2))
            seen[threads] = repr((got.layers, got.tensors))
    result["identical"] = len(set(seen.values())) == 1
    path.unlink()
    (args.out / "analysis_threads.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
