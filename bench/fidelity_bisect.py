"""Which FP32 nodes make the gated search graph and the real graph compute different values: delta debugging over a
fallback set on which the two disagree (the `ort-cuda` target: the If-form gated graph with fusion units at
ORT_ENABLE_ALL against the real mixed graph at ORT_ENABLE_ALL), down to a small set that still disagrees; then
each of its nodes, its op type, its fusion unit and its neighbours, and whether it alone makes the two disagree.

    python3 bench/fidelity_bisect.py /tmp/b/large/whisper-base/model.onnx --samples 2 \\
        --input-shapes 'input_features:[1,80,3000]' --input-shapes 'decoder_input_ids:[1,40]' --set 2 --set 4
    python3 bench/fidelity_bisect.py .gpucheck/ln17/model.onnx --cpu --samples 2 --set 1   # plumbing, here

`--set K`: the K-th set of bench/ort_fusion_probe.py's list (0: all low; K: its K-th random set, 40% of the
candidates FP32, the same seed). Two graphs disagree where any output of any sample differs by more than --apart.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gpu_set_cost import random_sets, samples_of  # noqa: E402
from precision_doctor.backends.ort import OrtBackend  # noqa: E402
from precision_doctor.backends.ort_gated import OrtGatedBackend  # noqa: E402
from precision_doctor.data.inputs import parse_input_shapes  # noqa: E402
from precision_doctor.graph.formats import get_format  # noqa: E402
from precision_doctor.graph.model import load_model  # noqa: E402
from precision_doctor.graph.native import fusion_units  # noqa: E402


class Pair:
    """The gated and the real graph of a model, and how far apart their outputs are on a set."""

    def __init__(self, model, precision: str, providers: list, samples: list, apart: float):
        self.gated = OrtGatedBackend(model, precision, providers=providers, outputs=model.outputs, level="all",
                                     units=True, forms=("if",))
        self.real = OrtBackend(model, precision, providers=providers, outputs=model.outputs, level="all")
        self.samples, self.apart, self.tests = samples, apart, 0

    def distance(self, fb: frozenset[str]) -> float:
        self.tests += 1
        g, r = self.gated.prepare(fb), self.real.prepare(fb)
        worst = 0.0
        for s in self.samples:
            a, b = g.run(s), r.run(s)
            for k in a:
                d = np.abs(a[k].astype(np.float64) - b[k].astype(np.float64))
                worst = max(worst, float(np.nanmax(d)) if d.size else 0.0, float("inf") if np.isnan(d).any() else 0.0)
        self.real.release()
        return worst

    def differ(self, fb: frozenset[str]) -> bool:
        return self.distance(fb) > self.apart


def ddmin(pair: Pair, fb: list[str], limit: int, deadline: float) -> list[str]:
    """A small subset of `fb` on which the two graphs still disagree (Zeller's ddmin, bounded by tests and time)."""
    n = 2
    while len(fb) >= 2 and pair.tests < limit and time.monotonic() < deadline:
        size = -(-len(fb) // n)
        chunks = [fb[i:i + size] for i in range(0, len(fb), size)]
        for c in chunks:  # a chunk alone
            if pair.differ(frozenset(c)):
                fb, n = c, 2
                break
        else:
            for c in chunks:  # a chunk left out
                rest = [x for x in fb if x not in set(c)]
                if pair.differ(frozenset(rest)):
                    fb, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(fb):
                    break
                n = min(len(fb), 2 * n)
    return fb


def describe(model, units: list[tuple[str, ...]], names: list[str], pair: Pair) -> None:
    unit_of = {m: u for u in units for m in u}
    producers = {t: n for n in model.nodes for t in n.outputs if t}
    readers: dict[str, list] = {}
    for n in model.nodes:
        for t in n.inputs:
            readers.setdefault(t, []).append(n)
    for name in names:
        n = model.node(name)
        ins = [f"{producers[t].op_type}" + ("*" if producers[t].name in names else "") for t in n.inputs if t in producers]
        outs = [f"{r.op_type}" + ("*" if r.name in names else "") for t in n.outputs for r in readers.get(t, [])]
        unit = unit_of.get(name)
        alone = pair.distance(frozenset([name]))
        print(f"  {name} ({n.op_type}); reads {ins}, read by {outs}; unit: "
              f"{'none' if unit is None else [model.node(m).op_type for m in unit]}; alone apart by {alone:.3g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--set", type=int, action="append", default=[])
    ap.add_argument("--apart", type=float, default=1e-2)
    ap.add_argument("--tests", type=int, default=60, help="at most this many tests a set")
    ap.add_argument("--seconds", type=float, default=120, help="at most this long a set")
    ap.add_argument("--input-shapes", action="append", default=[])
    ap.add_argument("--precision", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument("--cpu", action="store_true")
    a = ap.parse_args()
    providers = ["CPUExecutionProvider"] if a.cpu else [("CUDAExecutionProvider", {"use_tf32": "0"})]
    model = load_model(a.model, parse_input_shapes(a.input_shapes) or None)
    names = [n.name for n in model.candidates]
    sets = random_sets(names, max(a.set or [0]))
    pair = Pair(model, a.precision, providers, samples_of(a.model.parent / "samples.npz", a.samples), a.apart)
    units = fusion_units(model, get_format(a.precision))
    for k in a.set:
        pair.tests = 0
        fb = sets[k]
        start = pair.distance(fb)
        print(f"set {k}: {len(fb)} FP32 nodes, apart by {start:.3g}", flush=True)
        if start <= a.apart:
            continue
        small = ddmin(pair, sorted(fb), a.tests, time.monotonic() + a.seconds)
        print(f"set {k}: {len(small)} nodes still apart by {pair.distance(frozenset(small)):.3g} after {pair.tests} tests")
        describe(model, units, small, pair)


if __name__ == "__main__":
    main()
