"""Which of ONNX Runtime's graph optimizations moves a model's low-precision error: the all-FP16 (or BF16) mixed graph,
as the tool deploys it, run on a provider at each optimization level and at ORT_ENABLE_ALL with one optimizer
disabled at a time, each against the FP32 reference; and the fused op types ORT_ENABLE_ALL leaves in the graph.

Where the gated search graph (fusion sites gated whole for the `ort-cuda` target) and the real graph at
ORT_ENABLE_ALL disagree, an optimization the gating does not model is the cause: its row is the one whose removal
moves the share of the tolerance back towards the "disabled" row (every node its own kernel). `--sets N`: also, on
the all-low set and N random ones (40% of the candidates FP32), each sample's share on the gated graph (If form,
fusion units, ORT_ENABLE_ALL: the `ort-cuda` target's search graph) against the real graph's, and the fused op
types ORT makes inside the gated graph's branches against those of the real graph. `--input-shapes` fixes inputs as
a run's `--input-shapes` does (the run's graphs are built from the model with them).

    python3 bench/ort_fusion_probe.py /tmp/b/large/whisper-base/model.onnx --samples 3 --atol 0.1 --rtol 0.01 \
        --input-shapes 'input_features:[1,80,3000]' --input-shapes 'decoder_input_ids:[1,40]' --sets 2
    python3 bench/ort_fusion_probe.py .gpucheck/ln17/model.onnx --cpu --samples 2 --sets 1  # plumbing, here

(a model folder of .large: model.onnx and samples.npz, keys "s<j>/<input>"). Prints a table; --out writes
fusion_probe.json there.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gpu_set_cost import random_sets, samples_of  # noqa: E402
from precision_doctor.backends.ort_gated import OrtGatedBackend  # noqa: E402
from precision_doctor.data.inputs import parse_input_shapes  # noqa: E402
from precision_doctor.graph.formats import get_format  # noqa: E402
from precision_doctor.graph.mixed import build_mixed  # noqa: E402
from precision_doctor.graph.model import load_model  # noqa: E402
from precision_doctor.graph.native import fusion_units, gated_native_graph  # noqa: E402
from precision_doctor.measure.tolerance import Tolerance, check_all  # noqa: E402

LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
          "all": "ORT_ENABLE_ALL"}
# ONNX Runtime's fusions and rewrites that can change values (names as `disabled_optimizers` takes them)
OPTIMIZERS = ["LayerNormFusion", "SimplifiedLayerNormFusion", "SkipLayerNormFusion", "AttentionFusion",
              "EmbedLayerNormFusion", "BiasGeluFusion", "GeluFusion", "FastGeluFusion", "QuickGeluFusion",
              "BiasSoftmaxFusion", "MatMulScaleFusion", "MatMulAddFusion", "GemmActivationFusion", "DivMulFusion",
              "ConvActivationFusion", "ConvAddFusion", "ConvMulFusion", "ConvBNFusion", "MatmulTransposeFusion",
              "CastElimination", "CastChainElimination", "ConstantFolding", "CommonSubexpressionElimination",
              "TransposeOptimizer", "NotWhereFusion", "ReshapeFusion", "ConcatSliceElimination",
              "GatherSliceToSplitFusion", "MatMulBnFusion", "BiasSplitGeluFusion", "DoubleQDQPairsRemover"]


def session(data: bytes, providers: list, level: str, disabled: list[str] = (), save: Path | None = None):
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level])
    so.log_severity_level = 4
    if save is not None:
        so.optimized_model_filepath = str(save)
    return ort.InferenceSession(data, so, providers=providers, disabled_optimizers=list(disabled))


def shares(run, samples, refs, tol: Tolerance) -> list[float]:
    """Each sample's largest share of the tolerance (`run`: feeds -> outputs by name)."""
    out = []
    for s, r in zip(samples, refs):
        worst = 0.0
        for c in check_all(run(s), r, tol).values():
            worst = max(worst, float("inf") if np.isnan(c.tol_used) else float(c.tol_used))
        out.append(worst)
    return out


def share(sess, samples, refs, tol: Tolerance) -> float:
    """The largest share of the tolerance any output of any sample uses."""
    names = [o.name for o in sess.get_outputs()]
    return max(shares(lambda s: dict(zip(names, sess.run(None, s))), samples, refs, tol))


def op_types(graph: onnx.GraphProto, into: collections.Counter | None = None) -> collections.Counter:
    """Op types (domain:op) of a graph and of every subgraph in it."""
    into = collections.Counter() if into is None else into
    for n in graph.node:
        into[f"{n.domain or 'ai.onnx'}:{n.op_type}"] += 1
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                op_types(a.g, into)
    return into


def gated_against_real(model, a, providers, samples, refs, tol: Tolerance) -> dict:
    """Per set (all low, then `a.sets` random ones): each sample's share on the gated If-form graph with fusion units
    at ORT_ENABLE_ALL and on the real mixed graph at ORT_ENABLE_ALL; and the fused op types of each (all low)."""
    from precision_doctor.backends.ort import OrtBackend

    names = [n.name for n in model.candidates]
    sets = random_sets(names, a.sets)
    gated = OrtGatedBackend(model, a.precision, providers=providers, outputs=model.outputs, level="all", units=True,
                            forms=("if",))
    real = OrtBackend(model, a.precision, providers=providers, outputs=model.outputs, level="all")
    rows = []
    print("\n| FP32 nodes | gated (If, units): each sample | real: each sample |\n|---|---|---|")
    for fb in sets:
        g = shares(gated.prepare(fb).run, samples, refs, tol)
        r = shares(real.prepare(fb).run, samples, refs, tol)
        real.release()
        rows.append({"fallback": len(fb), "gated": g, "real": r})
        print(f"| {len(fb)} | {', '.join(f'{x:.3g}' for x in g)} | {', '.join(f'{x:.3g}' for x in r)} |", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        kinds = {}
        fmt = get_format(a.precision)
        whole = gated_native_graph(model, fmt, "if", units=fusion_units(model, fmt)).proto
        for label, proto in (("gated", whole), ("real", build_mixed(model, frozenset(), a.precision, True))):
            path = Path(tmp) / f"{label}.onnx"
            session(proto.SerializeToString(), providers, "all", save=path)
            kinds[label] = op_types(onnx.load(path).graph)
    gated.close()
    real.close()
    fused = sorted(k for k in set(kinds["gated"]) | set(kinds["real"]) if not k.startswith("ai.onnx:") or
                   k in ("ai.onnx:Gemm", "ai.onnx:LayerNormalization", "ai.onnx:Erf", "ai.onnx:Cast"))
    print("\nfused op types, all low (gated graph with its branches -> real graph):")
    for k in fused:
        print(f"  {k}: {kinds['gated'].get(k, 0)} -> {kinds['real'].get(k, 0)}")
    return {"sets": rows, "op_types": {k: [kinds["gated"].get(k, 0), kinds["real"].get(k, 0)] for k in fused}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--atol", type=float, default=0.1)
    ap.add_argument("--rtol", type=float, default=0.01)
    ap.add_argument("--precision", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument("--input-shapes", action="append", default=[], help="NAME:[1,80,3000], as diagnose takes it")
    ap.add_argument("--sets", type=int, default=-1,
                    help="gated against real: the all-low set and this many random ones (default -1: not run)")
    ap.add_argument("--no-optimizers", action="store_true", help="skip the optimizer-by-optimizer rows")
    ap.add_argument("--cpu", action="store_true", help="the CPU provider: plumbing only (its FP16 is not the GPU's)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    providers = ["CPUExecutionProvider"] if a.cpu else [("CUDAExecutionProvider", {"use_tf32": "0"})]
    model = load_model(a.model, parse_input_shapes(a.input_shapes) or None)
    samples = samples_of(a.model.parent / "samples.npz", a.samples)
    tol = Tolerance(atol=a.atol, rtol=a.rtol)
    fp32 = session(model.proto.SerializeToString(), providers, "basic")
    names = [o.name for o in fp32.get_outputs()]
    refs = [dict(zip(names, fp32.run(None, s))) for s in samples]
    del fp32
    data = build_mixed(model, frozenset(), a.precision, True).SerializeToString()
    rows = []

    def row(label: str, level: str, disabled: list[str] = (), save: Path | None = None) -> None:
        t = time.perf_counter()
        try:
            value = share(session(data, providers, level, disabled, save), samples, refs, tol)
        except Exception as exc:  # an optimizer name this ONNX Runtime does not know, a refused graph: recorded
            value = f"{type(exc).__name__}: {str(exc)[:120]}"
        rows.append({"config": label, "share": value, "seconds": time.perf_counter() - t})
        print(f"| {label} | {value if isinstance(value, str) else f'{value:.3g}'} |", flush=True)

    print(f"{a.model.parent.name}: all {a.precision.upper()}, {a.samples} samples, {'CPU' if a.cpu else 'CUDA'}; "
          "the largest share of the tolerance\n\n| configuration | share |\n|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "optimized.onnx"
        for level in LEVELS:
            row(f"level {level}", level, save=saved if level == "all" else None)
        fused = collections.Counter(f"{n.domain or 'ai.onnx'}:{n.op_type}" for n in onnx.load(saved).graph.node) \
            if saved.exists() else collections.Counter()  # the "all" row failed: its error is in the table
        before = collections.Counter(f"ai.onnx:{n.op_type}" for n in onnx.load_from_string(data).graph.node)
    for name in [] if a.no_optimizers else OPTIMIZERS:
        row(f"all without {name}", "all", [name])
    changed = {k: (before.get(k, 0), v) for k, v in fused.items() if before.get(k, 0) != v}
    changed |= {k: (v, 0) for k, v in before.items() if k not in fused}
    print("\nop types ORT_ENABLE_ALL changed (before -> after):")
    for k, (b, v) in sorted(changed.items()):
        print(f"  {k}: {b} -> {v}")
    against = gated_against_real(model, a, providers, samples, refs, tol) if a.sets >= 0 else None
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "fusion_probe.json").write_text(json.dumps({"model": str(a.model), "rows": rows,
                                                              "op_types": changed, "gated": against}, indent=1))


if __name__ == "__main__":
    main()
