"""What an answer costs where it is deployed: FLOPs and bytes moved per node from the shapes that ran, the
Casts an FP32 island adds at its borders, and the deployment objective the search minimizes.

Shapes: a model's declared shapes say nothing of a dynamic dimension (`None`) and some exporters write
`-1` (PaddlePaddle), so FLOPs from them are 0 or negative. The cost model takes the shapes of the tensors
that ran: those the capture stored (`activations.h5`, run `reference`: every node output, read by
`data/activations.captured_shapes` and handed in), then ONNX shape inference with the samples' concrete input shapes
for the rest.

The deployment objective (`search.cost = "deploy"`, defined here only): the estimated time `fixed.onnx`
spends above the all-low-precision model, in microseconds at the deployed batch, on `DeviceProfile`:

    deploy(S) = sum over FP32 nodes n of [t32(n) - tlow(n)] + sum over Casts c of bytes(c) / bandwidth
                - (the same for the empty set)
    t_p(n)    = flops(n) / peak_p + bytes_p(n) / bandwidth

bytes_p(n): the node's floating inputs and outputs (weights too) at 4 (FP32) or 2 bytes a value; a Cast reads
4 and writes 2 bytes a value or the reverse. It prices what grows with the work (the regime where FP16 pays):
kernel launches, the same for every set except one per Cast, are left out, so at batch 1 on a small model a
Cast costs more than this says on ONNX Runtime (TensorRT-RTX fuses most Casts into neighbouring kernels,
docs/BENCHMARKS.md). It is an estimate from a rough H100 profile, not a measurement: `measure/latency.py`
measures the real thing on a GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import onnx
from onnx import TensorProto

from precision_doctor.costs import AnswerCost
from precision_doctor.graph.mixed import BorderCast, blocked_ops, border_casts, forced_fp32
from precision_doctor.graph.model import Model, estimate_flops, infer_shapes, set_input_shapes, tensor_types_and_shapes
from precision_doctor.graph.saturate import constant_tensors

FP32_BYTES, LOWP_BYTES = 4, 2
_ITEMSIZE = {TensorProto.DOUBLE: 8, TensorProto.INT64: 8, TensorProto.INT32: 4, TensorProto.UINT8: 1, TensorProto.INT8: 1,
             TensorProto.BOOL: 1, TensorProto.INT16: 2, TensorProto.UINT16: 2}


@dataclass(frozen=True)
class DeviceProfile:
    """What the deployment objective assumes of the GPU: sustained FP32 and low-precision FLOP/s and memory
    bandwidth (bytes/s)."""

    name: str
    fp32_flops: float
    lowp_flops: float
    bandwidth: float


# An H100 (SXM) as dense FP32 (CUDA cores) and FP16 tensor-core work sustain it: about 3/4 of the FP32 and 2/5
# of the FP16 data-sheet peaks, 3/4 of HBM3 bandwidth. An assumption, not a measurement.
H100_ESTIMATE = DeviceProfile("h100-estimate", fp32_flops=50e12, lowp_flops=400e12, bandwidth=2.5e12)


@dataclass
class CostModel:
    """Per-node FLOPs and tensor sizes at the shapes that ran, scaled to the deployed batch."""

    model: Model
    precision: str
    flops: dict[str, int]
    numel: dict[str, int]
    batch: int
    shapes_from: str
    keep_io_types: bool = True
    profile: DeviceProfile = H100_ESTIMATE
    _constants: dict = field(init=False, repr=False)
    _blocked: dict[str, str] = field(init=False, repr=False)  # op types kept FP32 in this precision (mixed.blocked_ops)
    _forced: frozenset[str] = field(init=False, repr=False)
    _candidates: list[str] = field(init=False, repr=False)
    _time: dict[tuple[str, bool], float] = field(init=False, repr=False)  # (node, in FP32) -> seconds
    _bytes: dict[tuple[str, bool], int] = field(init=False, repr=False)
    _empty: tuple[float, list[BorderCast]] | None = field(init=False, repr=False, default=None)

    def __post_init__(self):
        self._constants = constant_tensors(self.model)
        self._blocked = blocked_ops(self.precision)
        self._forced = frozenset(forced_fp32(self.model, self._blocked, self.precision))
        self._candidates = [n.name for n in self.model.nodes if n.is_candidate]
        p = self.profile
        self._bytes = {(n, fp32): self._node_bytes(n, fp32) for n in self._candidates for fp32 in (True, False)}
        self._time = {(n, fp32): self.flops.get(n, 0) / (p.fp32_flops if fp32 else p.lowp_flops)
                      + self._bytes[n, fp32] / p.bandwidth for n in self._candidates for fp32 in (True, False)}

    @property
    def total_flops(self) -> int:
        return sum(self.flops.values())

    def fp32_nodes(self, fallback: Iterable[str]) -> frozenset[str]:
        """The candidates fixed.onnx computes in FP32 for `fallback`: the set and the forced ones."""
        return frozenset(fallback) | self._forced

    def fp32_flops(self, fallback: Iterable[str]) -> int:
        return sum(self.flops.get(n, 0) for n in self.fp32_nodes(fallback))

    def fp32_flop_share(self, fallback: Iterable[str]) -> float:
        total = self.total_flops
        return self.fp32_flops(fallback) / total if total > 0 else 0.0

    def casts(self, fallback: Iterable[str]) -> list[BorderCast]:
        return border_casts(self.model, frozenset(fallback), self.precision, self.keep_io_types, self._blocked,
                            self._constants, self._forced)

    def _node_bytes(self, name: str, fp32: bool) -> int:
        """The bytes a node reads and writes: its floating tensors (weights too) in its precision, the others as they are."""
        info = self.model.node(name)
        size = FP32_BYTES if fp32 else LOWP_BYTES
        floats = set(info.float_inputs) | set(info.float_outputs)
        total = 0
        for t in dict.fromkeys(info.inputs + info.outputs):
            if not t:
                continue
            n = self.numel.get(t, 0)
            total += n * (size if t in floats else _ITEMSIZE.get(self.model.tensor_types.get(t, 0), 4))
        return total

    def _cast_bytes(self, casts: list[BorderCast]) -> int:
        return sum(self.numel.get(c.tensor, 0) * (FP32_BYTES + LOWP_BYTES) for c in casts)

    def _estimate(self, fallback: frozenset[str]) -> tuple[float, list[BorderCast]]:
        """Estimated seconds of `fixed.onnx` for `fallback` (its nodes and Casts, launches left out), and its Casts."""
        fp32 = self.fp32_nodes(fallback)
        casts = self.casts(fallback)
        t = sum(self._time[n, n in fp32] for n in self._candidates)
        return t + self._cast_bytes(casts) / self.profile.bandwidth, casts

    def _empty_estimate(self) -> tuple[float, list[BorderCast]]:
        if self._empty is None:
            self._empty = self._estimate(frozenset())
        return self._empty

    def deploy_us(self, fallback: Iterable[str]) -> float:
        """The deployment objective of `fallback` (see the module docstring), in microseconds."""
        return (self._estimate(frozenset(fallback))[0] - self._empty_estimate()[0]) * 1e6

    def bytes_moved(self, fallback: Iterable[str]) -> int:
        """Bytes one inference of fixed.onnx reads and writes: every candidate's tensors in its precision, and the Casts."""
        fp32 = self.fp32_nodes(fallback)
        return sum(self._bytes[n, n in fp32] for n in self._candidates) + self._cast_bytes(self.casts(fallback))

    def answer_cost(self, fallback: Iterable[str]) -> AnswerCost:
        fb = frozenset(fallback)
        t, casts = self._estimate(fb)
        t_empty, empty_casts = self._empty_estimate()
        t_fp32 = sum(self._time[n, True] for n in self._candidates)
        gain = t_fp32 - t_empty
        return AnswerCost(
            fp32_flop_share=self.fp32_flop_share(fb), fp32_flops=self.fp32_flops(fb), total_flops=self.total_flops,
            casts=len(casts), casts_added=len(casts) - len(empty_casts), cast_bytes=self._cast_bytes(casts),
            bytes_fixed=self.bytes_moved(fb), bytes_fp32=sum(self._bytes[n, True] for n in self._candidates),
            bytes_lowp=self.bytes_moved(frozenset()), deploy_us=(t - t_empty) * 1e6,
            estimated_speedup_kept=(t_fp32 - t) / gain if gain > 0 else None, batch=self.batch,
            shapes_from=self.shapes_from, profile=self.profile.name,
        )


def shapes_that_ran(model: Model, input_shapes: Mapping[str, tuple[int, ...]],
                    captured: Mapping[str, tuple[int, ...]] | None = None) -> tuple[dict[str, tuple[int, ...]], str]:
    """Tensor name -> concrete shape: ONNX shape inference with `input_shapes` (the samples'), overlaid with the
    shapes the capture stored (`captured`: `data/activations.captured_shapes`, exact) where given; and where they
    came from."""
    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    del proto.graph.value_info[:]  # inferred from the declared dims, they would contradict the concrete ones
    for out in proto.graph.output:
        for d in out.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value <= 0:
                d.ClearField("dim_value")
    dynamic = {k: list(v) for k, v in input_shapes.items() if k in model.inputs}
    set_input_shapes(proto, dynamic)
    _, inferred = tensor_types_and_shapes(infer_shapes(proto))
    shapes = {k: tuple(int(d) for d in v) for k, v in inferred.items() if _concrete(v)}
    shapes.update({k: tuple(int(d) for d in v) for k, v in input_shapes.items()})
    source = "inference"
    if captured is not None:
        shapes.update(captured)
        source = "capture"
    for init in model.proto.graph.initializer:
        shapes[init.name] = tuple(int(d) for d in init.dims)
    return shapes, source


def _concrete(shape: tuple) -> bool:
    return all(d is not None and d >= 0 for d in shape)


def cost_model(model: Model, precision: str, input_shapes: Mapping[str, tuple[int, ...]],
               captured: Mapping[str, tuple[int, ...]] | None = None, batch: int | None = None, keep_io_types: bool = True,
               profile: DeviceProfile = H100_ESTIMATE) -> CostModel:
    """The cost model of `model` run on inputs of `input_shapes` (one sample's); `batch`: the batch deployed,
    when it differs from the samples' (every tensor and FLOP count scales with it; None: the samples' batch)."""
    shapes, source = shapes_that_ran(model, input_shapes, captured)
    sample_batch = _sample_batch(model, input_shapes)
    scale = (batch / sample_batch) if batch and sample_batch else 1.0
    inits = {i.name for i in model.proto.graph.initializer}
    numel = {}
    for name, shape in shapes.items():
        n = 1
        for d in shape:
            n *= d
        numel[name] = int(round(n * (1.0 if name in inits else scale)))
    flops = {}
    for info in model.nodes:
        node = model.proto.graph.node[info.index]
        flops[info.name] = int(round(estimate_flops(node, shapes, model.proto) * scale))
    return CostModel(model, precision, flops, numel, batch or sample_batch or 1, source, keep_io_types, profile)


def _sample_batch(model: Model, input_shapes: Mapping[str, tuple[int, ...]]) -> int | None:
    """The samples' batch: the first dimension of the first input of rank >= 2 (None when there is none)."""
    for name in model.inputs:
        shape = input_shapes.get(name)
        if shape is not None and len(shape) >= 2:
            return int(shape[0]) or None
    return None
