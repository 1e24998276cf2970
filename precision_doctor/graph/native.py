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
  With `units` (`fusion_units`: the nodes ONNX Runtime's optimizer fuses, each site whole), a unit is one `If`
  on the And of its members' gates: its then branch holds every member in the low type with no Cast between them,
  so that the optimizer fuses them there as in the deployed graph (ONNX Runtime optimizes If subgraphs: a
  decomposed LayerNorm in a then branch becomes LayerNormalization, tests/graph/test_target.py); its else branch gates
  each member on its own as above. Exact for every set where all of a unit's members are low precision and where
  a fusion needs all of them (LayerNorm, Gelu, QuickGelu, Conv+BatchNormalization, Gemm); a set keeping part of a
  FusedMatMul site in FP32 loses the part of that fusion ONNX Runtime would still make. A unit reads its inputs
  through Casts made outside its branch, which no fusion inside it can remove: where x of a LayerNorm comes from an
  FP32 node through a Cast only the pattern reads, the deployed graph's fused kernel reads x unrounded (ORT removes
  that Cast), the unit's reads it rounded (more error: the safe side).
  The "where" form has no If: each candidate is computed both ways in the main graph and a Where on its scalar gate
  picks each output; a unit's low-type copy sits beside its members' own gates and a Where on the And picks. Per node
  the same values as the If form, under ONNX Runtime too; with units the same under ONNX's reference evaluator, but
  ONNX Runtime's CPU provider removes Casts across the main graph that the If form's branches keep, and the two were
  not compared on a GPU: so a backend offers this form without units only (`backends.ort_gated.offered_forms`;
  which form runs faster depends on the model: `OrtGatedBackend.choose_form` times them).

Nodes follow `graph.mixed`'s choices: FLOAT tensors take the low type except inputs that ONNX
types as float whatever the data (Resize scales...); nodes in `mixed.forced_fp32` (ops without
low-precision kernels in the format, `mixed.blocked_ops`: in BF16 more than in FP16; other domains) stay FP32
(in the local graph they compute on the exact inputs). Initializers and Constant values read in the low type are
converted once, saturated to the format's finite range (DESIGN.md, "Constants saturate"); computed tensors still overflow to inf.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.graph.emulate import _check_opset, _with_graph, local_output
from precision_doctor.graph.formats import Format
from precision_doctor.graph.mixed import FP32, OpBlockList, _fix_type_attributes, _required, forced_fp32
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

    def __init__(self, model: Model, fmt: Format, op_block_list: OpBlockList | None = None):
        self.model = model
        self.fmt = fmt
        g = model.proto.graph
        graph_inputs = {i.name for i in g.input}
        self._inits = {i.name: i for i in g.initializer if i.name not in graph_inputs}
        self._constants = {n.output[0]: n for n in g.node if n.op_type == "Constant" and n.output}
        self.forced = forced_fp32(model, op_block_list, fmt.name)
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

    def lowp_nodes(self, node: onnx.NodeProto, outs: dict[str, str],
                   ins: dict[str, str] | None = None) -> list[onnx.NodeProto]:
        """`node` computed in the low type: FLOAT inputs Cast (constants converted), the node with
        low-type attributes, FLOAT outputs Cast back to FLOAT into `outs[t]`, other outputs into `outs[t]`;
        `ins`: inputs read under another name (original name -> the name to read)."""
        before: list[onnx.NodeProto] = []
        after: list[onnx.NodeProto] = []
        casts: dict[str, str] = {}
        ins = ins or {}
        new = onnx.NodeProto()
        new.CopyFrom(node)
        new.name = self.uid(node.name)
        for k, t in enumerate(node.input):
            if t in ins:
                new.input[k] = ins[t]
            if not self.is_float32(t) or _required(node, k, True) == FP32:
                continue
            if t in ins:
                src = ins[t]
                if src not in casts:
                    casts[src] = self.uid(t + "_lp")
                    before.append(self._cast(src, casts[src], self.fmt.onnx_type))
                new.input[k] = casts[src]
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

    def copy(self, node: onnx.NodeProto, outs: dict[str, str], ins: dict[str, str] | None = None) -> onnx.NodeProto:
        """`node` as it is, its outputs renamed by `outs` (and inputs by `ins`)."""
        new = onnx.NodeProto()
        new.CopyFrom(node)
        new.name = self.uid(node.name)
        for k, t in enumerate(node.output):
            if t:
                new.output[k] = outs[t]
        for k, t in enumerate(node.input):
            if t in (ins or {}):
                new.input[k] = ins[t]
        return new

    def unit_lowp(self, members: Sequence[onnx.NodeProto], outs: dict[str, str],
                  outer: dict[str, str]) -> list[onnx.NodeProto]:
        """`members` computed together in the low type with no Cast between them (what ONNX Runtime's optimizer
        fuses): FLOAT inputs from outside read as their low-type copies `outer[t]` (made outside the If form's
        branch, so that no Cast there is the optimizer's to remove: x of a LayerNorm fused at opset 17 would read
        FP32 beside an FP16 scale, a graph ONNX Runtime 1.32 then refuses), constants converted, FLOAT tensors between
        members kept in the low type, the FLOAT tensors of `outs` (read outside) Cast back into `outs[t]`, others
        renamed so."""
        made = {t for n in members for t in n.output if t}
        local: dict[str, str] = {}  # a member's output -> its name here (low type where FLOAT)
        casts: dict[str, str] = {}
        nodes: list[onnx.NodeProto] = []
        for node in members:
            new = onnx.NodeProto()
            new.CopyFrom(node)
            new.name = self.uid(node.name)
            for k, t in enumerate(node.input):
                if not t:
                    continue
                fp32_slot = _required(node, k, True) == FP32
                if t in made:
                    if self.is_float32(t) and fp32_slot:  # a member's low output into a slot that takes FLOAT only
                        key = local[t] + "/f32"
                        if key not in casts:
                            casts[key] = self.uid(t + "_f32")
                            nodes.append(self._cast(local[t], casts[key], TensorProto.FLOAT))
                        new.input[k] = casts[key]
                    else:
                        new.input[k] = local[t]
                elif self.is_float32(t) and not fp32_slot:
                    low = self.lowp_constant(t)
                    new.input[k] = low if low is not None else outer[t]
            for k, t in enumerate(node.output):
                if t:
                    local[t] = new.output[k] = self.uid(t + ("_lp" if self.is_float32(t) else "_u"))
            _fix_type_attributes(new, self.fmt)
            nodes.append(new)
        for t, name in outs.items():
            nodes.append(self._cast(local[t], name, TensorProto.FLOAT) if self.is_float32(t)
                         else helper.make_node("Identity", [local[t]], [name], name=self.uid("id")))
        return nodes

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


def fusion_units(model: Model, fmt: Format) -> list[tuple[str, ...]]:
    """The sets of nodes ONNX Runtime's optimizer fuses in the deployed low-precision graph, each in graph order: the
    `ort-cuda` profile's fusion sites (`Fusion.members`) and the pairs it fuses that the emulator does not model
    (`graph.coverage.FUSED_PAIRS`: the residual Add before a LayerNorm, SkipLayerNormFusion; a ConvTranspose before a
    BatchNormalization, ConvBNFusion), sets that share a node merged; only sets that one `If` can hold (no path leaves
    the set and comes back into it)."""
    from precision_doctor.graph.fusions import FUSIONS, _Graph
    from precision_doctor.graph.rules import resolve_rules

    sites = resolve_rules("ort-cuda").sites(model, fmt)
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for site in sites.values():
        members = FUSIONS[site.fusion].members(site)
        for m in members[1:]:
            parent[find(m)] = find(members[0])
    g = _Graph(model, fmt)
    for a, b in _unmodelled_pairs(g, sites):
        parent[find(b)] = find(a)
    groups: dict[str, list[str]] = {}
    order = {n.name: n.index for n in model.nodes}
    for m in parent:
        groups.setdefault(find(m), []).append(m)
    units = [tuple(sorted(g, key=order.__getitem__)) for g in groups.values() if len(g) > 1]
    return sorted((u for u in units if _convex(model, set(u))), key=lambda u: order[u[0]])


def _unmodelled_pairs(g, sites: dict) -> list[tuple[str, str]]:
    """(producer, consumer) pairs ONNX Runtime fuses beyond the emulator's rules: an Add whose output only a LayerNorm
    (the op, or a decomposed one: its first ReduceMean) reads, a ConvTranspose whose output only a BatchNormalization
    reads; both candidates."""
    norm_reads = {site.reads[0]: site.data.core[0] for site in sites.values() if site.fusion == "layernorm-fusion"}
    out = []
    for name, (node, _) in g.nodes.items():
        if not node.input or name not in g.candidates:
            continue
        x = node.input[0]
        found = g.node_of(x)
        if found is None or found[0].name not in g.candidates or x in g.outputs:
            continue
        producer = found[0]
        readers = set(g.readers.get(x, []))
        if producer.op_type == "Add" and node.op_type == "ReduceMean" and norm_reads.get(x) == name:
            readers = {r for r in readers if r != name and g.nodes[r][0].op_type != "Sub"}
        elif (producer.op_type, node.op_type) in (("Add", "LayerNormalization"), ("ConvTranspose", "BatchNormalization")):
            readers -= {name}
        else:
            continue
        if not readers:
            out.append((producer.name, name))
    return out


def _convex(model: Model, unit: set[str]) -> bool:
    """No path from a member through other nodes back to a member."""
    readers: dict[str, list[NodeInfo]] = {}
    for n in model.nodes:
        for t in {*n.inputs, *n.implicit_inputs}:
            if t:
                readers.setdefault(t, []).append(n)
    infos = [n for n in model.nodes if n.name in unit]
    last = max(n.index for n in infos)
    todo = [r for n in infos for t in n.outputs if t for r in readers.get(t, []) if r.name not in unit]
    seen: set[str] = set()
    while todo:
        n = todo.pop()
        if n.name in seen or n.index > last:
            continue
        seen.add(n.name)
        for t in n.outputs:
            for r in readers.get(t, []):
                if r.name in unit:
                    return False
                todo.append(r)
    return True


def _toposorted(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """`nodes` in an order where each comes after the producers of what it reads (subgraphs' outer-scope reads
    too), keeping the given order where it already is one."""
    def reads(n: onnx.NodeProto) -> set[str]:
        out = {t for t in n.input if t}
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else list(a.graphs)):
                inner = {t for m in g.node for t in m.output} | {i.name for i in g.initializer} | {i.name for i in g.input}
                out |= {t for m in g.node for t in reads(m)} - inner
        return out

    producer = {t: i for i, n in enumerate(nodes) for t in n.output if t}
    needs = [{producer[t] for t in reads(n) if t in producer and t not in available} for n in nodes]
    done, out, pending = set(), [], list(range(len(nodes)))
    while pending:
        rest = []
        for i in pending:
            if needs[i] <= done:
                done.add(i)
                out.append(nodes[i])
            else:
                rest.append(i)
        if len(rest) == len(pending):
            raise ValueError("the gated graph has a cycle")
        pending = rest
    return out


@dataclass
class NativeGatedGraph:
    """A gated native graph and the candidates it gates, in the order of their gate inputs; `form` "if" (a gate of
    shape [1] picks a branch) or "where" (both computed, a scalar gate picks an output); `units`: the fusion units
    gated whole."""

    proto: onnx.ModelProto
    candidates: list[str]
    fmt: Format
    form: Literal["if", "where"] = "if"
    units: list[tuple[str, ...]] = field(default_factory=list)

    def feeds(self, fallback: Iterable[str]) -> dict[str, np.ndarray]:
        """The gate feeds for a fallback set: True = low precision."""
        fb = set(fallback)
        shape = (1,) if self.form == "if" else ()
        return {f"{GATE_PREFIX}{i}": np.full(shape, name not in fb) for i, name in enumerate(self.candidates)}


def gated_native_graph(model: Model, fmt: Format, form: Literal["if", "where"] = "if",
                       units: Sequence[Sequence[str]] = (), op_block_list: OpBlockList | None = None) -> NativeGatedGraph:
    """One graph for every fallback set, computed by the provider's low-precision kernels (see the
    module docstring). Gated: candidates that can compute in the low type and whose outputs have
    known element types; other nodes stay as they are (FP32). `form` "where": no If; each candidate computed both
    ways in the main graph, a Where on its scalar gate picks each output (no control flow, so that a CUDA graph
    can capture it; twice the arithmetic). `units`: sets of candidates gated whole where all of
    them are low precision (`fusion_units`), so that the provider's optimizer fuses them as it fuses the deployed
    graph; a unit with a node that is not gated is left to its nodes' own gates. `op_block_list`: the op types kept
    FP32 (`mixed.blocked_ops`: by default the format's; a backend adds the ones its ONNX Runtime refused)."""
    _check_opset(model, fmt)
    b = _NativeBuilder(model, fmt, op_block_list)
    types = model.tensor_types
    cands = [
        n for n in model.candidates if b.native(n) and all(types.get(t, 0) > 0 for t in n.outputs if t)
    ]
    index = {n.name: i for i, n in enumerate(cands)}
    whole = [tuple(u) for u in units if len(u) > 1 and all(m in index for m in u)]
    unit_of = {m: u for u in whole for m in u}
    out_nodes: list[onnx.NodeProto] = []
    for node, info in zip(model.proto.graph.node, model.nodes):
        if info.name in unit_of:
            unit = unit_of[info.name]
            if info.name == unit[-1]:
                out_nodes += (_unit_if if form == "if" else _unit_where)(b, model, unit, index)
            continue
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
    if whole:
        available = {i.name for i in model.proto.graph.input} | model.initializers | {i.name for i in b.initializers}
        out_nodes = _toposorted(out_nodes, available | {f"{GATE_PREFIX}{i}" for i in range(len(cands))})
    proto = _with_graph(model.proto, out_nodes, b.initializers)
    if whole:  # tensors inside a unit live in its branches now
        made = {t for n in out_nodes for t in n.output}
        static = _static_value_info(model, made)
        given = {v.name for v in static}
        kept = [v for v in proto.graph.value_info if v.name in made and v.name not in given]
        del proto.graph.value_info[:]
        proto.graph.value_info.extend(kept + static)
    for i in range(len(cands)):
        proto.graph.input.append(helper.make_tensor_value_info(
            f"{GATE_PREFIX}{i}", TensorProto.BOOL, [1] if form == "if" else []))
    return NativeGatedGraph(proto=proto, candidates=[n.name for n in cands], fmt=fmt, form=form, units=whole)


def _static_value_info(model: Model, names: Iterable[str]) -> list[onnx.ValueInfoProto]:
    """The fully known shapes of `names` (`Model.tensor_shapes`, ONNX Runtime's symbolic inference included) as value
    infos: ONNX Runtime infers no shape through an If's branches, so without them a unit's branch reads tensors of
    unknown shape and its fusions that need one (MatMulAddFusion of a rank-3 input into Gemm) do not happen there as
    they do in the deployed graph (whisper-base: 67 Gemm in the branches against the deployed graph's 78)."""
    out = []
    for t in sorted(names):
        shape, elem = model.tensor_shapes.get(t), model.tensor_types.get(t)
        if shape is not None and elem and all(d is not None for d in shape):
            out.append(helper.make_tensor_value_info(t, elem, list(shape)))
    return out


def _unit_parts(b: _NativeBuilder, model: Model, unit: tuple[str, ...], index: dict[str, int]):
    """What both forms of a fusion unit share: its members, their outputs read outside it, the Casts of its FLOAT
    inputs from outside (made outside any branch: `unit_lowp`), the And of its members' gates (`cond`)."""
    infos = [model.node(m) for m in unit]
    members = [model.proto.graph.node[n.index] for n in infos]
    names = set(unit)
    read_outside = {t for n in model.nodes if n.name not in names for t in (*n.inputs, *n.implicit_inputs) if t}
    outs = [t for m in members for t in m.output if t and (t in read_outside or t in model.outputs)]
    cond, nodes = f"{GATE_PREFIX}{index[unit[0]]}", []
    made = {t for m in members for t in m.output if t}
    outer: dict[str, str] = {}
    for m in members:
        for k, t in enumerate(m.input):
            if t and t not in made and t not in outer and b.is_float32(t) and _required(m, k, True) != FP32 \
                    and b.lowp_constant(t) is None:
                outer[t] = b.uid(t + "_lp")
                nodes.append(b._cast(t, outer[t], b.fmt.onnx_type))
    for m in unit[1:]:
        both = b.uid("pd_unit_all")
        nodes.append(helper.make_node("And", [cond, f"{GATE_PREFIX}{index[m]}"], [both], name=b.uid("and")))
        cond = both
    return infos, members, outs, outer, cond, nodes


def _member_alone(b: _NativeBuilder, info: NodeInfo, node: onnx.NodeProto, renamed: dict[str, str]):
    """A unit's member on its own gate, reading the members before it as `renamed`: its low-type nodes (into `lo`)
    and its FP32 copy (into `f32`), each output's name after the choice (`here`)."""
    mine = [t for t in node.output if t]
    lo, f32 = {t: b.uid(t + "_low") for t in mine}, {t: b.uid(t + "_f32") for t in mine}
    ins = {t: renamed[t] for t in node.input if t in renamed}
    here = {t: b.uid(t + "_one") for t in mine}
    return mine, lo, f32, b.lowp_nodes(node, lo, ins), b.copy(node, f32, ins), here


def _unit_if(b: _NativeBuilder, model: Model, unit: tuple[str, ...], index: dict[str, int]) -> list[onnx.NodeProto]:
    """A fusion unit as one If on the And of its members' gates: then, every member in the low type together
    (`unit_lowp`); else, each member on its own gate. Its outputs: the members' outputs read outside the unit."""
    types = model.tensor_types
    infos, members, outs, outer, cond, nodes = _unit_parts(b, model, unit, index)
    low = {t: b.uid(t + "_low") for t in outs}
    then_g = helper.make_graph(b.unit_lowp(members, low, outer), b.uid("then"), [],
                               [helper.make_tensor_value_info(low[t], types[t], None) for t in outs])
    renamed: dict[str, str] = {}
    inner: list[onnx.NodeProto] = []
    for info, node in zip(infos, members):
        mine, lo, f32, low_nodes, copy, here = _member_alone(b, info, node, renamed)
        t_g = helper.make_graph(low_nodes, b.uid("then"), [],
                                [helper.make_tensor_value_info(lo[t], types[t], None) for t in mine])
        e_g = helper.make_graph([copy], b.uid("else"), [],
                                [helper.make_tensor_value_info(f32[t], types[t], None) for t in mine])
        inner.append(helper.make_node("If", [f"{GATE_PREFIX}{index[info.name]}"], [here[t] for t in mine],
                                      name=b.uid(info.name), then_branch=t_g, else_branch=e_g))
        renamed.update(here)
    else_g = helper.make_graph(inner, b.uid("else"), [],
                               [helper.make_tensor_value_info(renamed[t], types[t], None) for t in outs])
    nodes.append(helper.make_node("If", [cond], outs, name=b.uid("unit_" + unit[-1]), then_branch=then_g,
                                  else_branch=else_g))
    return nodes


def _unit_where(b: _NativeBuilder, model: Model, unit: tuple[str, ...], index: dict[str, int]) -> list[onnx.NodeProto]:
    """A fusion unit in the where form: every member in the low type together (`unit_lowp`, which the optimizer fuses
    as in the deployed graph) and each member on its own gate (a Where each), a Where on the And of the members' gates
    picking each output read outside the unit."""
    infos, members, outs, outer, cond, nodes = _unit_parts(b, model, unit, index)
    low = {t: b.uid(t + "_low") for t in outs}
    nodes += b.unit_lowp(members, low, outer)
    renamed: dict[str, str] = {}
    for info, node in zip(infos, members):
        mine, lo, f32, low_nodes, copy, here = _member_alone(b, info, node, renamed)
        nodes += [*low_nodes, copy]
        nodes += [helper.make_node("Where", [f"{GATE_PREFIX}{index[info.name]}", lo[t], f32[t]], [here[t]],
                                   name=b.uid("where")) for t in mine]
        renamed.update(here)
    nodes += [helper.make_node("Where", [cond, low[t], renamed[t]], [t], name=b.uid("where")) for t in outs]
    return nodes
