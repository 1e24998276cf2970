"""Issue 20's 60 s: the gated native graph's two forms on ORT CUDA, and what a confirmation session costs.

    python3 bench/gpu_gating.py --zoo zoo --out $OUT          # on the GPU machine (onnxruntime-gpu)

On one model (default nudenet-320n, natural-image renders), for three fallback sets (all FP16, every other
candidate FP32, all FP32):

- the If form (`gated_native_graph`, one If per candidate) and the Where form (`where=True`, both sides computed,
  a Where per output), each as a plain session and the Where form also captured as a CUDA graph (ORT's
  `enable_cuda_graph`, IOBinding): session time, first run, the median time per sample;
- how far each form's outputs are from the real mixed graph's (`OrtBackend.prepare`), the same set;
- the real mixed graph's session with cuDNN's algorithm search EXHAUSTIVE (ORT's default), HEURISTIC and DEFAULT:
  session plus first run, per sample, and how far the outputs are from EXHAUSTIVE's.

Writes gating.json under --out and prints it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from natural_images import natural_images_nchw

from precision_doctor.backends.ort import CUDA, OrtBackend
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.mixed import build_mixed
from precision_doctor.graph.model import load_model
from precision_doctor.graph.native import MASK_INPUT, gated_native_graph
from precision_doctor.graph.ort_session import make_session, with_outputs

INPUT = "images"
CPU = False  # --cpu: plumbing only (the CPU provider, no CUDA graph)


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def _diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) for x, y in zip(a, b))


def plain(proto, outs, providers, feeds_of, samples, sets) -> tuple[dict, dict]:
    sess, t_make = _timed(lambda: make_session(proto, providers))
    res = {"session_s": t_make}
    first = True
    outputs = {}
    for label, fb in sets.items():
        times = []
        outputs[label] = []
        for x in samples:
            o, t = _timed(lambda x=x, fb=fb: sess.run(outs, {INPUT: x, **feeds_of(fb)}))
            if first:
                res["first_run_s"], first = t, False
            else:
                times.append(t)
            outputs[label].append(o)
        res[f"per_sample_ms_{label}"] = 1e3 * statistics.median(times or [0])
    return res, outputs


def cuda_graph(proto, outs, shapes, cands, samples, sets) -> tuple[dict, dict]:
    providers = [(CUDA, {"use_tf32": "0", "enable_cuda_graph": "1"})]
    sess, t_make = _timed(lambda: make_session(proto, providers))
    x_ov = ort.OrtValue.ortvalue_from_numpy(samples[0], "cuda", 0)
    mask = np.ones(len(cands), dtype=bool)
    m_ov = ort.OrtValue.ortvalue_from_numpy(mask, "cuda", 0)
    y_ov = [ort.OrtValue.ortvalue_from_shape_and_type(s, np.float32, "cuda", 0) for s in shapes]
    bind = sess.io_binding()
    bind.bind_ortvalue_input(INPUT, x_ov)
    bind.bind_ortvalue_input(MASK_INPUT, m_ov)
    for n, y in zip(outs, y_ov):
        bind.bind_ortvalue_output(n, y)
    res = {"session_s": t_make}
    (_, res["first_run_s"]) = _timed(lambda: sess.run_with_iobinding(bind))
    outputs = {}
    index = {c: i for i, c in enumerate(cands)}
    for label, fb in sets.items():
        m = np.ones(len(cands), dtype=bool)
        m[[index[c] for c in fb]] = False
        m_ov.update_inplace(m)
        times, outputs[label] = [], []
        for x in samples:
            def one(x=x):
                x_ov.update_inplace(x)
                sess.run_with_iobinding(bind)
                return [y.numpy() for y in y_ov]
            o, t = _timed(one)
            times.append(t)
            outputs[label].append(o)
        res[f"per_sample_ms_{label}"] = 1e3 * statistics.median(times)
    return res, outputs


def algo_search(model, fb, outs, samples) -> dict:
    proto = build_mixed(model, frozenset(fb), "fp16", True)
    proto = with_outputs(proto, outs, {o: 1 for o in outs})
    res, ref = {}, None
    for algo in ("EXHAUSTIVE", "HEURISTIC", "DEFAULT"):
        providers = [CUDA] if CPU else [(CUDA, {"use_tf32": "0", "cudnn_conv_algo_search": algo})]
        sess, t_make = _timed(lambda p=providers: make_session(proto, p))
        _, t_first = _timed(lambda s=sess: s.run(outs, {INPUT: samples[0]}))
        got, times = [], []
        for x in samples:
            o, t = _timed(lambda x=x, s=sess: s.run(outs, {INPUT: x}))
            got.append(o)
            times.append(t)
        ref = ref or got
        res[algo] = {"session_s": t_make, "first_run_s": t_first, "per_sample_ms": 1e3 * statistics.median(times),
                     "max_diff_vs_exhaustive": max(_diff(a, b) for a, b in zip(got, ref))}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, default=Path("zoo"))
    ap.add_argument("--model", default="nudenet-320n")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cpu", action="store_true", help="plumbing only: the CPU provider, no CUDA graph")
    args = ap.parse_args()
    global INPUT, CPU, CUDA
    CPU = args.cpu
    if CPU:
        CUDA = "CPUExecutionProvider"
    ort.set_default_logger_severity(4)
    model = load_model(str(args.zoo / f"{args.model}.onnx"))
    outs = list(model.outputs)
    INPUT = model.proto.graph.input[0].name
    dims = [d.dim_value for d in model.proto.graph.input[0].type.tensor_type.shape.dim]
    h, w = (dims[2] or 320, dims[3] or 320)
    samples = natural_images_nchw(args.samples, h, w, seed=7)
    fmt = get_format("fp16")
    providers = [CUDA] if CPU else [(CUDA, {"use_tf32": "0"})]
    if_g = gated_native_graph(model, fmt)
    wh_g = gated_native_graph(model, fmt, where=True)
    cands = if_g.candidates
    sets = {"all16": [], "half": cands[::2], "all32": cands}
    report: dict = {"model": args.model, "candidates": len(cands), "device": ort.get_device()}
    got = {}
    for label, g in (("if", if_g), ("where", wh_g)):
        proto = with_outputs(g.proto, outs, model.tensor_types)
        report[label], got[label] = plain(proto, outs, providers, g.feeds, samples, sets)
        print(label, json.dumps(report[label]), flush=True)
    try:
        if CPU:
            raise RuntimeError("--cpu: no CUDA graph")
        shapes = [o.shape for o in got["where"]["all16"][0]]
        proto = with_outputs(wh_g.proto, outs, model.tensor_types)
        report["where_cuda_graph"], got["where_cuda_graph"] = cuda_graph(proto, outs, shapes, cands, samples, sets)
    except Exception as exc:  # what ORT says where a graph cannot be captured
        report["where_cuda_graph"] = {"error": " ".join(str(exc).split())[:400]}
    print("where_cuda_graph", json.dumps(report["where_cuda_graph"]), flush=True)
    real = OrtBackend(model, "fp16", [CUDA])
    report["vs_real"] = {}
    for label, fb in sets.items():
        runner = real.prepare(frozenset(fb))
        r = [[runner.run({INPUT: x})[o] for o in outs] for x in samples]
        report["vs_real"][label] = {form: max(_diff(a, b) for a, b in zip(got[form][label], r)) for form in got}
        report["vs_if"] = {form: {lb: max(_diff(a, b) for a, b in zip(got[form][lb], got["if"][lb])) for lb in sets}
                           for form in got}
    print("vs_real", json.dumps(report["vs_real"]), "vs_if", json.dumps(report["vs_if"]), flush=True)
    report["algo_search"] = algo_search(model, sets["half"], outs, samples)
    print("algo_search", json.dumps(report["algo_search"]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gating.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
