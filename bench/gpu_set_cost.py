"""What one evaluation costs on a large model, per form of the graph: the gated graph (`ort-cuda-gated`: one session,
a set is a feed) against the real mixed graph (`ort-cuda`: a lean session per set, as a confirmation trial makes).
On the H200 whisper-base's gated graph ran about 0.55 s a sample in its search while a confirmation trial of the
real graph cost 0.5 s where its first sample failed and 6 s for 51 samples: if a new session is that cheap, the real
graph may search faster than the gated one, and it computes what is deployed. This measures it, side by side, in
one process, on the same random fallback sets and samples:

- gated, in each form (If: a subgraph per gate; Where: both sides computed, no control flow): the first run of a
  set, then each further sample's run (ms), and how far the two forms' outputs are apart (0: the same values);
- real: the set's graph and session made, its first run, then each further sample's run;
- the break-even: from how many samples an evaluation costs less on the real form (never: the gated form's
  sample is the cheaper);
- how far apart the two forms' outputs are on each set (the largest absolute difference of any output).

    python3 bench/gpu_set_cost.py /tmp/b/large/whisper-base/model.onnx --sets 4 --samples 6 --target ort-cuda
    python3 bench/gpu_set_cost.py .large/mpnet-base/model.onnx --cpu --sets 1 --samples 2   # plumbing, here

(a model folder of .large: model.onnx and samples.npz, keys "s<j>/<input>"). --cpu runs both forms on ONNX
Runtime's CPU provider (its FP16 is not the GPU's: a check of the bench, not a measurement). Prints a table and,
with --out, writes set_cost.json there.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from precision_doctor.backends.ort import CUDA, OrtBackend  # noqa: E402
from precision_doctor.backends.ort_gated import FORMS, OrtGatedBackend  # noqa: E402
from precision_doctor.graph.model import load_model  # noqa: E402
from precision_doctor.graph.targets import runtime  # noqa: E402


def samples_of(path: Path, n: int) -> list[dict[str, np.ndarray]]:
    """The first `n` samples of a large model's samples.npz."""
    with np.load(path) as z:
        out: dict[int, dict[str, np.ndarray]] = {}
        for k in z.files:
            j, name = k.split("/", 1)
            if int(j[1:]) < n:
                out.setdefault(int(j[1:]), {})[name] = z[k]
    return [out[j] for j in sorted(out)]


def random_sets(names: list[str], n: int) -> list[frozenset[str]]:
    """All low, then `n` random fallback sets of 40% of the candidates (seed 0): the same list in every bench that
    names a set by its index (bench/ort_fusion_probe.py, bench/fidelity_bisect.py)."""
    rng = random.Random(0)
    return [frozenset()] + [frozenset(rng.sample(names, len(names) * 2 // 5)) for _ in range(n)]


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def runs(runner, samples: list[dict[str, np.ndarray]]) -> tuple[dict[str, np.ndarray], float, list[float]]:
    """The first sample's outputs and time, then each further sample's time."""
    first, t_first = timed(lambda: runner.run(samples[0]))
    return first, t_first, [timed(lambda s=s: runner.run(s))[1] for s in samples[1:]]


def real_cheaper_from(g_first: float, g_each: float, r_first: float, r_each: float) -> int | None:
    """The fewest samples an evaluation runs for the real form (r_first: its graph, session and first run) to cost
    less than the gated one: k with r_first + (k-1) r_each < g_first + (k-1) g_each; None: never."""
    if r_first < g_first:
        return 1
    if g_each <= r_each:
        return None
    return int(np.floor((r_first - g_first) / (g_each - r_each))) + 2


def max_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return max(float(np.nanmax(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)))) for k in a)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--sets", type=int, default=3, help="random fallback sets (40%% of the candidates each) and all FP16")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--target", default="ort-cuda", choices=["ort-cuda", "tensorrt"])
    ap.add_argument("--precision", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument("--cpu", action="store_true", help="both forms on the CPU provider: plumbing only")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    providers = ["CPUExecutionProvider"] if a.cpu else [CUDA]
    model = load_model(a.model)
    samples = samples_of(a.model.parent / "samples.npz", a.samples)
    names = [n.name for n in model.candidates]
    sets = random_sets(names, a.sets)
    level = runtime(a.target).ort_level  # the optimization level the target measures at (graph/targets.py)
    units = runtime(a.target).fused_units
    gated, made_gated = {}, {}
    for form in FORMS:  # each form of the gated graph in its own backend (`OrtGatedBackend.choose_form` picks one)
        gated[form], made_gated[form] = timed(lambda form=form: OrtGatedBackend(
            model, a.precision, providers=providers, outputs=model.outputs, level=level, units=units, forms=(form,)))
    real = OrtBackend(model, a.precision, providers=providers, outputs=model.outputs, level=level)
    rows = []
    for fb in sets:
        row: dict = {"fallback": len(fb)}
        outs = {}
        for form, backend in gated.items():
            outs[form], first, rest = runs(backend.prepare(fb), samples)
            row[f"{form}_first_s"], row[f"{form}_each_s"] = first, statistics.median(rest) if rest else first
        r_runner, r_make = timed(lambda fb=fb: real.prepare(fb))
        r_first_out, r_first, r_rest = runs(r_runner, samples)
        real.release()  # as a trial's session is dropped after its set
        r_each = statistics.median(r_rest) if r_rest else r_first
        row.update(real_make_s=r_make, real_first_s=r_first, real_each_s=r_each,
                   real_cheaper_from=real_cheaper_from(row["if_first_s"], row["if_each_s"], r_make + r_first, r_each),
                   max_abs_diff=max_diff(outs["if"], r_first_out), forms_apart=max_diff(outs["if"], outs["where"]))
        rows.append(row)
    for backend in gated.values():
        backend.close()
    real.close()
    made = ", ".join(f"{f} {t:.1f} s" for f, t in made_gated.items())
    print(f"{a.model.parent.name}: {len(model.nodes)} nodes, {len(names)} candidates, {a.precision}, target {a.target}, "
          f"{'CPU (plumbing)' if a.cpu else 'CUDA'}; the gated sessions made in {made}\n")
    print("| FP32 nodes | If form: first run | If: a sample | Where form: first run | Where: a sample | Where / If | "
          "real: graph and session | real: first run | real: a sample | real cheaper than If from (samples) | "
          "If vs real apart | If vs Where apart |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        even = "never" if r["real_cheaper_from"] is None else str(r["real_cheaper_from"])
        print(f"| {r['fallback']} | {r['if_first_s'] * 1e3:.0f} ms | {r['if_each_s'] * 1e3:.0f} ms | "
              f"{r['where_first_s'] * 1e3:.0f} ms | {r['where_each_s'] * 1e3:.0f} ms | "
              f"{r['where_each_s'] / r['if_each_s']:.2f}x | "
              f"{r['real_make_s'] * 1e3:.0f} ms | {r['real_first_s'] * 1e3:.0f} ms | {r['real_each_s'] * 1e3:.0f} ms | "
              f"{even} | {r['max_abs_diff']:.3g} | {r['forms_apart']:.3g} |")
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "set_cost.json").write_text(json.dumps({"model": str(a.model), "target": a.target, "cpu": a.cpu,
                                                         "gated_session_s": made_gated, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
