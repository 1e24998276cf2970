"""Measured latency of the FP32 model, the all-low-precision model and fixed.onnx: ONNX Runtime's CUDA provider
with I/O binding (inputs on the GPU before the clock starts, outputs left there), at the batch deployed.

`latency_kept` = (t_fp32 - t_fixed) / (t_fp32 - t_lowp): the share of the low-precision speed-up the answer
keeps (1: all of it; 0: none; negative: fixed.onnx is slower than FP32). Only meaningful where FP16 pays
(t_lowp clearly below t_fp32). On a machine without a CUDA GPU `deploy_latency` gives None; `device="cpu"`
runs the same code on ORT's CPU provider, which says nothing of FP16 speed (plumbing, tests).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping

import numpy as np
import onnx
import onnxruntime as ort

from precision_doctor.costs import DeployLatency
from precision_doctor.graph.mixed import build_mixed
from precision_doctor.graph.model import Model

WARMUP, RUNS = 10, 50
_PROVIDERS = {"cuda": "CUDAExecutionProvider", "cpu": "CPUExecutionProvider"}


def batched(model: Model, feeds: Mapping[str, np.ndarray], batch: int) -> dict[str, np.ndarray]:
    """One sample's feeds repeated to `batch` along each input's batch axis: its first dimension that the model
    leaves dynamic and the sample sets to the sample's batch (the first dimension of its first input of rank
    >= 2). Inputs without one (a sample rate, a fixed batch) stay as they are."""
    first = next((np.asarray(feeds[n]) for n in model.inputs if n in feeds and np.ndim(feeds[n]) >= 2), None)
    b0 = int(first.shape[0]) if first is not None else 1
    out = {}
    for k, v in feeds.items():
        v = np.asarray(v)
        declared = model.tensor_shapes.get(k) or (None,) * v.ndim
        axis = next((i for i, (d, n) in enumerate(zip(declared, v.shape)) if (d is None or d <= 0) and n == b0), None)
        if axis is None or b0 == batch:
            out[k] = v
            continue
        reps = -(-batch // b0)
        out[k] = np.concatenate([v] * reps, axis=axis).take(range(batch), axis=axis)
    return out


def time_model(proto: onnx.ModelProto, feeds: Mapping[str, np.ndarray], device: str = "cuda", warmup: int = WARMUP,
               runs: int = RUNS) -> list[float]:
    """Seconds of each of `runs` timed inferences (after `warmup`), I/O bound on `device`, graph optimizations on
    (ORT_ENABLE_ALL: fusions as deployed)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(proto.SerializeToString(), so, providers=[_PROVIDERS[device]])
    io = sess.io_binding()
    kinds = {i.name: i.type for i in sess.get_inputs()}
    for name, arr in feeds.items():
        if name not in kinds:
            continue
        want = np.float16 if kinds[name] == "tensor(float16)" else None
        value = np.ascontiguousarray(arr.astype(want) if want is not None else arr)
        io.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, device, 0))
    for o in sess.get_outputs():
        io.bind_output(o.name, device, 0)
    for _ in range(warmup):
        sess.run_with_iobinding(io)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run_with_iobinding(io)  # the CUDA provider synchronizes its stream at the end of a run
        io.synchronize_outputs()
        times.append(time.perf_counter() - t0)
    return times


def deploy_latency(model: Model, fallback: frozenset[str], precision: str, sample: Mapping[str, np.ndarray],
                   batch: int | None = None, keep_io_types: bool = True, device: str = "cuda",
                   runs: int = RUNS) -> DeployLatency | None:
    """The three models timed one after the other at `batch` (None: the sample's); None where `device` is cuda
    and ONNX Runtime has no CUDA GPU here."""
    if device == "cuda":
        from precision_doctor.backends.registry import cuda_machine

        if not cuda_machine():
            return None
    first = next((sample[n] for n in model.inputs if n in sample and np.ndim(sample[n]) >= 2), None)
    batch = batch or (int(np.shape(first)[0]) if first is not None else 1)
    feeds = batched(model, sample, batch)
    models = {
        "fp32": model.proto,
        "lowp": build_mixed(model, frozenset(), precision, keep_io_types),
        "fixed": build_mixed(model, fallback, precision, keep_io_types),
    }
    t = {k: time_model(p, feeds, device, runs=runs) for k, p in models.items()}
    med = {k: statistics.median(v) * 1e3 for k, v in t.items()}
    p90 = {k: float(np.percentile(v, 90)) * 1e3 for k, v in t.items()}
    return DeployLatency(batch, device, runs, med["fp32"], med["lowp"], med["fixed"], p90["fp32"], p90["lowp"], p90["fixed"])
