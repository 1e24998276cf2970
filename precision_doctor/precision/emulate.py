"""The emulation rule as graph rewrites.

A node outside the fallback set rounds each floating input and each floating output to the target
format (Cast to FP16/BF16 and back) and computes in FP32 between; a node in the fallback set
computes in FP32 on what it receives and does not round its outputs. Initializers and Constant
outputs are rounded where a low-precision node consumes them, never at the source.

`gated_graph` builds one graph for all candidates: each candidate's rounding is gated by one
element of a boolean input, so a fallback set is a feed, not a new session. `local_graph` builds
isolated copies of nodes that read exact reference tensors, for each node's local error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.errors import UserError
from precision_doctor.model import Model, NodeInfo
from precision_doctor.precision.formats import Format

MASK_INPUT = "pd_lowp_mask"


@dataclass
class GatedGraph:
    """An emulation graph and the candidate order of its gate mask."""

    proto: onnx.ModelProto
    candidates: list[str]
    fmt: Format

    def mask(self, fallback: frozenset[str] | set[str]) -> np.ndarray:
        """The gate feed for a fallback set: True = low precision."""
        return np.array([name not in fallback for name in self.candidates], dtype=bool)


class _Builder:
    """Emits rounding nodes with unique names."""

    def __init__(self, model: Model, fmt: Format):
        self.model = model
        self.fmt = fmt
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._rounded_inits: dict[str, str] = {}
        self._inits = {i.name: i for i in model.proto.graph.initializer}
        self._counter = 0

    def uid(self, base: str) -> str:
        self._counter += 1
        return f"{base}__pd{self._counter}"

    def round_tensor(self, src: str, dst: str, gate: str | None, elem: int | None = None) -> None:
        """dst = gate ? round(src) : src (gate None: always round); `elem` is src's ONNX type."""
        elem = elem or self.model.tensor_types[src]
        rounded = self._rounded_initializer(src) if src in self._inits else None
        if rounded is None:
            low = self.uid(src + "_lp")
            rounded = self.uid(src + "_rt")
            self.nodes.append(helper.make_node("Cast", [src], [low], to=self.fmt.onnx_type, name=self.uid("cast")))
            self.nodes.append(helper.make_node("Cast", [low], [rounded], to=elem, name=self.uid("cast")))
        if gate is None:
            self.nodes.append(helper.make_node("Identity", [rounded], [dst], name=self.uid("id")))
        else:
            self.nodes.append(helper.make_node("Where", [gate, rounded, src], [dst], name=self.uid("gate")))

    def _rounded_initializer(self, name: str) -> str:
        if name not in self._rounded_inits:
            arr = numpy_helper.to_array(self._inits[name])
            new = self.uid(name + "_rounded")
            self.initializers.append(numpy_helper.from_array(self.fmt.round(arr), new))
            self._rounded_inits[name] = new
        return self._rounded_inits[name]


def _check_opset(model: Model, fmt: Format) -> None:
    opset = next((o.version for o in model.proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    if fmt.onnx_type == TensorProto.BFLOAT16 and opset < 13:
        raise UserError(f"bf16 emulation needs ONNX opset >= 13 (Cast to bfloat16); this model is opset {opset}")


def _rewire(node: onnx.NodeProto, info: NodeInfo, b: _Builder, gate: str | None, rename_out) -> onnx.NodeProto:
    """Copy `node` with its floating inputs rounded (gated) and its outputs renamed by `rename_out`."""
    new = onnx.NodeProto()
    new.CopyFrom(node)
    replaced: dict[str, str] = {}
    for t in info.float_inputs:
        replaced[t] = b.uid(t + "_in")
        b.round_tensor(t, replaced[t], gate)
    for i, t in enumerate(new.input):
        if t in replaced:
            new.input[i] = replaced[t]
    for i, t in enumerate(new.output):
        if t:
            new.output[i] = rename_out(t)
    return new


def gated_graph(model: Model, fmt: Format) -> GatedGraph:
    """One graph emulating every fallback set; gates come from the boolean input `pd_lowp_mask`."""
    _check_opset(model, fmt)
    b = _Builder(model, fmt)
    cands = [n.name for n in model.candidates]
    index = {name: i for i, name in enumerate(cands)}
    out_nodes: list[onnx.NodeProto] = []
    for node, info in zip(model.proto.graph.node, model.nodes):
        if info.name not in index:
            out_nodes.append(node)
            continue
        gate = f"pd_gate_{index[info.name]}"
        idx_name = gate + "_idx"
        b.initializers.append(numpy_helper.from_array(np.array(index[info.name], dtype=np.int64), idx_name))
        b.nodes.append(helper.make_node("Gather", [MASK_INPUT, idx_name], [gate], axis=0, name=gate))
        raw = {t: f"{t}__pd_raw" for t in info.float_outputs}
        new = _rewire(node, info, b, gate, lambda t, raw=raw: raw.get(t, t))
        b.nodes.append(new)
        for t in info.float_outputs:
            b.round_tensor(raw[t], t, gate, model.tensor_types[t])
        out_nodes.extend(b.nodes)
        b.nodes = []
    proto = _with_graph(model.proto, out_nodes, b.initializers)
    proto.graph.input.append(helper.make_tensor_value_info(MASK_INPUT, TensorProto.BOOL, [len(cands)]))
    return GatedGraph(proto=proto, candidates=cands, fmt=fmt)


def local_output(tensor: str) -> str:
    """Name of a node output's locally computed counterpart in `local_graph`."""
    return f"{tensor}__pd_local"


def local_graph(model: Model, fmt: Format, nodes: Sequence[NodeInfo]) -> tuple[onnx.ModelProto, list[str]]:
    """Isolated low-precision copies of `nodes`, each reading exact tensors from graph inputs.

    Returns the graph and the names of the tensors it must be fed (non-initializer inputs).
    Each floating output `t` of a node appears as graph output `local_output(t)`.
    """
    _check_opset(model, fmt)
    b = _Builder(model, fmt)
    by_index = {n.index: n for n in nodes}
    feeds: dict[str, None] = {}
    outputs: list[str] = []
    for idx in sorted(by_index):
        info = by_index[idx]
        node = model.proto.graph.node[idx]
        for t in info.inputs + info.implicit_inputs:
            if t and t not in model.initializers:
                feeds[t] = None
        raw = {t: b.uid(t + "_loc") for t in info.outputs if t}
        new = _rewire(node, info, b, None, lambda t, raw=raw: raw[t])
        b.nodes.append(new)
        for t in info.float_outputs:
            b.round_tensor(raw[t], local_output(t), None, model.tensor_types[t])
            outputs.append(t)
    used_inits = {t for n in nodes for t in n.inputs + n.implicit_inputs if t in model.initializers}
    proto = _with_graph(model.proto, b.nodes, b.initializers, keep_inits=used_inits, keep_inputs=False)
    for t in feeds:
        proto.graph.input.append(helper.make_tensor_value_info(t, model.tensor_types.get(t, 0), None))
    del proto.graph.output[:]
    for t in outputs:
        proto.graph.output.append(helper.make_tensor_value_info(local_output(t), model.tensor_types[t], None))
    return proto, list(feeds)


def _with_graph(
    src: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    extra_inits: list[onnx.TensorProto],
    keep_inits: set[str] | None = None,
    keep_inputs: bool = True,
) -> onnx.ModelProto:
    """A copy of `src` with its nodes replaced (weights shared by value, not re-read)."""
    proto = onnx.ModelProto()
    proto.ir_version = src.ir_version
    proto.opset_import.extend(src.opset_import)
    proto.producer_name = "precision-doctor"
    g = proto.graph
    g.name = src.graph.name or "graph"
    g.node.extend(nodes)
    inits = [i for i in src.graph.initializer if keep_inits is None or i.name in keep_inits]
    g.initializer.extend(inits)
    g.initializer.extend(extra_inits)
    if keep_inputs:
        g.input.extend(src.graph.input)
        g.output.extend(src.graph.output)
        g.value_info.extend(src.graph.value_info)
    return proto
