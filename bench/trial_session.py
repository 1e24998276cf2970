"""What one trial of a per-set backend costs before it runs: the mixed graph built and its ONNX Runtime session made
(ort-cpu here; the graph building is the same Python on a GPU machine, where whisper-base's confirmation spent 4-7 s a
trial, 39 trials). Side by side in one process, alternating, on the same random fallback sets: as before (the
mixed graph's value_info from ONNX's shape inference of it, its weights and their FP16 copies in the graph) and as
now (the value_info derived from the model's inferred shapes; then also the weights and their copies in the model's
weight files, each copy converted once: the first set pays it); every session's outputs on one sample must be
equal.

    python3 bench/trial_session.py .large/whisper-base/model.onnx .large/mpnet-base/model.onnx --sets 3

(a model folder of .large: model.onnx and samples.npz, whose sample 0 is fed as it is)
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from precision_doctor.backends import ort as ort_backend  # noqa: E402
from precision_doctor.backends.ort import OrtBackend  # noqa: E402
from precision_doctor.graph.mixed import build_mixed  # noqa: E402
from precision_doctor.graph.model import load_model  # noqa: E402


def first_sample(path: Path) -> dict[str, np.ndarray]:
    """The first sample of a large model's samples.npz (bench/large_prepare.py: keys "sN/input"; models taking raw
    arrays: whisper-base, mpnet-base)."""
    with np.load(path) as z:
        return {k.split("/", 1)[1]: z[k] for k in z.files if k.startswith("s0/")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--sets", type=int, default=3, help="fallback sets per model (each timed both ways)")
    a = ap.parse_args()
    print("| model | nodes | before (s) | value_info derived (s) | and weights in files (s) | same value_info | "
          "same outputs |\n|---|---|---|---|---|---|---|")
    for path in a.models:
        model = load_model(path)
        names = [n.name for n in model.candidates]
        rng = random.Random(0)
        sample = first_sample(path.parent / "samples.npz")
        variants = {"before": ({}, False), "value_info": (model.value_info, False), "now": (model.value_info, True)}
        times: dict[str, list[float]] = {v: [] for v in variants}
        same_info = same_out = True
        for _ in range(a.sets):
            fallback = frozenset(rng.sample(names, len(names) * 2 // 5))
            outs, infos = {}, {}
            for label, (info, lean) in variants.items():
                kept = model.value_info
                model.value_info = info  # none: build_mixed runs ONNX's shape inference
                ort_backend.build_mixed = lambda *a, lean_=lean, **k: build_mixed(*a, **{**k, "lean": lean_})
                backend = OrtBackend(model, "fp16", ["CPUExecutionProvider"])
                t = time.perf_counter()
                runner = backend.prepare(fallback)
                times[label].append(time.perf_counter() - t)
                model.value_info, ort_backend.build_mixed = kept, build_mixed
                outs[label] = runner.run(sample)
                backend.close()
                infos[label] = [v.SerializeToString() for v in build_mixed(replace(model, value_info=info), fallback,
                                                                          "fp16").graph.value_info]
            same_info &= infos["before"] == infos["now"]
            same_out &= all(np.array_equal(outs["before"][k], o[k], equal_nan=True) for o in outs.values() for k in o)
        b, v, n = (statistics.median(times[k]) for k in variants)
        print(f"| {path.parent.name or path.stem} | {len(model.nodes)} | {b:.2f} | {v:.2f} ({v / b:.2f}x) | "
              f"{n:.2f} ({n / b:.2f}x) | {'yes' if same_info else 'NO'} | {'yes' if same_out else 'NO'} |", flush=True)

if __name__ == "__main__":
    main()
