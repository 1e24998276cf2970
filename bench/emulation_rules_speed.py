"""What the `ort-cuda` rules cost the emulator: one evaluation (every sample of the recipe) under the
standard rule and under `ort-cuda` (node rules and fusions: anchors branch on their pattern's gates,
a Conv+BN anchor computes its folded Conv again), per zoo model, on three fallback sets, interleaved
so that load from other processes hits both alike; plus the time to build each emulator.

    .venv/bin/python bench/emulation_rules_speed.py --zoo zoo --repeats 5

Results: bench/out/emulation_rules_speed.json and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from _common import OUT, loadavg, table, write_results
from _zoo import zoo_works

from precision_doctor.backends.emulate import EmulateBackend

RULES = ("standard", "ort-cuda")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, default=OUT / "zoo")
    ap.add_argument("--only", help="models, comma-separated")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rows = []
    for w in zoo_works(args.zoo, set(args.only.split(",")) if args.only else None):
        build, emus = {}, {}
        for r in RULES:
            t = time.perf_counter()
            emus[r] = EmulateBackend(w.model, "fp16", rules=r)
            build[r] = time.perf_counter() - t
        cands = [c.name for c in w.model.candidates]
        rng = np.random.default_rng(0)
        sets = {"all-fp16": frozenset(), "random 50%": frozenset(c for c in cands if rng.random() < 0.5),
                "all-fp32": frozenset(cands)}
        for name, fb in sets.items():
            times: dict[str, list[float]] = {r: [] for r in RULES}
            for k in range(args.repeats + 1):  # the first round warms up
                for r in (RULES if k % 2 else RULES[::-1]):
                    runner = emus[r].prepare(fb)
                    t = time.perf_counter()
                    for s in w.samples:
                        runner.run(s)
                    if k:
                        times[r].append(time.perf_counter() - t)
            med = {r: statistics.median(v) for r, v in times.items()}
            rows.append({"model": w.name, "set": name, "samples": len(w.samples),
                         **{f"{r} s": med[r] for r in RULES}, "ort-cuda / standard": med["ort-cuda"] / med["standard"],
                         **{f"build {r} s": build[r] for r in RULES}})
        print(f"{w.name} done", flush=True)
    headers = list(rows[0]) if rows else []
    print(table(headers, [[r[h] for h in headers] for r in rows]))
    write_results("emulation_rules_speed", {"rows": rows, "loadavg": loadavg(), "repeats": args.repeats})


if __name__ == "__main__":
    main()
