"""Real low-precision graphs: each node computed by a provider's own FP16/BF16 kernels.

The emulator (`graph.emulate`) rounds around FP32 arithmetic; these graphs let ONNX Runtime
compute in the low type, so running them on the CUDA provider shows what the GPU really does.

- `native_local_graph` mirrors `emulate.local_graph`: isolated copies of nodes, each fed the exact
  FP32 reference tensors, Cast to the low type, the node in the low type, its FLOAT outputs Cast
  back to FP32 (graph outputs `local_output(t)`): each node's real local error.
- `gated_native_graph` mirrors `emulate.gated_graph`: one `If` per candidate on its own boolean
  input `pd_gate_<i>` (True = low precision). The then branch Casts the node's FLOAT inputs to the
  low type, runs the node in it and Casts its FLOAT outputs back; the else branch is the node as
  it is. FP16 -> FP32 -> FP16 is exact, so a chain of low-precision nodes computes what a pure FP16
  graph computes, except where ONNX Runtime would fuse kernels across nodes (it cannot across If
  branches), and a fallback set is a feed, not a new session.

Nodes follow `graph.mixed`'s choices: FLOAT tensors take the low type except inputs that ONNX
types as float whatever the data (Resize scales...); nodes in `mixed.forced_fp32` (ops without
low-precision kernels, other domains) stay FP32 (in the local graph they compute on the exact
inputs). Initializers and Constant values read in the low type are converted once, saturated to the
format's finite range (DESIGN.md, "Constants saturate"); computed tensors still overflow to inf.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.graph.emulate import _check_opset, _with_graph, local_output
from precision_doctor.graph.formats import Format
from precision_doctor.graph.mixed import FP32, _fix_type_attributes, _required, forced_fp32
from precision_doctor.graph.model import Model, NodeInfo

GATE_PREFIX = "pd_gate_"


def saturated(arr: np.ndarray, fmt: Format) -> np.ndarray:
    """`arr` in the low type, values beyond the largest finite value (infinities too) saturated."""
    a = np.asarray(arr)
    with np.errstate(invalid="ignore"):
        return np.clip(a, -fmt.max, fmt.max).astype(fmt.np_dtype)


def _constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    """A Constant node's dense value (None for sparse or non-tensor values)."""
    attr = node.attribute[0] if node.attribute else None
    if attr is None:
        return None
    if attr.name == "value":
        return numpy_helper.to_array(attr.t)
    if attr.name in ("value_float", "value_floats"):
        return np.asarray(attr.f if attr.name == "value_float" else list(attr.floats), dtype=np.float32)
    return None


class _NativeBuilder:
    """Emits low-precision copies of nodes; converted constants are shared."""

    def __init__(self, model: Model, fmt: Format):
        self.model = model
        self.fmt = fmt
        g = model.proto.graph
        graph_inputs = {i.name for i in g.input}
        self._inits = {i.name: i for i in g.initializer if i.name not in graph_inputs}
        self._constants = {n.output[0]: n for n in g.node if n.op_type == "Constant" and n.output}
        self.forced = forced_fp32(model)
        self.initializers: list[onnx.TensorProto] = []
        self._lowp: dict[str, str | None] = {}
        self._counter = 0

    def uid(self, base: str) -> str:
        self._counter += 1
        return f"{base}__pdn{self._counter}"

    def is_float32(self, t: str) -> bool:
        return bool(t) and self.model.tensor_types.get(t) == TensorProto.FLOAT

    def native(self, info: NodeInfo) -> bool:
        """Whether the node computes in the low type (else it stays FP32, as in the mixed graph)."""
        return info.name not in self.forced and not info.implicit_inputs

    def lowp_constant(self, t: str) -> str | None:
        """The name of a saturated low-type copy of initializer or Constant output `t` (None: not a constant)."""
        if t not in self._lowp:
            value = None
            if t in self._inits:
                value = numpy_helper.to_array(self._inits[t])
            elif t in self._constants:
                value = _constant_value(self._constants[t])
            self._lowp[t] = None
            if value is not None:
                name = self.uid(t + "_lowp")
                self.initializers.append(numpy_helper.from_array(saturated(value, self.fmt), name))
                self._lowp[t] = name
        return self._lowp[t]

    def lowp_nodes(self, node: onnx.NodeProto, outs: dict[str, str]) -> list[onnx.NodeProto]:
        """`node` computed in the low type: FLOAT inputs Cast (constants converted), the node with
        low-type attributes, FLOAT outputs Cast back to FLOAT into `outs[t]`, other outputs into `outs[t]`."""
        before: list[onnx.NodeProto] = []
        after: list[onnx.NodeProto] = []
        casts: dict[str, str] = {}
        new = onnx.NodeProto()
        new.CopyFrom(node)
        new.name = self.uid(node.name)
        for k, t in enumerate(node.input):
            if not self.is_float32(t) or _required(node, k, True) == FP32:
                continue
            low = self.lowp_constant(t)
            if low is None:
                if t not in casts:
                    casts[t] = self.uid(t + "_lp")
                    before.append(self._cast(t, casts[t], self.fmt.onnx_type))
                low = casts[t]
            new.input[k] = low
        for k, t in enumerate(node.output):
            if not t:
                continue
            if self.is_float32(t):
                new.output[k] = self.uid(t + "_lp")
                after.append(self._cast(new.output[k], outs[t], TensorProto.FLOAT))
            else:
                new.output[k] = outs[t]
        _fix_type_attributes(new, self.fmt)
        return before + [new] + after

    def copy(self, node: onnx.NodeProto, outs: dict[str, str]) -> onnx.NodeProto:
        """`node` as it is, its outputs renamed by `outs`."""
        new = onnx.NodeProto()
        new.CopyFrom(node)
        new.name = self.uid(node.name)
        for k, t in enumerate(node.output):
            if t:
                new.output[k] = outs[t]
        return new

    def _cast(self, src: str, dst: str, to: int) -> onnx.NodeProto:
        return helper.make_node("Cast", [src], [dst], to=to, name=self.uid("cast"))


def _free_inputs(nodes: Iterable[onnx.NodeProto], known: set[str]) -> list[str]:
    """Tensors the nodes read that none of them makes and that are not in `known` (in reading order)."""
    made: set[str] = set()
    free: dict[str, None] = {}
    for n in nodes:
        for t in n.input:
            if t and t not in made and t not in known:
                free[t] = None
        made.update(o for o in n.output if o)
    return list(free)


def native_local_graph(model: Model, fmt: Format, nodes: Sequence[NodeInfo]) -> tuple[onnx.ModelProto, list[str]]:
    """Isolated copies of `nodes` computed in the low type by the provider's kernels, each reading
    exact FP32 tensors from graph inputs (see the module docstring).

    Returns the graph and the tensors it must be fed; each floating output `t` of a node is graph
    output `local_output(t)`, FLOAT ones back in FP32 (same contract as `emulate.local_graph`).
    """
    _check_opset(model, fmt)
    b = _NativeBuilder(model, fmt)
    out_nodes: list[onnx.NodeProto] = []
    outputs: list[str] = []
    for info in sorted(nodes, key=lambda n: n.index):
        node = model.proto.graph.node[info.index]
        outs = {t: local_output(t) if t in info.float_outputs else b.uid(t + "_loc") for t in info.outputs if t}
        out_nodes += b.lowp_nodes(node, outs) if b.native(info) else [b.copy(node, outs)]
        outputs += list(info.float_outputs)
    used = {t for n in out_nodes for t in n.input}
    proto = _with_graph(model.proto, out_nodes, b.initializers, keep_inits=used & model.initializers, keep_inputs=False)
    feeds = _free_inputs(out_nodes, model.initializers | {i.name for i in b.initializers})
    feeds += [t for n in nodes for t in n.implicit_inputs if t not in model.initializers and t not in feeds]
    for t in feeds:
        proto.graph.input.append(helper.make_tensor_value_info(t, model.tensor_types.get(t, 0), None))
    for t in outputs:
        proto.graph.output.append(helper.make_tensor_value_info(local_output(t), model.tensor_types[t], None))
    return proto, feeds


@dataclass
class NativeGatedGraph:
    """A gated native graph and the candidates it gates, in the order of their gate inputs; `form` "if" (a gate of
    shape [1] picks a branch) or "where" (both computed, a scalar gate picks an output)."""

    proto: onnx.ModelProto
    candidates: list[str]
    fmt: Format
    form: Literal["if", "where"] = "if"

    def feeds(self, fallback: Iterable[str]) -> dict[str, np.ndarray]:
        """The gate feeds for a fallback set: True = low precision."""
        fb = set(fallback)
        shape = (1,) if self.form == "if" else ()
        return {f"{GATE_PREFIX}{i}": np.full(shape, name not in fb) for i, name in enumerate(self.candidates)}


def gated_native_graph(model: Model, fmt: Format, form: Literal["if", "where"] = "if") -> NativeGatedGraph:
    """One graph for every fallback set, computed by the provider's low-precision kernels (see the
    module docstring). Gated: candidates that can compute in the low type and whose outputs have
    known element types; other nodes stay as they are (FP32). `form` "where": no If; each candidate computed both
    ways in the main graph, a Where on its scalar gate picks each output (no control flow, so that a CUDA graph
    can capture it; twice the arithmetic)."""
    _check_opset(model, fmt)
    b = _NativeBuilder(model, fmt)
    types = model.tensor_types
    cands = [
        n for n in model.candidates if b.native(n) and all(types.get(t, 0) > 0 for t in n.outputs if t)
    ]
    index = {n.name: i for i, n in enumerate(cands)}
    out_nodes: list[onnx.NodeProto] = []
    for node, info in zip(model.proto.graph.node, model.nodes):
        if info.name not in index:
            out_nodes.append(node)
            continue
        outs = [t for t in node.output if t]
        low = {t: b.uid(t + "_low") for t in outs}
        f32 = {t: b.uid(t + "_f32") for t in outs}
        then_g = helper.make_graph(b.lowp_nodes(node, low), b.uid("then"), [],
                                   [helper.make_tensor_value_info(low[t], types[t], None) for t in outs])
        else_g = helper.make_graph([b.copy(node, f32)], b.uid("else"), [],
                                   [helper.make_tensor_value_info(f32[t], types[t], None) for t in outs])
        gate = f"{GATE_PREFIX}{index[info.name]}"
        if form == "where":
            out_nodes += [*then_g.node, *else_g.node]
            out_nodes += [helper.make_node("Where", [gate, low[t], f32[t]], [t], name=b.uid("where")) for t in outs]
            continue
        out_nodes.append(helper.make_node("If", [gate], outs, name=b.uid(info.name), then_branch=then_g, else_branch=else_g))
    proto = _with_graph(model.proto, out_nodes, b.initializers)
    for i in range(len(cands)):
        proto.graph.input.append(helper.make_tensor_value_info(
            f"{GATE_PREFIX}{i}", TensorProto.BOOL, [1] if form == "if" else []))
    return NativeGatedGraph(proto=proto, candidates=[n.name for n in cands], fmt=fmt, form=form)
