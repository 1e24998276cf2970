"""The emulation rule as graph rewrites.

A node outside the fallback set rounds each floating input and each floating output to the target
format (Cast to FP16/BF16 and back) and computes in FP32 between; a node in the fallback set
computes in FP32 on what it receives and does not round its outputs. Initializers and Constant
outputs are rounded where a low-precision node consumes them, never at the source, and saturate
(`saturate.py`: a finite constant beyond the format's range becomes +-max, as converters write it);
computed tensors overflow to inf.

`gated_graph` builds one graph for all candidates: each candidate's rounding is gated by one
element of a boolean input, so a fallback set is a feed, not a new session. `local_graph` builds
isolated copies of nodes that read exact reference tensors, for each node's local error.

How the gated graph gates (it is a hot loop: a search runs it once per sample per evaluation):
each candidate becomes an `If` on its gate, so only the taken branch runs (no `Where` computing
both). The else branch is the node as it is (FP32). The then branch rounds and computes, and
skips the roundings that cannot change a value, with the same result bit for bit:

- an input made by a candidate that is itself low precision is already rounded, and rounding is
  idempotent, so the then branch branches again on that producer's gate (nested `If`s, one level
  per producing candidate, up to `_MAX_NESTED`) and uses such inputs as they are;
- the output of an op that only moves, selects or compares values (`_EXACT_OPS`: Concat, Reshape,
  Relu, nearest Resize...) computed on rounded inputs is made of rounded values, so it is
  not rounded again.

Rounding happens only where it can change something: at each low-precision node that computes new
values, and at each edge from an FP32 (or non-candidate) producer into a low-precision node.

Both graphs take `rules` (`graph.rules`: a profile such as `ort-cuda`, or rule names): a rule
replaces how a low-precision node of its op computes between its rounded inputs and its rounded
output (e.g. a convolution rounded before its bias is added, as ONNX Runtime's CUDA Conv does). The
default, `standard`, is the rule above. The FP32 side of every node is never changed.

Fusion rules (`graph.fusions`) span nodes: at a site, the anchor's then branch also branches on the
fusion's conditions on the gates of the pattern's other nodes (`Fusion.conditions`: each gate on its own,
or one And of a long pattern's gates: 2**conditions variants, not 2**gates), and where they are low
precision too it computes the fused kernel (reading the pattern's inputs, rounded); the Where form selects
among the same variants with Where on those conditions; the local graph computes the anchor fused (every
node of the pattern low precision) from the pattern's exact inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.errors import UserError
from precision_doctor.graph.emitter import emit_op
from precision_doctor.graph.formats import Format
from precision_doctor.graph.fusions import FUSIONS, Condition, Site, representative
from precision_doctor.graph.model import Model, NodeInfo
from precision_doctor.graph.rules import Rule, RuleSet, resolve_rules
from precision_doctor.graph.saturate import constant_tensors, float_value, saturate_round
from precision_doctor.graph.weights import large

MASK_INPUT = "pd_lowp_mask"
# Producing candidates a low-precision node branches on (2**n variants of its then branch); inputs
# from further producers are rounded whatever their producer's gate (correct, one Cast pair more).
_MAX_NESTED = 3
# Ops whose floating outputs are values of their floating inputs (copied, selected, compared, or
# negated): on rounded inputs the output is rounded already. Only ops without a floating attribute
# that could put a new value into the output.
_EXACT_OPS = {
    "Concat", "Split", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice",
    "Gather", "GatherElements", "GatherND", "Expand", "Tile", "DepthToSpace", "SpaceToDepth",
    "Relu", "Neg", "Abs", "Max", "Min",
}  # not MaxPool: ORT gives -FLT_MAX for a window of NaNs, which rounds to -inf


@dataclass
class GatedGraph:
    """An emulation graph and the candidate order of its gate mask."""

    proto: onnx.ModelProto
    candidates: list[str]
    fmt: Format
    rules: str = "standard"

    def mask(self, fallback: frozenset[str] | set[str]) -> np.ndarray:
        """The gate feed for a fallback set: True = low precision."""
        return np.array([name not in fallback for name in self.candidates], dtype=bool)


class _Builder:
    """Emits rounding nodes with unique names: the `graph.emitter.Emitter` the rules write with."""

    def __init__(self, model: Model, fmt: Format, rules: RuleSet = RuleSet()):
        self.model = model
        self.fmt = fmt
        self.rules = rules
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._rounded_inits: dict[str, str] = {}
        self._inits = {i.name: i for i in model.proto.graph.initializer}
        self._consts = constant_tensors(model)  # Constant outputs: rounded copies too, like initializers
        self._counter = 0
        self.sites: dict[str, Site] = rules.sites(model, fmt)  # anchor node name -> its fusion site
        self.conv_rounds_before_bias = any(r.rounds_before_bias for r in rules.rules)
        self._scalar_gates: dict[str, str] = {}

    def uid(self, base: str) -> str:
        self._counter += 1
        return f"{base}__pd{self._counter}"

    def const(self, base: str, value: np.ndarray) -> str:
        """A new initializer holding `value` (a large one in a file of the model's, `graph/weights.py`); returns its
        name."""
        name = self.uid(base)
        self.initializers.append(self.model.weights.array(name, np.asarray(value)))
        return name

    def round_tensor(self, src: str, dst: str, gate: str | None, elem: int | None = None) -> None:
        """dst = gate ? round(src) : src (gate None: always round); `elem` is src's ONNX type."""
        elem = elem or self.model.tensor_types[src]
        rounded = self._rounded_initializer(src) if self.is_const(src) else None
        if rounded is None:
            rounded = self.uid(src + "_rt")
            self.cast_pair(src, rounded, elem)
        if gate is None:
            self.nodes.append(helper.make_node("Identity", [rounded], [dst], name=self.uid("id")))
        else:
            self.nodes.append(helper.make_node("Where", [gate, rounded, src], [dst], name=self.uid("gate")))

    def cast_pair(self, src: str, dst: str, elem: int) -> None:
        """dst = src cast to the format and back to `elem`."""
        low = self.uid(src + "_lp")
        self.nodes.append(helper.make_node("Cast", [src], [low], to=self.fmt.onnx_type, name=self.uid("cast")))
        self.nodes.append(helper.make_node("Cast", [low], [dst], to=elem, name=self.uid("cast")))

    def is_const(self, name: str) -> bool:
        """An initializer or a Constant's output: rounded (saturated) once, ahead of time."""
        return name in self._inits or name in self._consts

    def reader(self, rounded: dict[str, str], known: frozenset[str] = frozenset()):
        """A `read` for fusions: a tensor's rounded copy (those in `rounded`, constants' rounded copies,
        tensors in `known` as they are, else a new Cast pair, made once)."""
        made = dict(rounded)

        def read(t: str) -> str:
            if t not in made:
                if self.is_const(t):
                    made[t] = self._rounded_initializer(t)
                elif t in known:
                    made[t] = t
                else:
                    made[t] = self.uid(t + "_in")
                    self.cast_pair(t, made[t], self.model.tensor_types[t])
            return made[t]

        return read

    def scalar_gate(self, index: int) -> str:
        """A scalar boolean: candidate `index`'s element of the mask (for Where gates)."""
        key = str(index)
        if key not in self._scalar_gates:
            name = self.uid(f"pd_gate_{index}_s")
            idx = self.const(name + "_idx", np.array(index, dtype=np.int64))
            self.nodes.append(helper.make_node("Gather", [MASK_INPUT, idx], [name], axis=0, name=name))
            self._scalar_gates[key] = name
        return self._scalar_gates[key]

    def _rounded_initializer(self, name: str) -> str:
        if name not in self._rounded_inits:
            new = self.uid(name + "_rounded")
            src = self._inits.get(name)
            if src is not None and large(src):  # its rounded copy in a file, made once for every graph of the model
                self.initializers.append(self.model.weights.derived(
                    new, ("rounded", self.fmt.name, name), lambda: saturate_round(numpy_helper.to_array(src), self.fmt)))
            else:
                arr = numpy_helper.to_array(src) if src is not None else self._consts[name]
                self.initializers.append(numpy_helper.from_array(saturate_round(arr, self.fmt), new))
            self._rounded_inits[name] = new
        return self._rounded_inits[name]


def _check_opset(model: Model, fmt: Format) -> None:
    opset = _opset(model)
    if fmt.onnx_type == TensorProto.BFLOAT16 and opset < 13:
        raise UserError(f"bf16 emulation needs ONNX opset >= 13 (Cast to bfloat16); this model is opset {opset}")


def _opset(model: Model) -> int:
    return next((o.version for o in model.proto.opset_import if o.domain in ("", "ai.onnx")), 0)


def _rewire(
    node: onnx.NodeProto, info: NodeInfo, b: _Builder, gate: str | None, rename_out, round_inputs: bool = True
) -> onnx.NodeProto:
    """Copy `node` with its floating inputs rounded (gated) and its outputs renamed by `rename_out`."""
    new = onnx.NodeProto()
    new.CopyFrom(node)
    replaced: dict[str, str] = {}
    for t in info.float_inputs if round_inputs else ():
        replaced[t] = b.uid(t + "_in")
        b.round_tensor(t, replaced[t], gate)
    for i, t in enumerate(new.input):
        if t in replaced:
            new.input[i] = replaced[t]
    for i, t in enumerate(new.output):
        if t:
            new.output[i] = rename_out(t)
    return new


def _saturated_fill(node: onnx.NodeProto, fmt: Format) -> onnx.NodeProto:
    """A low-precision ConstantOfShape fills with its value rounded and saturated (a constant, as
    `fixed.onnx` writes it), in place; other nodes are returned as they are."""
    if node.op_type == "ConstantOfShape":
        for a in node.attribute:
            if a.name == "value" and (v := float_value(a.t)) is not None:
                a.t.CopyFrom(numpy_helper.from_array(saturate_round(v, fmt), a.t.name))
    return node


def _is_exact(node: onnx.NodeProto) -> bool:
    """Whether the op's floating outputs are made of its floating inputs' values (see `_EXACT_OPS`)."""
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "Resize":  # nearest copies; tf_crop_and_resize may write extrapolation_value
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        mode, coords = attrs.get("mode", b"nearest"), attrs.get("coordinate_transformation_mode")
        return mode == b"nearest" and coords != b"tf_crop_and_resize"
    if node.op_type == "Clip":  # bounds as (rounded) inputs, both given: a missing one defaults to +-FLT_MAX
        return len(node.input) >= 3 and bool(node.input[1]) and bool(node.input[2])
    return node.op_type in _EXACT_OPS


is_exact = _is_exact  # public: what coverage.py reads


def _gate_nodes(model: Model, n: int) -> tuple[list[onnx.NodeProto], list[str]]:
    """One Split of the mask into n one-element gates `pd_gate_<i>` (shape [1]: fine for If, not for Where)."""
    gates = [f"pd_gate_{i}" for i in range(n)]
    if n == 0:
        return [], gates
    attrs = {"axis": 0}
    if _opset(model) >= 18:  # before 18, no `split` means equal parts, one per output
        attrs["num_outputs"] = n
    return [helper.make_node("Split", [MASK_INPUT], gates, name="pd_gates", **attrs)], gates


class _GatedBuilder(_Builder):
    """Builds each candidate as an If on its gate (see the module docstring)."""

    def __init__(self, model: Model, fmt: Format, gates: dict[str, str], rules: RuleSet = RuleSet()):
        super().__init__(model, fmt, rules)
        self.gates = gates  # candidate name -> gate tensor
        self.producer = {o: n.name for n in model.nodes for o in n.outputs if o}
        self._conditions: dict[Condition, str] = {}

    def wrappable(self, info: NodeInfo) -> bool:
        """An If needs each output's element type (sequences and untyped outputs keep the Where gates)."""
        return all(self.model.tensor_types.get(t, 0) > 0 for t in info.outputs if t)

    def condition_gate(self, cond: Condition) -> str:
        """A [1]-shaped boolean for a fusion's condition on its gates (one gate: that gate; else their And or Or,
        made once, in the main graph: the caller puts `self.nodes` before the If that reads it)."""
        kind, names = cond
        if len(names) == 1:
            return self.gates[names[0]]
        key = (kind, names)
        if key not in self._conditions:
            acc = self.gates[names[0]]
            for n in names[1:]:
                acc = emit_op(self, "And" if kind == "all" else "Or", [acc, self.gates[n]], "pd_cond")
            self._conditions[key] = acc
        return self._conditions[key]

    def node_if(self, node: onnx.NodeProto, info: NodeInfo) -> onnx.NodeProto:
        outs = [t for t in node.output if t]
        by_gate: dict[str, list[str]] = {}  # gate of a producing candidate -> its outputs read here
        site = self.sites.get(info.name)
        conds = FUSIONS[site.fusion].conditions(site) if site else ()
        partners = [self.condition_gate(c) for c in conds]
        for gate in partners:  # a fusion's other nodes: always branched on
            by_gate.setdefault(gate, [])
        for t in info.float_inputs:
            p = self.producer.get(t)
            if not self.is_const(t) and p in self.gates:
                by_gate.setdefault(self.gates[p], []).append(t)
        nested = list(by_gate.items())[: max(_MAX_NESTED, len(partners))]
        then_g = self._low(node, info, outs, frozenset(), nested, "then")
        f32 = {t: self.uid(t + "_f32") for t in outs}
        else_g = self._graph([self._copy(node, {}, f32)], "else", [f32[t] for t in outs], outs)
        gate = self.gates[info.name]
        return helper.make_node("If", [gate], outs, name=self.uid(info.name), then_branch=then_g, else_branch=else_g)

    def _low(self, node, info, outs, as_is: frozenset[str], nested, label: str,
             on: frozenset[str] = frozenset()) -> onnx.GraphProto:
        """The low-precision computation; `as_is`: inputs known rounded; `nested`: gates still to branch
        on; `on`: gates known True here."""
        if nested:
            (gate, tensors), rest = nested[0], nested[1:]
            inner_outs = [self.uid(t + "_v") for t in outs]
            inner = helper.make_node(
                "If", [gate], inner_outs, name=self.uid(info.name),
                then_branch=self._low(node, info, outs, as_is | set(tensors), rest, "asis", on | {gate}),
                else_branch=self._low(node, info, outs, as_is, rest, "round", on),
            )
            return self._graph([inner], label, inner_outs, outs)
        nodes, self.nodes = self.nodes, []
        imap = {}
        for t in info.float_inputs:
            if self.is_const(t):
                imap[t] = self._rounded_initializer(t)
            elif t in as_is:
                imap[t] = t
            else:
                imap[t] = self.uid(t + "_in")
                self.cast_pair(t, imap[t], self.model.tensor_types[t])
        raw = {t: self.uid(t + "_raw") for t in outs}
        rule = self.rules.for_node(self.model, node, info)
        site = self.sites.get(info.name)
        fused = {t: self.uid(t + "_fused") for t in outs}
        if site is not None:
            conds = FUSIONS[site.fusion].conditions(site)
            low = representative(conds, [self._conditions.get(c, self.gates[c[1][0]]) in on for c in conds])
        if site is not None and FUSIONS[site.fusion].emit(self, site, low, self.reader(imap, as_is), fused[outs[0]]):
            result, rule = fused, site  # rounded by the fused computation
        elif rule is not None:  # the rule computes from the rounded inputs and rounds its own output
            result = {t: self.uid(t + "_rt") for t in outs}
            rule.emit(self, node, info, imap, result[outs[0]])
        else:
            self.nodes.append(_saturated_fill(self._copy(node, imap, raw), self.fmt))
            result = dict(raw)
        if rule is None and not _is_exact(node):
            for t in info.float_outputs:
                result[t] = self.uid(t + "_rt")
                self.cast_pair(raw[t], result[t], self.model.tensor_types[t])
        body, self.nodes = self.nodes, nodes
        return self._graph(body, label, [result[t] for t in outs], outs)

    def _copy(self, node: onnx.NodeProto, inputs: dict[str, str], outputs: dict[str, str]) -> onnx.NodeProto:
        new = onnx.NodeProto()
        new.CopyFrom(node)
        new.name = self.uid(node.name)
        for i, t in enumerate(new.input):
            if t in inputs:
                new.input[i] = inputs[t]
        for i, t in enumerate(new.output):
            if t:
                new.output[i] = outputs[t]
        return new

    def _graph(self, nodes, label: str, names: list[str], like: list[str]) -> onnx.GraphProto:
        """A branch body whose outputs `names` have the element types of the tensors `like`."""
        types = self.model.tensor_types
        outputs = [helper.make_tensor_value_info(n, types[t], None) for n, t in zip(names, like)]
        return helper.make_graph(nodes, self.uid(label), [], outputs)


def gated_graph(model: Model, fmt: Format, where_gates: bool = False, rules=None) -> GatedGraph:
    """One graph emulating every fallback set; gates come from the boolean input `pd_lowp_mask`.

    `where_gates=True` builds the earlier form instead (each rounding gated by a Where, both sides
    computed; several times slower): the same values, kept as a reference for tests and benchmarks.
    `rules`: the emulation rules (`graph.rules.resolve_rules`; None = standard).
    """
    _check_opset(model, fmt)
    ruleset = resolve_rules(rules)
    cands = [n.name for n in model.candidates]
    index = {name: i for i, name in enumerate(cands)}
    gate_nodes, gate_names = _gate_nodes(model, 0 if where_gates else len(cands))
    b = _GatedBuilder(model, fmt, dict(zip(cands, gate_names)), ruleset)
    out_nodes: list[onnx.NodeProto] = list(gate_nodes)
    for node, info in zip(model.proto.graph.node, model.nodes):
        if info.name not in index:
            out_nodes.append(node)
        elif not where_gates and b.wrappable(info):
            wrapped = b.node_if(node, info)
            out_nodes.extend(b.nodes)  # a fusion's condition gates, read by the If
            b.nodes = []
            out_nodes.append(wrapped)
        else:  # gate each rounding with a Where on a scalar gate (a [1]-shaped one would broadcast)
            gate = f"pd_gate_{index[info.name]}_scalar"
            b.initializers.append(numpy_helper.from_array(np.array(index[info.name], dtype=np.int64), gate + "_idx"))
            b.nodes.append(helper.make_node("Gather", [MASK_INPUT, gate + "_idx"], [gate], axis=0, name=gate))
            raw = {t: f"{t}__pd_raw" for t in info.float_outputs}
            rule = ruleset.for_node(model, node, info)
            site = b.sites.get(info.name)
            if rule is not None or site is not None:  # both sides computed: the FP32 node, the low one rounded
                b.nodes.append(_rewire(node, info, b, None, lambda t, raw=raw: raw.get(t, t), round_inputs=False))
                low = _site_outputs(b, site, rule, node, info, index) if site else _rule_outputs(b, rule, node, info)
                for t in info.float_outputs:
                    b.nodes.append(helper.make_node("Where", [gate, low[t], raw[t]], [t], name=b.uid("gate")))
            else:
                b.nodes.append(_rewire(node, info, b, gate, lambda t, raw=raw: raw.get(t, t)))
                for t in info.float_outputs:
                    b.round_tensor(raw[t], t, gate, model.tensor_types[t])
            out_nodes.extend(b.nodes)
            b.nodes = []
    proto = _with_graph(model.lean_proto(), out_nodes, b.initializers)
    proto.graph.input.append(helper.make_tensor_value_info(MASK_INPUT, TensorProto.BOOL, [len(cands)]))
    return GatedGraph(proto=proto, candidates=cands, fmt=fmt, rules=ruleset.label)


def _rounded_inputs(b: _Builder, info: NodeInfo) -> dict[str, str]:
    rounded = {}
    for t in info.float_inputs:
        rounded[t] = b.uid(t + "_in")
        b.round_tensor(t, rounded[t], None)
    return rounded


def _rule_outputs(b: _Builder, rule: Rule | None, node: onnx.NodeProto, info: NodeInfo,
                  rounded: dict[str, str] | None = None) -> dict[str, str]:
    """The node's low-precision output under `rule` (None: the standard rule), from its floating inputs
    rounded (always)."""
    rounded = _rounded_inputs(b, info) if rounded is None else rounded
    out = node.output[0]
    low = {out: b.uid(out + "_rule")}
    if rule is not None:
        rule.emit(b, node, info, rounded, low[out])
        return low
    raw = {t: b.uid(t + "_raw") for t in node.output if t}
    new = onnx.NodeProto()
    new.CopyFrom(node)
    new.name = b.uid(node.name)
    for i, t in enumerate(node.input):
        new.input[i] = rounded.get(t, t)
    for i, t in enumerate(node.output):
        new.output[i] = raw.get(t, t)
    b.nodes.append(_saturated_fill(new, b.fmt))
    if _is_exact(node):
        b.nodes.append(helper.make_node("Identity", [raw[out]], [low[out]], name=b.uid("id")))
    else:
        b.cast_pair(raw[out], low[out], b.model.tensor_types[out])
    return low


def _site_outputs(b: _Builder, site: Site, rule: Rule | None, node: onnx.NodeProto, info: NodeInfo,
                  index: dict[str, int] | None) -> dict[str, str]:
    """The anchor's low-precision output at a fusion site, inputs rounded (always): one variant per
    state of the site's other nodes, selected by Where on their gates (`index`: candidate -> mask
    position; None: every node of the pattern low precision, as in the local graph)."""
    rounded = _rounded_inputs(b, info)
    read = b.reader(rounded)
    out = node.output[0]
    fusion = FUSIONS[site.fusion]
    conds = list(fusion.conditions(site)) if index is not None else []
    always = frozenset(site.gates) if index is None else frozenset()  # the local graph: the whole pattern low
    variants: dict[tuple[bool, ...], str] = {}
    for k in range(1 << len(conds)):
        holds = tuple(bool(k >> j & 1) for j in range(len(conds)))
        name = b.uid(out + "_fused")
        if not fusion.emit(b, site, representative(conds, holds) | always, read, name):
            name = _rule_outputs(b, rule, node, info, rounded)[out]
        variants[holds] = name

    scalars = []  # each condition as a scalar boolean of the mask
    for kind, names in conds:
        acc = b.scalar_gate(index[names[0]])
        for n in names[1:]:
            acc = emit_op(b, "And" if kind == "all" else "Or", [acc, b.scalar_gate(index[n])], "pd_cond")
        scalars.append(acc)

    def pick(j: int, holds: tuple[bool, ...]) -> str:  # Where over conds[j:], the earlier ones decided
        if j == len(conds):
            return variants[holds]
        sel = b.uid(out + "_sel")
        b.nodes.append(helper.make_node("Where", [scalars[j], pick(j + 1, holds + (True,)),
                                                  pick(j + 1, holds + (False,))], [sel], name=b.uid("gate")))
        return sel

    return {out: pick(0, ())}


def local_output(tensor: str) -> str:
    """Name of a node output's locally computed counterpart in `local_graph`."""
    return f"{tensor}__pd_local"


def local_graph(
    model: Model, fmt: Format, nodes: Sequence[NodeInfo], rules=None
) -> tuple[onnx.ModelProto, list[str]]:
    """Isolated low-precision copies of `nodes`, each reading exact tensors from graph inputs.

    Returns the graph and the names of the tensors it must be fed (non-initializer inputs).
    Each floating output `t` of a node appears as graph output `local_output(t)`. `rules`: as for
    `gated_graph`.
    """
    _check_opset(model, fmt)
    b = _Builder(model, fmt, resolve_rules(rules))
    by_index = {n.index: n for n in nodes}
    feeds: dict[str, None] = {}
    outputs: list[str] = []
    for idx in sorted(by_index):
        info = by_index[idx]
        node = model.proto.graph.node[idx]
        site = b.sites.get(info.name)
        for t in info.inputs + info.implicit_inputs + (site.reads if site else ()):
            if t and t not in model.initializers:
                feeds[t] = None
        rule = b.rules.for_node(model, node, info)
        if site is not None:  # the fused kernel on the pattern's exact inputs
            low = _site_outputs(b, site, rule, node, info, None)
            for t in info.float_outputs:
                b.nodes.append(helper.make_node("Identity", [low[t]], [local_output(t)], name=b.uid("id")))
                outputs.append(t)
            continue
        if rule is not None:
            low = _rule_outputs(b, rule, node, info)
            for t in info.float_outputs:
                b.nodes.append(helper.make_node("Identity", [low[t]], [local_output(t)], name=b.uid("id")))
                outputs.append(t)
            continue
        raw = {t: b.uid(t + "_loc") for t in info.outputs if t}
        new = _rewire(node, info, b, None, lambda t, raw=raw: raw[t])
        b.nodes.append(_saturated_fill(new, fmt))
        for t in info.float_outputs:
            b.round_tensor(raw[t], local_output(t), None, model.tensor_types[t])
            outputs.append(t)
    used_inits = {t for n in nodes for t in n.inputs + n.implicit_inputs if t in model.initializers}
    proto = _with_graph(model.lean_proto(), b.nodes, b.initializers, keep_inits=used_inits, keep_inputs=False)
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
    """A copy of `src` with its nodes replaced (weights shared by value, not re-read: the model's `lean_proto`, whose
    large weights are references to files)."""
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
