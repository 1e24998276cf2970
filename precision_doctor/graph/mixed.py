"""A real mixed-precision ONNX model: low-precision nodes, FP32 islands, Casts only at island borders.

Each node computes in one precision. Candidates outside the fallback set compute in the low type
(FLOAT16 or BFLOAT16): their FLOAT inputs and outputs become that type. Fallback nodes, forced nodes
(`forced_fp32`) and non-candidates (control flow, nodes without floating outputs) stay FP32.

Each FLOAT tensor is produced in one precision. Where consumers of the other precision read it,
exactly one Cast makes the other version, shared by all those consumers; two FP32 nodes next to
each other exchange FP32 directly (unlike onnxconverter-common's per-node Casts). Initializers get
one converted copy per precision that reads them (no runtime Cast of weights); Constant nodes are
converted when only low-precision nodes read them, else kept and given a converted twin. Converted
constants saturate (`saturate.py`: +-65504 for FP16, not inf), as the emulator rounds them.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.errors import UserError
from precision_doctor.graph.formats import Format, get_format
from precision_doctor.graph.model import Model, infer_shapes
from precision_doctor.graph.saturate import constant_tensors, constant_value, lowp_constant_node, to_format

# Ops without low-precision kernels in ONNX Runtime (onnxruntime.transformers.float16's
# DEFAULT_OP_BLOCK_LIST; Resize runs in low precision with its `scales` kept FP32).
FP32_OPS = frozenset(
    {
        "ArrayFeatureExtractor", "Binarizer", "CastMap", "CategoryMapper", "DictVectorizer",
        "FeatureVectorizer", "Imputer", "LabelEncoder", "LinearClassifier", "LinearRegressor",
        "Normalizer", "OneHotEncoder", "RandomUniformLike", "SVMClassifier", "SVMRegressor", "Scaler",
        "TreeEnsembleClassifier", "TreeEnsembleRegressor", "TreeEnsemble", "ZipMap",
        "NonMaxSuppression", "TopK", "RoiAlign", "Range", "CumSum", "Min", "Max", "Upsample",
    }
)  # fmt: skip
# Inputs that ONNX (or the contrib op) types as tensor(float) whatever the data type.
FLOAT_ONLY_INPUTS = {"Resize": (2,), "Upsample": (1,), "GroupNorm": (1, 2), "SkipGroupNorm": (1, 2)}
# Domains whose ops may run in low precision; others (ai.onnx.ml, custom, local functions) stay FP32.
LOWP_DOMAINS = frozenset({"", "ai.onnx", "com.microsoft"})
# Ops (input slots; None = all) that read any element type: they take whichever version exists.
_ANY_TYPE_INPUTS: dict[str, tuple[int, ...] | None] = {"Shape": None, "Size": None, "Cast": (0,), "CastLike": (0,)}

FP32, LOWP, ANY = "fp32", "lowp", "any"


# Op type -> why its nodes stay FP32 (`blocked_ops`); an iterable of op types is read with FP32_OPS's reason.
OpBlockList = Mapping[str, str] | Iterable[str]


def blocked_ops(precision: str = "fp16", extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The op types kept FP32 in `precision`, each with why: FP32_OPS in every format, then `extra` (op types a
    backend found its ONNX Runtime refusing in a BF16 session, `backends.ort.session_keeping_fp32`). No table of
    BF16 kernels is applied ahead of time: the one at hand (ONNX Runtime's 1.17-era operator list) lacked Conv, Exp,
    Gelu, Attention... that later versions run in BF16, and TensorRT runs them too; the running ONNX Runtime says
    what it refuses."""
    out = {op: _fp32_ops_reason(op) for op in sorted(FP32_OPS)}
    for op, why in (extra or {}).items():
        out.setdefault(op, why)
    return out


def _fp32_ops_reason(op: str) -> str:
    return f"{op}: no FP16/BF16 kernel in ONNX Runtime"


def _reasons(op_block_list: OpBlockList | None, precision: str) -> Mapping[str, str]:
    if op_block_list is None:
        return blocked_ops(precision)
    if isinstance(op_block_list, Mapping):
        return op_block_list
    return {op: _fp32_ops_reason(op) for op in op_block_list}


def forced_fp32(model: Model, op_block_list: OpBlockList | None = None, precision: str = "fp16") -> set[str]:
    """Candidates that stay FP32 whatever the fallback set: ops without low-precision kernels (in `precision`:
    `blocked_ops`, unless `op_block_list` names them), ops of other domains, and nodes with no FLOAT output (e.g.
    only DOUBLE)."""
    return set(forced_fp32_nodes(model, op_block_list=op_block_list, precision=precision))


def forced_fp32_nodes(
    model: Model, fallback: Iterable[str] = (), op_block_list: OpBlockList | None = None, precision: str = "fp16"
) -> dict[str, str]:
    """Candidates that `fixed.onnx` keeps in FP32 beyond `fallback` (the answer), in graph order,
    each with the reason (e.g. nudenet's six `Range` nodes: no FP16 kernel in ONNX Runtime; in BF16 also the
    ops whose ONNX schema at the model's opset takes no bfloat16, `no_bf16_in_schema`, and those a backend found its
    ONNX Runtime refusing). `op_block_list`: op types (with reasons, a mapping) instead of `blocked_ops(precision)`."""
    block = _reasons(op_block_list, precision)
    bf16 = get_format(precision).name == "bf16"
    answer = set(fallback)
    out: dict[str, str] = {}
    for info in model.candidates:
        if info.name in answer:
            continue
        domain = model.proto.graph.node[info.index].domain
        has_float = any(model.tensor_types.get(t) == TensorProto.FLOAT for t in info.float_outputs)
        if info.op_type in block:
            out[info.name] = block[info.op_type]
        elif domain not in LOWP_DOMAINS:
            out[info.name] = f"domain '{domain}': only standard and com.microsoft ops are converted"
        elif not has_float:
            out[info.name] = "no FLOAT output (only FLOAT tensors are converted)"
        elif bf16 and (why := no_bf16_in_schema(info.op_type, domain, _opset(model, domain))) is not None:
            out[info.name] = why
    return out


def _opset(model: Model, domain: str) -> int:
    wanted = "" if domain == "ai.onnx" else domain
    return next((o.version for o in model.proto.opset_import if o.domain == wanted), 0)


@functools.cache
def no_bf16_in_schema(op: str, domain: str, opset: int) -> str | None:
    """Why a node of `op` stays FP32 in BF16 where ONNX's own schema of it at `opset` takes no bfloat16 where it
    takes float16 and float (Conv before opset 22, Resize before 19...): a graph with it in BF16 is not valid ONNX,
    and ONNX Runtime refuses it (measured: nudenet-320n at opset 17 on the H200). None where it does, or where ONNX
    has no schema of it here (com.microsoft ops: the session-time net, `backends.ort.session_keeping_fp32`)."""
    if domain not in ("", "ai.onnx") or opset <= 0 or _takes_bf16(op, opset) is not False:
        return None
    latest = onnx.defs.onnx_opset_version()
    first = next((v for v in range(opset + 1, latest + 1) if _takes_bf16(op, v)), None)
    since = f"it does from opset {first}" if first is not None else "nor does any opset ONNX knows"
    return f"{op}: ONNX opset {opset} has no bfloat16 for {op} ({since}); the model's opset decides"


def _takes_bf16(op: str, opset: int) -> bool | None:
    """Whether the schema of `op` at `opset` takes bfloat16 on its data path (the type parameters of its first input
    and its outputs) where it takes float16 and float; None: no such schema. Other inputs (Resize's roi) are left to
    the session-time net."""
    try:
        schema = onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return None
    used = {p.type_str for p in schema.inputs[:1]} | {p.type_str for p in schema.outputs}
    floats = [set(c.allowed_type_strs) for c in schema.type_constraints if c.type_param_str in used
              and {"tensor(float16)", "tensor(float)"} <= set(c.allowed_type_strs)]
    return all("tensor(bfloat16)" in c for c in floats) if floats else None


def lowp_nodes(model: Model, fallback: Iterable[str], op_block_list: OpBlockList | None = None,
               precision: str = "fp16", forced: frozenset[str] | None = None) -> set[str]:
    """Names of the nodes that compute in low precision (`precision`) for `fallback`; `forced`: `forced_fp32`'s set,
    where the caller has it."""
    if forced is None:
        forced = frozenset(forced_fp32(model, op_block_list, precision))
    return {n.name for n in model.candidates} - set(fallback) - forced


def _required(node: onnx.NodeProto, slot: int, lowp: bool) -> str:
    """The precision a node needs at one input slot."""
    if node.op_type in _ANY_TYPE_INPUTS:
        slots = _ANY_TYPE_INPUTS[node.op_type]
        if slots is None or slot in slots:
            return ANY
    if lowp and slot in FLOAT_ONLY_INPUTS.get(node.op_type, ()):
        return FP32
    return LOWP if lowp else FP32


@dataclass(frozen=True)
class _Layout:
    """What a plan reads of a model whatever the set: per node its FLOAT inputs with the precision each slot needs
    when the node is low and when it is FP32, its FLOAT implicit inputs and outputs (computed once per model: a cost
    model plans the Casts of every set the search tries)."""

    # per node, in order: its FLOAT inputs (name, precision needed when low, when FP32), implicit inputs, outputs
    nodes: tuple[tuple[tuple[tuple[str, str, str], ...], tuple[str, ...], tuple[str, ...]], ...]
    init_names: frozenset[str]
    input_names: frozenset[str]
    graph_inputs: tuple[str, ...]  # the FLOAT graph inputs, in order
    graph_outputs: frozenset[str]
    sparse_constants: frozenset[str]  # Constant nodes whose value is sparse (never made low ahead of time)


def _layout(model: Model) -> _Layout:
    """`model`'s `_Layout`, kept on the model: made again where its proto or its tensor types are other objects or
    its node count changed, not for an edit of the proto in place (a loaded model's proto is never edited: its
    `lean_proto` assumes it too)."""
    key = (id(model.proto), id(model.tensor_types), len(model.proto.graph.node), len(model.nodes))
    cached = model.__dict__.get("_mixed_layout")
    if cached is not None and cached[0] == key:
        return cached[1]
    g = model.proto.graph
    types = model.tensor_types

    def is32(t: str) -> bool:
        return bool(t) and types.get(t) == TensorProto.FLOAT

    per_node = []
    for node, info in zip(g.node, model.nodes):
        ins = tuple((t, _required(node, k, True), _required(node, k, False)) for k, t in enumerate(node.input) if is32(t))
        per_node.append((ins, tuple(t for t in info.implicit_inputs if is32(t)), tuple(t for t in node.output if is32(t))))
    layout = _Layout(tuple(per_node), frozenset(i.name for i in g.initializer), frozenset(i.name for i in g.input),
                     tuple(i.name for i in g.input if is32(i.name)), frozenset(o.name for o in g.output),
                     frozenset(n.name for n, node in zip(model.nodes, g.node)
                               if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "sparse_value"))
    model.__dict__["_mixed_layout"] = (key, layout)
    return layout


class _Plan:
    """Which precision each FLOAT tensor is produced in, needed in, and named as."""

    def __init__(self, model: Model, lowp: set[str], fmt: Format, keep_io_types: bool,
                 constants: dict[str, np.ndarray] | None = None):
        self.model, self.fmt = model, fmt
        self.is32 = lambda t: bool(t) and model.tensor_types.get(t) == TensorProto.FLOAT
        self._layout = lay = _layout(model)
        self.pure_inits = lay.init_names - lay.input_names
        self.req: dict[str, set[str]] = defaultdict(set)
        for info, (ins, implicit, _) in zip(model.nodes, lay.nodes):
            is_lowp = info.name in lowp
            for t, low, full in ins:
                self.req[t].add(low if is_lowp else full)
            for t in implicit:
                self.req[t].add(FP32)
        self.graph_outputs = set(lay.graph_outputs)
        for t in self.graph_outputs:
            if self.is32(t):
                self.req[t].add(FP32 if keep_io_types else ANY)
        self.produced: dict[str, str] = {}
        for name in lay.graph_inputs:
            only_lowp = self.req[name] - {ANY} == {LOWP}
            free = not keep_io_types and name not in lay.init_names
            self.produced[name] = LOWP if (free and only_lowp) else FP32
        self.lowp_constants: set[str] = set()
        # a low version of these is a Constant, not a Cast
        self.constant_values = constant_tensors(model) if constants is None else constants
        for info, (_, _, outs) in zip(model.nodes, lay.nodes):
            for t in outs:
                if info.op_type == "Constant":
                    ok = self.req[t] - {ANY} == {LOWP} and info.name not in lay.sparse_constants
                    self.produced[t] = LOWP if ok else FP32
                    if ok:
                        self.lowp_constants.add(t)
                else:
                    self.produced[t] = LOWP if info.name in lowp else FP32
        # Versions each tensor needs (ANY resolves to the produced one) and the precision its own name carries.
        self.needed: dict[str, set[str]] = {}
        self.home: dict[str, str] = {}
        for t in self.pure_inits:
            if self.is32(t):
                need = self.req[t] - {ANY} or {FP32}
                self.needed[t] = need
                self.home[t] = FP32 if FP32 in need else LOWP
        for t, p in self.produced.items():
            self.needed[t] = {p if r == ANY else r for r in self.req[t]} | {p}
            self.home[t] = FP32 if (t in self.graph_outputs and keep_io_types) else p
        self._taken: set[str] | None = None  # every name in the graph: made when a version is first named
        self._names: dict[tuple[str, str], str] = {}

    def taken(self) -> set[str]:
        """The names the graph uses, and those given to versions so far (a plan that only counts Casts never needs
        them: a cost model asks for many sets)."""
        if self._taken is None:
            lay = self._layout
            self._taken = set(lay.init_names | lay.input_names | lay.graph_outputs)
            self._taken.update(t for n in self.model.proto.graph.node for t in (*n.input, *n.output))
        return self._taken

    def name(self, t: str, p: str) -> str:
        """The name of tensor `t`'s version in precision `p`."""
        if p == ANY:
            p = self.produced.get(t, self.home.get(t, FP32))
        if p == self.home[t]:
            return t
        key = (t, p)
        if key not in self._names:
            base = f"{t}__pd_{'fp32' if p == FP32 else self.fmt.name}"
            new, k, taken = base, 1, self.taken()
            while new in taken:
                new, k = f"{base}_{k}", k + 1
            taken.add(new)
            self._names[key] = new
        return self._names[key]

    def value_info(self, nodes: Iterable[onnx.NodeProto]) -> list[onnx.ValueInfoProto]:
        """The value_info of the mixed graph's `nodes`' outputs, in their order, without ONNX's shape inference: each
        version of a tensor has the model's inferred shape of that tensor and its precision's element type (a Cast's
        output is a version too). Tensors the model's inference left untyped stay so. What ONNX's shape inference of
        the mixed graph gives, to the byte (tests/graph/test_mixed.py), in a fraction of its time, but for one thing:
        a graph output's other-precision version has the output's shape as the model declares it: a dynamic
        dimension named as declared ("batch") where the inference makes a name up ("unk__171"), and a wrong
        declaration copied where the inference would have kept its own. ONNX Runtime's outputs are the same bit for
        bit (whisper-base, mpnet-base: bench/trial_session.py)."""
        version = {v: key for key, v in self._names.items()}
        out = []
        for node in nodes:
            for name in node.output:
                t, p = version.get(name, (name, self.home.get(name)))
                known = self.model.value_info.get(t)
                if known is None:
                    continue
                vi = onnx.ValueInfoProto()
                vi.CopyFrom(known)
                vi.name = name
                if self.is32(t) and p is not None:
                    vi.type.tensor_type.elem_type = self.elem_type(p)
                out.append(vi)
        return out

    def other_versions(self, t: str) -> list[str]:
        """The precisions besides its own that a produced tensor is needed in (each one Cast or converted Constant)."""
        return sorted(self.needed[t] - {self.produced[t]})

    def converted_ahead(self, t: str, p: str) -> bool:
        """Whether version `p` of `t` is a constant converted ahead of time (it saturates; a Cast would overflow)."""
        return p == LOWP and t in self.constant_values

    def casts(self, t: str) -> list[onnx.NodeProto]:
        """The border Casts of a produced tensor: one per other precision it is needed in."""
        src = self.produced[t]
        out = []
        for p in self.other_versions(t):
            dst = self.name(t, p)
            if self.converted_ahead(t, p):
                out.append(lowp_constant_node(f"{dst}__const", dst, self.constant_values[t], self.fmt))
                continue
            out.append(helper.make_node("Cast", [self.name(t, src)], [dst], name=f"{dst}__cast", to=self.elem_type(p)))
        return out

    def elem_type(self, p: str) -> int:
        return TensorProto.FLOAT if p == FP32 else self.fmt.onnx_type


def _convert_tensor(t: onnx.TensorProto, fmt: Format, name: str | None = None) -> onnx.TensorProto:
    arr = numpy_helper.to_array(t)
    return numpy_helper.from_array(to_format(arr, fmt), t.name if name is None else name)


def _lowp_constant(node: onnx.NodeProto, fmt: Format) -> None:
    """Convert a FLOAT Constant's value to the low type, in place."""
    tensor = numpy_helper.from_array(to_format(constant_value(node), fmt))
    del node.attribute[:]
    node.attribute.append(helper.make_attribute("value", tensor))


def _fix_type_attributes(node: onnx.NodeProto, fmt: Format) -> None:
    """Attributes of a low-precision node that name FLOAT as a data type now name the low type."""
    op, low = node.op_type, fmt.onnx_type
    attrs = {a.name: a for a in node.attribute}
    if op == "Cast" and attrs["to"].i == TensorProto.FLOAT:
        attrs["to"].i = low
    elif op == "ConstantOfShape":
        if "value" not in attrs:
            zero = numpy_helper.from_array(np.zeros(1, dtype=fmt.np_dtype), "value")
            node.attribute.append(helper.make_attribute("value", zero))
        elif attrs["value"].t.data_type == TensorProto.FLOAT:
            attrs["value"].t.CopyFrom(_convert_tensor(attrs["value"].t, fmt))
    elif op in ("RandomNormal", "RandomUniform") and attrs.get("dtype", None) is None:
        node.attribute.append(helper.make_attribute("dtype", low))
    elif "dtype" in attrs and attrs["dtype"].i == TensorProto.FLOAT:  # *Like, EyeLike, Bernoulli, Random*
        attrs["dtype"].i = low


def _rename_in_subgraphs(node: onnx.NodeProto, mapping: dict[str, str]) -> None:
    """Outer-scope reads inside a node's subgraphs (If/Loop/Scan) go to the renamed tensors."""
    for attr in node.attribute:
        for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
            local = {i.name for i in sub.input} | {i.name for i in sub.initializer}
            local.update(o for n in sub.node for o in n.output)
            todo = {k: v for k, v in mapping.items() if k not in local}
            for inner in sub.node:
                for k, t in enumerate(inner.input):
                    if t in todo:
                        inner.input[k] = todo[t]
                _rename_in_subgraphs(inner, todo)
            for o in sub.output:
                if o.name in todo:
                    o.name = todo[o.name]


@dataclass(frozen=True)
class BorderCast:
    """One runtime Cast of `fixed.onnx`: tensor `tensor` made in precision `to` ("fp32" or "lowp")."""

    tensor: str
    to: str


def border_casts(
    model: Model,
    fallback: frozenset[str] | set[str],
    precision: str = "fp16",
    keep_io_types: bool = True,
    op_block_list: OpBlockList | None = None,
    constants: dict[str, np.ndarray] | None = None,
    forced: frozenset[str] | None = None,
) -> list[BorderCast]:
    """The Cast nodes `build_mixed` puts in the model for `fallback` (the same plan; graph inputs first, then in
    node order), without building it. Constants converted ahead of time are not Casts. `constants` and `forced`: the
    model's `constant_tensors` and `forced_fp32`, when the caller has them (a cost model asks for many sets)."""
    lowp = lowp_nodes(model, fallback, op_block_list, precision, forced)
    plan = _Plan(model, lowp, get_format(precision), keep_io_types, constants)
    return [BorderCast(t, p) for t in plan.produced for p in plan.other_versions(t) if not plan.converted_ahead(t, p)]


def build_mixed(
    model: Model,
    fallback: frozenset[str] | set[str],
    precision: str = "fp16",
    keep_io_types: bool = True,
    op_block_list: OpBlockList | None = None,
    lean: bool = False,
) -> onnx.ModelProto:
    """The mixed-precision model for `fallback` (node names kept in FP32), as a new proto.

    `keep_io_types` keeps FLOAT graph inputs and outputs FLOAT (Casts at the I/O borders); without
    it they take the low type where all their readers (inputs) or their producer (outputs) are
    low precision. Nodes in `forced_fp32(model, op_block_list, precision)` stay FP32 too (in BF16 more op types
    than in FP16: `blocked_ops`). Its value_info: the model's inferred shapes with each version's element type
    (`_Plan.value_info`: ONNX's shape inference of the mixed graph without running it; ONNX Runtime fuses by these
    shapes, and the inference was 4.2 of a whisper-base trial's 7.2 s on the CPU); where the model has none, the
    inference. `lean`: its large weights, and their low-precision copies, refer to the model's weight files
    (`graph/weights.py`; each copy converted and written once per model and format): a graph for an ONNX Runtime
    session, not for a user's file.
    """
    fmt = get_format(precision)
    opset = next((o.version for o in model.proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    if fmt.onnx_type == TensorProto.BFLOAT16 and opset < 13:
        raise UserError(f"a bf16 model needs ONNX opset >= 13 (Cast to bfloat16); this model is opset {opset}")
    src = model.proto.graph
    lowp = lowp_nodes(model, fallback, op_block_list, precision)
    plan = _Plan(model, lowp, fmt, keep_io_types)

    nodes: list[onnx.NodeProto] = []
    for i in src.input:
        if i.name in plan.produced:
            nodes.extend(plan.casts(i.name))
    for node, info in zip(src.node, model.nodes):
        new = onnx.NodeProto()
        new.CopyFrom(node)
        is_lowp = info.name in lowp
        for k, t in enumerate(node.input):
            if plan.is32(t):
                new.input[k] = plan.name(t, _required(node, k, is_lowp))
        for k, t in enumerate(node.output):
            if plan.is32(t):
                new.output[k] = plan.name(t, plan.produced[t])
        if is_lowp:
            _fix_type_attributes(new, fmt)
        if node.op_type == "Constant" and node.output[0] in plan.lowp_constants:
            _lowp_constant(new, fmt)
        renames = {t: plan.name(t, FP32) for t in info.implicit_inputs if plan.is32(t)}
        if any(k != v for k, v in renames.items()):
            _rename_in_subgraphs(new, {k: v for k, v in renames.items() if k != v})
        nodes.append(new)
        for t in node.output:
            if t in plan.produced:
                nodes.extend(plan.casts(t))

    inits: list[onnx.TensorProto] = []
    stubs = model.lean_proto().graph.initializer if lean else src.initializer
    for init, stub in zip(src.initializer, stubs):
        if init.name not in plan.needed or init.name not in plan.pure_inits:
            inits.append(stub)
            continue
        for p in sorted(plan.needed[init.name]):  # the FP32 version, when needed, keeps the name
            if p == FP32:
                inits.append(stub)
            elif stub.data_location == TensorProto.EXTERNAL:  # in a file: its low-precision copy too
                inits.append(model.weights.derived(plan.name(init.name, p), ("mixed", fmt.name, init.name),
                                                   lambda init=init: to_format(numpy_helper.to_array(init), fmt)))
            else:
                inits.append(_convert_tensor(init, fmt, plan.name(init.name, p)))

    out = onnx.ModelProto()
    for field in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        setattr(out, field, getattr(model.proto, field))
    out.opset_import.extend(model.proto.opset_import)
    out.metadata_props.extend(model.proto.metadata_props)
    out.functions.extend(model.proto.functions)
    g = out.graph
    g.name, g.doc_string = src.name, src.doc_string
    g.node.extend(nodes)
    g.initializer.extend(inits)
    g.sparse_initializer.extend(src.sparse_initializer)
    g.input.extend(src.input)
    g.output.extend(src.output)
    for vi in g.input:
        if vi.name in plan.produced:
            vi.type.tensor_type.elem_type = plan.elem_type(plan.produced[vi.name])
    for vi in g.output:
        if vi.name in plan.home:
            vi.type.tensor_type.elem_type = plan.elem_type(plan.home[vi.name])
    known = {v.name for v in g.input} | {v.name for v in g.output} | {i.name for i in g.initializer}
    if model.value_info:
        g.value_info.extend(v for v in plan.value_info(g.node) if v.name not in known)
    else:
        inferred = infer_shapes(out)
        g.value_info.extend(v for v in inferred.graph.value_info if v.name not in known)
    return out
