"""Does the GPU search graph measure what each target executes (issue 35)? On ONNX Runtime CUDA, for models of a zoo
directory (and the planted decomposed-LayerNorm block), per target:

- `ort-cuda`: the gated graph with ORT's fusion sites gated whole (`graph.native.fusion_units`) at ORT_ENABLE_ALL
  against the deployed mixed graph (fixed.onnx's form) at ORT_ENABLE_ALL, and the per-node gated graph against the
  same (the form the issue found breaking the LayerNorm fusion);
- `tensorrt`: the per-node gated graph against the mixed graph, both with graph optimizations disabled (the proxy).

For the all-low set and a few sets keeping one node of each fusion unit in FP32: each output's largest difference
in FP16 units and each graph's share of the tolerance against FP32. Writes DIR/target_checks.json, prints a table.

    python3 bench/gpu_target_checks.py --zoo zoo --out $OUT        # on a GPU
    .venv/bin/python bench/gpu_target_checks.py --cpu --out DIR     # plumbing: ORT's CPU provider (not FP16's verdicts)

On the CPU the figures mean nothing about FP16 (the CPU provider computes chains of FP16 nodes without kernels in
FP32, and differently inside a unit's branch than across per-node Ifs); that the graphs compute the same thing node
for node is tests/graph/test_target.py's (ONNX's reference evaluator). On the GPU: "ort-cuda units" should agree with the
deployed graph within a few FP16 units on every set, "ort-cuda per-node" should not where ORT fuses (the issue's
LayerNorm), "tensorrt proxy" should agree everywhere.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from precision_doctor.backends.ort import OrtBackend
from precision_doctor.backends.ort_gated import OrtGatedBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.formats import FP16
from precision_doctor.graph.model import from_proto, load_model
from precision_doctor.graph.native import fusion_units
from precision_doctor.measure.tolerance import Tolerance, check_all
from precision_doctor.planted import layernorm_block

FORMS = {  # name -> (gated graph's units, graph optimization level)
    "ort-cuda units": (True, "all"), "ort-cuda per-node": (False, "all"), "tensorrt proxy": (False, "disabled"),
}


def _ulps(a: np.ndarray, b: np.ndarray) -> float:
    """The largest difference between two FP16-valued arrays in FP16 units at the larger magnitude."""
    a16, b16 = a.astype(np.float16), b.astype(np.float16)
    spacing = np.spacing(np.maximum(np.abs(a16), np.abs(b16))).astype(np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.abs(a16.astype(np.float32) - b16.astype(np.float32)) / spacing
    return float(np.nanmax(np.where(np.isfinite(d), d, np.inf))) if d.size else 0.0


def check(model, samples, providers, tol: Tolerance) -> list[dict]:
    ref = ReferenceRunner(model)
    refs = [ref.run(s) for s in samples]
    units = fusion_units(model, FP16)
    sets = {"all low": frozenset(), "one FP32 in each unit": frozenset(u[1] for u in units)}
    rows = []
    for form, (whole, level) in FORMS.items():
        gated = OrtGatedBackend(model, "fp16", providers, level=level, units=whole)
        mixed = OrtBackend(model, "fp16", providers, level=level, cache_size=1)
        try:
            for label, fb in sets.items():
                g, m = gated.prepare(fb), mixed.prepare(fb)
                worst = {"ulps": 0.0, "gated_share": 0.0, "mixed_share": 0.0}
                for s, r in zip(samples, refs):
                    go, mo = g.run(s), m.run(s)
                    worst["ulps"] = max(worst["ulps"], *(_ulps(go[k], mo[k]) for k in go))
                    for key, outs in (("gated_share", go), ("mixed_share", mo)):
                        share = max(c.tol_used for c in check_all(outs, r, tol).values())
                        worst[key] = max(worst[key], float(share))
                rows.append({"form": form, "set": label, "units": len(gated.graph.units), **worst})
        finally:
            gated.close()
            mixed.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, help="a directory of .onnx models (random inputs of their declared shapes)")
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--cpu", action="store_true", help="ORT's CPU provider: plumbing only")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    providers = ["CPUExecutionProvider"] if args.cpu else ["CUDAExecutionProvider", "CPUExecutionProvider"]
    case = layernorm_block()
    models = {"planted:layernorm_block": (from_proto(case.model), case.samples(args.samples), Tolerance(case.atol, case.rtol))}
    for path in sorted(args.zoo.glob("*.onnx")) if args.zoo else []:
        model = load_model(path)
        rng = np.random.default_rng(0)
        shapes = {name: [d if isinstance(d, int) and d > 0 else 1 for d in dims]
                  for name, dims in model.declared_shapes.items()}
        samples = [{n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()} for _ in range(args.samples)]
        models[path.stem] = (model, samples, Tolerance(1e-2, 1e-2))
    out: dict = {}
    for name, (model, samples, tol) in models.items():
        try:
            out[name] = check(model, samples, providers, tol)
        except Exception as exc:  # a model this script cannot feed (integer inputs...): say so, go on
            out[name] = [{"error": f"{type(exc).__name__}: {str(exc)[:200]}"}]
        for row in out[name]:
            print(name, json.dumps(row))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "target_checks.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
