"""Whether evaluations of several fallback sets overlap on one GPU: the search's sweeps try one removal after another,
most of which fail at their first sample (on the H200 whisper-base's gated graph cost 141-203 ms a sample, its GPU
mostly idle: the If nodes' host round trips), so trying the next few removals side by side, on threads, would cut the
sweeps' time if the runs overlap. This measures it, in one process, on the same random fallback sets and sample:

- gated (`ort-cuda-gated`, one session, a set is a feed): N sets one after the other, then the same N on 2, 4 and 8
  threads (each thread a run of its own set on the shared session);
- real (`ort-cuda`, a lean session per set): N sets' graphs and sessions made and run once, one after the other,
  then on 2 and 4 threads (each thread its own backend: the session cache is not shared across threads).

Prints the wall time of each and its ratio to one at a time (1.00x: no overlap; 1/threads: full overlap), and checks
that each set's outputs are the same on a thread as alone.

    python3 bench/gpu_parallel.py /tmp/b/large/whisper-base/model.onnx --sets 8      # on the GPU machine
    python3 bench/gpu_parallel.py .large/whisper-base/model.onnx --cpu --sets 2       # plumbing, here
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_set_cost import LEVEL, samples_of  # noqa: E402

from precision_doctor.backends.ort import CUDA, OrtBackend  # noqa: E402
from precision_doctor.backends.ort_gated import OrtGatedBackend  # noqa: E402
from precision_doctor.graph.model import load_model  # noqa: E402
from precision_doctor.graph.targets import runtime  # noqa: E402


def wall(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def same(a: dict, b: dict) -> bool:
    return all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--sets", type=int, default=8, help="random fallback sets (40%% of the candidates each)")
    ap.add_argument("--target", default="ort-cuda", choices=sorted(LEVEL))
    ap.add_argument("--cpu", action="store_true", help="the CPU provider: plumbing only")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    providers = ["CPUExecutionProvider"] if a.cpu else [CUDA]
    model = load_model(a.model)
    sample = samples_of(a.model.parent / "samples.npz", 1)[0]
    names = [n.name for n in model.candidates]
    rng = random.Random(0)
    sets = [frozenset(rng.sample(names, len(names) * 2 // 5)) for _ in range(a.sets)]
    level, units = LEVEL[a.target], runtime(a.target).fused_units
    gated = OrtGatedBackend(model, "fp16", providers=providers, outputs=model.outputs, level=level, units=units)
    gated.prepare(sets[0]).run(sample)  # warm: the first run's one-time work
    alone = {fb: gated.prepare(fb).run(sample) for fb in sets}
    rows = []

    def gated_on(threads: int) -> float:
        outs: dict = {}

        def one(fb):
            outs[fb] = gated.prepare(fb).run(sample)

        try:
            if threads == 1:
                t = wall(lambda: [one(fb) for fb in sets])
            else:
                with ThreadPoolExecutor(threads) as pool:
                    t = wall(lambda: list(pool.map(one, sets)))
        except Exception as exc:  # noqa: BLE001 (on the H200: cuBLAS failed under concurrent runs of one session)
            rows.append({"form": "gated", "threads": threads, "wall_s": None, "same": None,
                         "error": str(exc).splitlines()[0][:300]})
            return float("nan")
        rows.append({"form": "gated", "threads": threads, "wall_s": t, "same": all(same(outs[fb], alone[fb]) for fb in sets)})
        return t

    base = gated_on(1)
    for k in (2, 4, 8):
        t = gated_on(k)
        if t != t:  # nan: it failed; the session may be broken since
            break
    gated.close()
    real_sets = sets[: max(2, a.sets // 2)]

    def real_on(threads: int) -> float:
        backends = [OrtBackend(model, "fp16", providers=providers, outputs=model.outputs, level=level, cache_size=1)
                    for _ in range(threads)]

        def one(i_fb):
            i, fb = i_fb
            b = backends[i % threads]
            out = b.prepare(fb).run(sample)
            b.release()
            return out

        if threads == 1:
            t = wall(lambda: [one(x) for x in enumerate(real_sets)])
        else:
            with ThreadPoolExecutor(threads) as pool:
                t = wall(lambda: list(pool.map(one, enumerate(real_sets))))
        for b in backends:
            b.close()
        rows.append({"form": "real", "threads": threads, "wall_s": t, "same": None})
        return t

    real_on(1)  # warm: the weight files' FP16 copies are made by the first set
    rows.pop()
    real_base = real_on(1)
    for k in (2, 4):
        real_on(k)
    print(f"{a.model.parent.name}: {len(names)} candidates, {len(sets)} sets (real: {len(real_sets)}), "
          f"{'CPU (plumbing)' if a.cpu else 'CUDA'}\n")
    print("| form | threads | wall | per set | ratio to one at a time | outputs as alone |\n|---|---|---|---|---|---|")
    for r in rows:
        if r.get("error"):
            print(f"| {r['form']} | {r['threads']} | failed: {r['error']} | - | - | - |")
            continue
        n = len(sets) if r["form"] == "gated" else len(real_sets)
        ref = base if r["form"] == "gated" else real_base
        print(f"| {r['form']} | {r['threads']} | {r['wall_s']:.2f} s | {1e3 * r['wall_s'] / n:.0f} ms | "
              f"{r['wall_s'] / ref:.2f}x | {'-' if r['same'] is None else 'yes' if r['same'] else 'NO'} |")
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "parallel.json").write_text(json.dumps({"model": str(a.model), "cpu": a.cpu, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
