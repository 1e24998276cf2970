"""Real low precision on ONNX Runtime (the CUDA provider when present) in one session for every
fallback set: the gated native graph of `graph.native`, where a fallback set is a feed.

It computes what the mixed graph of `backends.ort` computes for the same set, without the kernel
fusions ONNX Runtime makes across neighbouring nodes (it cannot fuse across If branches): compare
the two with bench/gpu_nodewise.py before trusting one for the other. On the CPU provider ONNX
Runtime computes the FP16 nodes in FP32 (it drops the Casts around ops without FP16 kernels), so
`ort-cpu-gated` checks plumbing only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import onnx

from precision_doctor.backends.base import Feeds, SessionHolder
from precision_doctor.backends.ort import CUDA, OrtBackend
from precision_doctor.errors import UserError
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.model import Model
from precision_doctor.graph.native import NativeGatedGraph, gated_native_graph
from precision_doctor.graph.ort_session import make_session, run_session, with_outputs


def _as_f32(names: Sequence[str], res: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    return {n: a.astype(np.float32) if a.dtype.kind == "f" and a.itemsize < 4 else a for n, a in zip(names, res)}


BATCH = 8  # samples of one shape group per run on the CUDA provider: 2.6-4 ms a sample against 12-17 alone
BATCH_RTOL = 1e-3  # how closely a sample's rows of a batched FP32 run must match its own run


def _free_batch_axis(model: Model) -> bool:
    """Whether every graph input and output has a first axis that the model leaves free (a named or unknown
    dimension, as the model file declares it, whatever `--input-shapes` fixed): what stacking samples needs."""
    g = model.proto.graph
    inputs = [i.name for i in g.input if i.name not in model.initializers]
    outputs = [o.type.tensor_type.shape.dim for o in g.output]
    return bool(inputs) and all((model.declared_shapes.get(n) or (1,))[0] is None for n in inputs) and all(
        len(d) > 0 and not d[0].HasField("dim_value") for d in outputs)


def _batch_freed(proto: onnx.ModelProto, model: Model) -> onnx.ModelProto:
    """`proto` with its inputs' first axis free again (`--input-shapes` may have fixed it to 1) and no
    value_info (the shapes inferred for one sample): ONNX Runtime infers them per run."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    del out.graph.value_info[:]
    for i in out.graph.input:
        if i.name in model.declared_shapes:
            i.type.tensor_type.shape.dim[0].Clear()
            i.type.tensor_type.shape.dim[0].dim_param = "pd_batch"
    return out


class OrtGatedRunner:
    """A fallback set bound to the shared session. Floating outputs come back as float32. `run_batch` runs
    several samples in one run where the backend batches them (`base.run_each` uses it)."""

    def __init__(self, backend: OrtGatedBackend, fallback: frozenset[str]):
        self.backend = backend
        self.gates = backend.graph.feeds(fallback)
        self.batch = backend.batch

    def run(self, feeds: Feeds, outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        names = list(outputs) if outputs is not None else self.backend.output_names
        return _as_f32(names, run_session(self.backend.session, names, {**feeds, **self.gates}, self.backend.model))

    def run_batch(self, chunk: Sequence[Feeds], outputs: Sequence[str] | None = None) -> list[dict[str, np.ndarray]]:
        """Each feed's outputs; runs of consecutive feeds of one shape group go through the session as one batch."""
        names = list(outputs) if outputs is not None else self.backend.output_names
        out: list[dict[str, np.ndarray]] = []
        k = 0
        while k < len(chunk):
            key = self.backend.batch_key(chunk[k])
            n = 1
            while key is not None and k + n < len(chunk) and self.backend.batch_key(chunk[k + n]) == key:
                n += 1
            part = chunk[k:k + n]
            if n > 1 and self.backend.batches(key, part, names):
                out += self.backend.run_batched(part, names, self.gates)
            else:
                out += [self.run(f, names) for f in part]
            k += n
        return out


class OrtGatedBackend(SessionHolder):
    """One session over the gated native graph; each `prepare` costs nothing.

    Arguments as `OrtBackend` (providers, `tf32`, `optimize`); `mixed` is an `OrtBackend` with the
    same settings, for the real mixed graph of a set (`mixed.prepare(fallback)`, one session each).
    """

    def __init__(
        self,
        model: Model,
        precision: str = "fp16",
        providers: Sequence | None = None,
        outputs: Sequence[str] | None = None,
        optimize: bool = True,
        tf32: bool = False,
    ):
        self.mixed = OrtBackend(model, precision, providers, outputs, optimize=optimize, tf32=tf32)
        self.model = model
        self.precision = precision
        self.providers = self.mixed.providers
        self.name = "ort-cuda-gated" if self.mixed.uses_cuda else "ort-cpu-gated"
        self.output_names = self.mixed.output_names
        self.graph: NativeGatedGraph = gated_native_graph(model, get_format(precision))
        proto = with_outputs(self.graph.proto, self.output_names, model.tensor_types)
        self._free_batch = _free_batch_axis(model)
        if self._free_batch:
            proto = _batch_freed(proto, model)
        algo = os.environ.get("PRECISION_DOCTOR_GATED_ALGO")  # session I's measurement only: taken out after it
        providers = [(p[0], {**p[1], "cudnn_conv_algo_search": algo}) if algo and isinstance(p, tuple) else p
                     for p in self.providers]
        self.session = make_session(proto, providers, optimize=optimize)
        self.batch = BATCH if self.mixed.uses_cuda else 1  # the CPU provider gains little from batches
        self._batchable: dict[str, bool] = {}
        if self.mixed.uses_cuda and CUDA not in self.session.get_providers():
            raise UserError("ONNX Runtime could not use the CUDA provider (onnxruntime-gpu and its CUDA libraries needed)")
        self.activate()

    def batch_key(self, feeds: Feeds) -> str | None:
        """The feeds' shape group where every input has one sample on a batch axis the model leaves free, else None."""
        if not self._free_batch or any(np.ndim(v) == 0 or np.shape(v)[0] != 1 for v in feeds.values()):
            return None
        return ";".join(f"{k}:{np.shape(v)}" for k, v in sorted(feeds.items()))

    def run_batched(self, part: Sequence[Feeds], names: list[str], gates: dict[str, np.ndarray]) -> list[dict]:
        """`part`'s samples stacked on the batch axis, padded to `batch` rows with the last one (one shape per
        group, so ONNX Runtime picks its kernels once), in one run; each sample's rows of each output."""
        rows = list(part) + [part[-1]] * (self.batch - len(part))
        feeds = {k: np.concatenate([f[k] for f in rows]) for k in part[0]}
        res = _as_f32(names, run_session(self.session, names, {**feeds, **gates}, self.model))
        return [{n: a[j:j + 1] for n, a in res.items()} for j in range(len(part))]

    def batches(self, key: str, part: Sequence[Feeds], names: list[str]) -> bool:
        """Whether samples of this shape group may run as a batch: asked once per group, by running `part` in FP32
        (every gate off) stacked and one by one. Each output must have a row per sample, and each sample's rows
        must be its own outputs: a model that mixes samples (a Reshape that folds the batch axis, a batch
        statistic) gets them one at a time. cuDNN may pick other algorithms for a batch, so rows agree to
        BATCH_RTOL of the largest value, not bit for bit."""
        if key not in self._batchable:
            fp32 = self.graph.feeds(self.graph.candidates)
            try:
                stacked = self.run_batched(part, names, fp32)
            except Exception:  # noqa: BLE001 - a batch the model cannot take runs sample by sample
                self._batchable[key] = False
                return False
            alone = [_as_f32(names, run_session(self.session, names, {**f, **fp32}, self.model)) for f in part]
            self._batchable[key] = all(
                s[n].shape == a[n].shape and np.allclose(s[n], a[n], rtol=BATCH_RTOL,
                                                          atol=BATCH_RTOL * float(np.max(np.abs(a[n]), initial=0)))
                for s, a in zip(stacked, alone) for n in names)
        return self._batchable[key]

    def prepare(self, fallback: frozenset[str]) -> OrtGatedRunner:
        return OrtGatedRunner(self, frozenset(fallback))

    def release(self) -> None:
        """Release the session and the mixed backend's cached ones."""
        self.session = None
        self.mixed.close()
