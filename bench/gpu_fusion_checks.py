"""The fusions whose behaviour on ONNX Runtime 1.31.1's CUDA provider the sources left open (GPU session E, round 2):
small synthetic patterns run all-FP16 on the provider at ORT_ENABLE_ALL, against the emulator under `ort-cuda`.

    python3 bench/gpu_fusion_checks.py --out $OUT                    # on a GPU
    .venv/bin/python bench/gpu_fusion_checks.py --cpu --out DIR      # plumbing check: ORT's CPU provider

Cases (each a decomposed pattern on real-looking random data):

- `ln-eps`: a LayerNorm on a graph input with epsilon 1e-2 and inputs of variance ~1e-2: does the fused node take
  the FP16 constant (1.0002e-2, ONNX Runtime 1.32 on the CPU; what `layernorm-fusion` does) or the default 1e-5?
- `ln-interior`: a LayerNorm reading a MatMul's FP16 output (no Cast to remove): one rounding from rounded x?
- `skip-ln`: Add(x, MatMul(x)) then a LayerNorm: does SkipLayerNormFusion make one kernel (not modelled:
  `graph.coverage.FUSED_PAIRS`)?
- `convtranspose-bn`: ConvTranspose + BatchNormalization: folded (the newest ConvBNFusion) or not?
- `gelu-mul`: Gelu's Erf form multiplying by 1/sqrt(2) instead of dividing by sqrt(2): fused (newer sources) or not?
- `bias-gelu`: Add of a bias then the Erf-form Gelu: BiasGelu?

Per case: the op types of ORT's optimized all-FP16 graph, and how the provider's outputs compare with the
emulator's (the share of elements equal after rounding to FP16, the largest difference in FP16 units, the
largest relative error of each against FP32). Writes DIR/fusion_checks.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import onnx
from gpu_opprobe import _run, _session, optimized_ops
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.formats import FP16
from precision_doctor.graph.mixed import build_mixed
from precision_doctor.graph.model import from_proto
from precision_doctor.measure.fidelity import agreement, error_stats

node = helper.make_node
N = 64  # features


def _f32(name, v):
    return numpy_helper.from_array(np.asarray(v, np.float32), name)


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _layernorm(x: str, y: str, eps: str, tag: str) -> list[onnx.NodeProto]:
    names = [f"{tag}_{k}" for k in ("m", "d", "p", "v", "e", "s", "n", "g")]
    m, d, p, v, e, s, n, g = names
    return [node("ReduceMean", [x], [m], name=f"{tag}_mean", axes=[-1]), node("Sub", [x, m], [d], name=f"{tag}_sub"),
            node("Pow", [d, "two"], [p], name=f"{tag}_pow"), node("ReduceMean", [p], [v], name=f"{tag}_var", axes=[-1]),
            node("Add", [v, eps], [e], name=f"{tag}_eps"), node("Sqrt", [e], [s], name=f"{tag}_sqrt"),
            node("Div", [d, s], [n], name=f"{tag}_div"), node("Mul", [n, "gamma"], [g], name=f"{tag}_mul"),
            node("Add", [g, "beta"], [y], name=f"{tag}_add")]


def _gelu(x: str, y: str, tag: str, by_mul: bool = False) -> list[onnx.NodeProto]:
    scaled = (node("Mul", [x, "rsqrt2"], [f"{tag}_s"], name=f"{tag}_scale") if by_mul else
              node("Div", [x, "sqrt2"], [f"{tag}_s"], name=f"{tag}_scale"))
    return [scaled, node("Erf", [f"{tag}_s"], [f"{tag}_e"], name=f"{tag}_erf"),
            node("Add", [f"{tag}_e", "one"], [f"{tag}_a"], name=f"{tag}_add"),
            node("Mul", [x, f"{tag}_a"], [f"{tag}_m"], name=f"{tag}_mul"),
            node("Mul", [f"{tag}_m", "half"], [y], name=f"{tag}_half")]


def cases(rng: np.random.Generator) -> dict[str, tuple[onnx.ModelProto, list[dict]]]:
    consts = [_f32("two", 2.0), _f32("gamma", rng.uniform(0.5, 2, N)), _f32("beta", rng.standard_normal(N) * 0.5),
              _f32("w", rng.standard_normal((N, N)) / np.sqrt(N)), _f32("eps5", 1e-5), _f32("eps2", 1e-2),
              _f32("sqrt2", np.sqrt(2)), _f32("rsqrt2", 1 / np.sqrt(2)), _f32("one", 1.0), _f32("half", 0.5),
              _f32("bias", rng.standard_normal(N))]
    rows = lambda scale, shift=0.0: [{"x": (rng.standard_normal((8, N)) * scale + shift).astype(np.float32)}  # noqa: E731
                                     for _ in range(3)]

    def model(nodes, outputs, inits=(), inputs=(("x", [8, N]),), opset=17):
        g = helper.make_graph(nodes, "check", [_vi(n, s) for n, s in inputs], [_vi(n, s) for n, s in outputs],
                              consts + list(inits))
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)

    out = {
        "ln-eps": (model(_layernorm("x", "y", "eps2", "ln"), [("y", [8, N])]), rows(0.1, 3.0)),
        "ln-interior": (model([node("MatMul", ["x", "w"], ["h"], name="mm"), *_layernorm("h", "y", "eps5", "ln")],
                              [("y", [8, N])]), rows(2.0)),
        "skip-ln": (model([node("MatMul", ["x", "w"], ["h"], name="mm"), node("Add", ["x", "h"], ["r"], name="residual"),
                           *_layernorm("r", "y", "eps5", "ln")], [("y", [8, N])]), rows(2.0)),
        "gelu-mul": (model([node("MatMul", ["x", "w"], ["h"], name="mm"), *_gelu("h", "y", "g", by_mul=True)],
                           [("y", [8, N])]), rows(2.0)),
        "bias-gelu": (model([node("MatMul", ["x", "w"], ["h"], name="mm"), node("Add", ["h", "bias"], ["hb"], name="bias_add"),
                             *_gelu("hb", "y", "g")], [("y", [8, N])]), rows(2.0)),
    }
    c = 8
    bn = [_f32("ct_w", rng.standard_normal((c, c, 2, 2)) * 0.3), _f32("ct_b", rng.standard_normal(c)),
          _f32("bn_s", rng.uniform(0.5, 3, c)), _f32("bn_b", rng.standard_normal(c)), _f32("bn_m", rng.standard_normal(c)),
          _f32("bn_v", rng.uniform(0.05, 2, c))]
    ct = [node("ConvTranspose", ["x", "ct_w", "ct_b"], ["t"], name="convt", strides=[2, 2]),
          node("BatchNormalization", ["t", "bn_s", "bn_b", "bn_m", "bn_v"], ["y"], name="bn")]
    images = [{"x": (rng.standard_normal((1, c, 6, 6)) * 2).astype(np.float32)} for _ in range(3)]
    out["convtranspose-bn"] = (model(ct, [("y", [1, c, 12, 12])], bn, (("x", [1, c, 6, 6]),), opset=15), images)
    return out


def check(proto: onnx.ModelProto, samples: list[dict], providers: list) -> dict:
    m = from_proto(proto)
    outs = list(m.outputs)
    refs = [ReferenceRunner(m, outs).run(s) for s in samples]
    sess = _session(build_mixed(m, frozenset(), "fp16"), providers, "all")
    with EmulateBackend(m, "fp16", rules="ort-cuda") as be:
        runner = be.prepare(frozenset())
        emu = [runner.run(s, outs) for s in samples]
    real = [_run(sess, s, outs) for s in samples]
    rows = []
    for r, e, ref in zip(real, emu, refs):
        for t in outs:
            a = agreement(e[t], r[t].astype(np.float16).astype(np.float32), FP16)
            rows.append({"exact": a["exact"], "max_ulp_diff": a["max_ulp_diff"],
                         "provider_max_rel": error_stats(r[t], ref[t], FP16, "max_rel")["max_rel"],
                         "emulated_max_rel": error_stats(e[t], ref[t], FP16, "max_rel")["max_rel"]})
    return {"optimized": optimized_ops(build_mixed(m, frozenset(), "fp16"), providers),
            "exact_min": min(r["exact"] for r in rows), "max_ulp_diff": max(r["max_ulp_diff"] for r in rows),
            "samples": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", action="store_true", help="plumbing check: ORT's CPU provider plays the GPU")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    providers = ["CPUExecutionProvider"] if args.cpu else [("CUDAExecutionProvider", {"use_tf32": "0"}),
                                                             "CPUExecutionProvider"]
    result = {}
    print("| case | optimized all-FP16 graph | emulator = provider (min share of elements) | max FP16 units apart | "
          "provider max rel | emulated max rel |\n|---|---|---|---|---|---|")
    for name, (proto, samples) in cases(np.random.default_rng(0)).items():
        try:
            r = result[name] = check(proto, samples, providers)
        except Exception as exc:  # noqa: BLE001 (the other cases go on)
            result[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            print(f"| {name} | FAILED: {result[name]['error'][:120]} | | | | |")
            continue
        ops = ", ".join(f"{k} {v}" for k, v in r["optimized"].items() if k != "Cast")
        worst = {k: max(s[k] for s in r["samples"]) for k in ("provider_max_rel", "emulated_max_rel")}
        print(f"| {name} | {ops} | {r['exact_min']:.3f} | {r['max_ulp_diff']:g} | {worst['provider_max_rel']:.3g} | "
              f"{worst['emulated_max_rel']:.3g} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fusion_checks.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
