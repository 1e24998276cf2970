"""Load an ONNX model and take stock of it: nodes in topological order, tensor types, FLOPs, hash."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from precision_doctor.errors import SpecError, UserError
from precision_doctor.graph import names
from precision_doctor.graph.ort_shapes import with_ort_dims
from precision_doctor.graph.weights import WeightFiles, lean_copy, weightless

FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
CONTROL_FLOW_OPS = {"If", "Loop", "Scan"}
# Nodes that never compute in low precision on their own: their outputs are inputs in the rule's sense.
SOURCE_OPS = {"Constant"}
_TWO_GB = 2**31


@dataclass(frozen=True)
class NodeInfo:
    """One ONNX node as the rest of the tool sees it."""

    index: int
    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    float_inputs: tuple[str, ...]
    float_outputs: tuple[str, ...]
    implicit_inputs: tuple[str, ...] = ()
    flops: int = 0

    @property
    def is_candidate(self) -> bool:
        """Whether precision can be chosen for this node: it computes floating outputs, and it is not
        a source (Constant) or a control-flow node (If/Loop/Scan run whole, in FP32)."""
        return bool(self.float_outputs) and self.op_type not in SOURCE_OPS | CONTROL_FLOW_OPS


@dataclass
class Model:
    """A loaded model with its inventory. `proto` has names filled in and shapes inferred."""

    path: Path | None
    proto: onnx.ModelProto
    nodes: list[NodeInfo]
    tensor_types: dict[str, int]
    tensor_shapes: dict[str, tuple]
    initializers: set[str]
    inputs: list[str]
    outputs: list[str]
    model_hash: str
    renamed_nodes: list[str] = field(default_factory=list)
    unsafe_names: dict[str, str] = field(default_factory=dict)  # renamed node -> its name in the file, escaped
    # the graph inputs' dimensions as the file declares them (None: dynamic), before `--input-shapes` fixed any
    declared_shapes: dict[str, tuple[int | None, ...]] = field(default_factory=dict)
    # op types ONNX Runtime refused a session of this model for, per (backend, format, optimization level): op -> why
    # (backends/ort.py: every backend of the run over this model starts from it instead of learning them again)
    ort_refused: dict[tuple[str, str, str], dict[str, str]] = field(default_factory=dict, repr=False, compare=False)
    # ONNX's shape inference of `proto` (with data propagation): each tensor's type and shape (graph inputs, outputs and
    # interior tensors), copied out of the inferred graph; the mixed graphs' own (graph/mixed.py) are these with their
    # precisions' element types
    value_info: dict[str, onnx.ValueInfoProto] = field(default_factory=dict, repr=False, compare=False)

    @property
    def weights(self) -> WeightFiles:
        """The files of this model's large weights (`graph/weights.py`), made when first asked: every graph that
        sessions run refers to them (`lean_proto`, the emulation graphs' rounded weights)."""
        if not hasattr(self, "_weight_files"):
            self._weight_files = WeightFiles()
        return self._weight_files

    def with_tensor_shapes(self, shapes: dict) -> Model:
        """This model with other tensor shapes (the same proto), sharing its weight files: none written again."""
        new = dataclasses.replace(self, tensor_shapes=shapes)
        for attr in ("_weight_files", "_lean_proto"):
            if hasattr(self, attr):
                setattr(new, attr, getattr(self, attr))
        return new

    def lean_proto(self) -> onnx.ModelProto:
        """`proto` with its large initializers as references to `weights`' files (made once: `proto` must not change
        afterwards): what the graphs for sessions are copied from, so that they carry no weights."""
        if not hasattr(self, "_lean_proto"):
            self._lean_proto = lean_copy(self.proto, self.weights)
        return self._lean_proto

    @property
    def candidates(self) -> list[NodeInfo]:
        return [n for n in self.nodes if n.is_candidate]

    def node(self, name: str) -> NodeInfo:
        return self._by_name[name]

    @property
    def _by_name(self) -> dict[str, NodeInfo]:
        if not hasattr(self, "_cache_by_name"):
            self._cache_by_name = {n.name: n for n in self.nodes}
        return self._cache_by_name

    def producers(self) -> dict[str, NodeInfo]:
        """Tensor name -> node that produces it."""
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> dict[str, list[NodeInfo]]:
        """Tensor name -> nodes that read it (explicitly or from a subgraph)."""
        out: dict[str, list[NodeInfo]] = {}
        for n in self.nodes:
            for t in dict.fromkeys(n.inputs + n.implicit_inputs):
                if t:
                    out.setdefault(t, []).append(n)
        return out

    def is_float(self, tensor: str) -> bool:
        return self.tensor_types.get(tensor) in FLOAT_TYPES

    @property
    def total_flops(self) -> int:
        return sum(n.flops for n in self.nodes)

    def node_records(self) -> list[dict]:
        """What analysis needs to know of the nodes (also stored with a capture for re-analysis)."""
        return [
            {
                "index": n.index,
                "name": n.name,
                "op_type": n.op_type,
                "float_inputs": list(n.float_inputs),
                "float_outputs": list(n.float_outputs),
                "candidate": n.is_candidate,
                "flops": n.flops,
            }
            for n in self.nodes
        ]


def load_model(path: str | os.PathLike, input_shapes: dict[str, list[int]] | None = None) -> Model:
    """Load `path` (external data too), name unnamed nodes, infer shapes and types, take inventory."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"model file not found: {p}")
    if p.is_dir():
        raise UserError(f"model path is a directory, not an ONNX file: {p}")
    try:
        proto = onnx.load(str(p), load_external_data=True)
    except Exception as exc:  # protobuf raises several unrelated types
        missing = re.search(r"should be stored in (.+?), but it (doesn't exist|is not regular file)", str(exc))
        if missing:
            raise UserError(
                f"{p}: its weights are stored in an external data file that is missing: {missing.group(1)} "
                "(keep the model's .data file beside it)"
            ) from exc
        raise UserError(f"not a readable ONNX model: {p} ({type(exc).__name__}: {str(exc)[:120]})") from exc
    if not proto.graph.node:
        raise UserError(f"not an ONNX model or an empty graph: {p}")
    return from_proto(proto, path=p, input_shapes=input_shapes)


def from_proto(
    proto: onnx.ModelProto, path: Path | None = None, input_shapes: dict[str, list[int]] | None = None
) -> Model:
    """Build the inventory of an in-memory model (see `load_model`)."""
    where = str(path) if path else "the model"
    _check_text(proto.graph, where)
    unsafe_names: dict[str, str] = {}
    renamed = name_nodes(proto.graph, unsafe_names)
    _check_io_types(proto.graph, where)
    try:
        onnx.checker.check_model(proto, full_check=False) if not over_protobuf_limit(proto) else None
    except onnx.checker.ValidationError as exc:
        raise UserError(f"{where}: invalid ONNX model: {str(exc).splitlines()[0][:200]}") from exc
    check_runtime_support(proto, where)
    model_hash = hash_model(proto)
    inits = {i.name for i in proto.graph.initializer}
    declared = {i.name: declared_dims(i.type.tensor_type.shape) for i in proto.graph.input if i.name not in inits}
    if input_shapes:
        set_input_shapes(proto, input_shapes)
    inferred = infer_shapes(proto)
    types, shapes = tensor_types_and_shapes(inferred)
    shapes = with_ort_dims(proto, shapes)
    missing = [t for n in proto.graph.node for t in n.output if t and t not in types]
    if missing:
        types.update(_types_from_ort(proto, missing))
    graph_inputs = [i.name for i in proto.graph.input if i.name not in inits]
    nodes = []
    for idx, node in enumerate(proto.graph.node):
        implicit = tuple(sorted(implicit_inputs(node)))
        nodes.append(
            NodeInfo(
                index=idx,
                name=node.name,
                op_type=node.op_type,
                inputs=tuple(node.input),
                outputs=tuple(node.output),
                float_inputs=tuple(dict.fromkeys(t for t in node.input if t and types.get(t) in FLOAT_TYPES)),
                float_outputs=tuple(t for t in node.output if t and types.get(t) in FLOAT_TYPES),
                implicit_inputs=implicit,
                flops=estimate_flops(node, shapes, proto),
            )
        )
    return Model(
        path=path,
        proto=proto,
        value_info={v.name: _copied(v) for part in ("input", "output", "value_info")
                    for v in getattr(inferred.graph, part)},
        nodes=nodes,
        tensor_types=types,
        tensor_shapes=shapes,
        initializers=inits,
        inputs=graph_inputs,
        outputs=[o.name for o in proto.graph.output],
        model_hash=model_hash,
        renamed_nodes=renamed,
        unsafe_names=unsafe_names,
        declared_shapes=declared,
    )


def _check_io_types(graph: onnx.GraphProto, where: str) -> None:
    """Graph inputs and outputs must say their type (the checker's message names no tensor)."""
    for kind, infos in (("input", graph.input), ("output", graph.output)):
        for vi in infos:
            if not vi.HasField("type"):
                raise UserError(f"{where}: invalid ONNX model: graph {kind} '{vi.name}' has no type")


_DEFAULT_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")  # the ONNX checker knows these ops


def check_runtime_support(proto: onnx.ModelProto, where: str = "the model") -> None:
    """Refuse what ONNX Runtime cannot load, before anything runs: an ONNX opset newer than it
    knows, or an op of a domain it does not know (a custom op, whose library this tool cannot load).
    The message names the model, and the node and op."""
    for imp in proto.opset_import:
        if imp.domain in ("", "ai.onnx") and imp.version > onnx.defs.onnx_opset_version():
            newest = max(onnx.defs.onnx_opset_version(), _ort_newest_opset())
            if imp.version > newest:
                raise UserError(
                    f"{where}: the model imports ONNX opset {imp.version}, but ONNX Runtime here supports opsets up "
                    f"to {newest}: export it with opset {newest} or lower"
                )
    local = {(f.domain, f.name) for f in proto.functions}
    for node in _all_nodes(proto.graph):
        if node.domain in _DEFAULT_DOMAINS or (node.domain, node.op_type) in local:
            continue
        if (node.domain, node.op_type) not in _ort_ops():
            raise UserError(
                f"{where}: node '{node.name or node.op_type}' is the custom op '{node.op_type}' of domain "
                f"'{node.domain}', which ONNX Runtime does not know (precision-doctor cannot load custom-op "
                "libraries: export the model with standard ONNX ops)"
            )


def _all_nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    """Every node, those of subgraphs (If/Loop/Scan bodies) too."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                yield from _all_nodes(sub)


@functools.cache
def _ort_ops() -> frozenset[tuple[str, str]]:
    """(domain, op type) of every op ONNX Runtime has a schema for (its contrib ops too)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

    return frozenset((s.domain, s.name) for s in ort_c.get_all_operator_schema())


def _ort_newest_opset() -> int:
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

    return max(s.since_version for s in ort_c.get_all_operator_schema() if s.domain in ("", "ai.onnx"))


def name_nodes(graph: onnx.GraphProto, unsafe_names: dict[str, str] | None = None) -> list[str]:
    """Give unnamed, duplicate-named and unsafely named nodes (`graph/names.py`: control characters, bytes
    that are not UTF-8) stable names `<op>_<index>`; return the names given. `unsafe_names` receives each
    unsafe name's new name -> the old one, escaped (`names.shown`)."""
    seen: set[str] = set()
    given = []
    for idx, node in enumerate(graph.node):
        bad = bool(node.name) and names.unsafe(node.name) is not None
        if not node.name or bad or node.name in seen:
            base = f"{node.op_type}_{idx}"
            name, k = base, 1
            while name in seen:
                name, k = f"{base}_{k}", k + 1
            if bad and unsafe_names is not None:
                unsafe_names[name] = names.shown(node.name)
            node.name = name
            given.append(name)
        seen.add(node.name)
    return given


def _check_text(graph: onnx.GraphProto, where: str) -> None:
    """Refuse names protobuf hands over as bytes (not UTF-8) where renaming cannot help: op types, domains,
    tensor names (graph inputs and outputs are the samples' keys), subgraph node names. The main graph's
    node names are renamed instead (`name_nodes`)."""
    def refuse(what: str, value: object) -> UserError:
        return UserError(f"{where}: {what} is not valid UTF-8 text ({names.shown(value)}); ONNX names must be UTF-8")

    def walk(g: onnx.GraphProto, top: bool) -> None:
        for infos, kind in ((g.input, "graph input"), (g.output, "graph output"), (g.value_info, "tensor"),
                            (g.initializer, "initializer")):
            for vi in infos:
                if not isinstance(vi.name, str):
                    raise refuse(f"the name of a {kind}", vi.name)
        for node in g.node:
            label = f"node '{names.shown(node.name)}'"
            if not top and not isinstance(node.name, str):
                raise refuse("the name of a node inside a subgraph", node.name)
            for what, value in (("op type", node.op_type), ("domain", node.domain)):
                if not isinstance(value, str):
                    raise refuse(f"the {what} of {label}", value)
            for t in (*node.input, *node.output):
                if not isinstance(t, str):
                    raise refuse(f"a tensor name of {label}", t)
            for attr in node.attribute:
                for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                    walk(sub, False)

    walk(graph, True)


def over_protobuf_limit(proto: onnx.ModelProto, margin: int = 0) -> bool:
    """Whether `proto` is too large to serialize as one message (protobuf's 2 GB, less `margin`): such a model's
    weights go to an external data file. Past the limit protobuf refuses even to say its size (EncodeError)."""
    try:
        return proto.ByteSize() >= _TWO_GB - margin
    except Exception:  # google.protobuf.message.EncodeError: "Failed to serialize proto"
        return True


def save_with_external_data(proto: onnx.ModelProto, path: Path) -> Path:
    """`proto` saved at `path` with its weights in `<name>.data` beside it (a model past protobuf's limit), `proto`
    itself untouched (onnx's save empties the tensors of the proto it is given). A data file already there is replaced
    (onnx appends to it); the tensors are marked here, as onnx's own conversion refuses where the *working directory*
    holds a file of that name."""
    from onnx.external_data_helper import set_external_data

    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    data = path.with_name(path.name + ".data")
    data.unlink(missing_ok=True)
    for graph in _all_graphs(copy.graph):
        for t in graph.initializer:
            if t.HasField("raw_data") and len(t.raw_data) >= 1024:
                set_external_data(t, data.name)
    onnx.save(copy, str(path))
    return path


def _all_graphs(graph: onnx.GraphProto) -> Iterable[onnx.GraphProto]:
    """`graph` and every subgraph in it (If/Loop/Scan bodies)."""
    yield graph
    for node in _all_nodes(graph):
        for attr in node.attribute:
            yield from [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)


def hash_model(proto: onnx.ModelProto) -> str:
    """A stable SHA-256 of graph structure and weights (works past the 2 GB protobuf limit)."""
    h = hashlib.sha256()
    g = onnx.GraphProto()
    g.CopyFrom(proto.graph)
    del g.initializer[:]
    h.update(g.SerializeToString(deterministic=True))
    for init in proto.graph.initializer:
        h.update(init.name.encode())
        h.update(numpy_helper.to_array(init).tobytes())
    for op in proto.opset_import:
        h.update(f"{op.domain}:{op.version}".encode())
    return h.hexdigest()


def declared_dim(dim: onnx.TensorShapeProto.Dimension) -> int | None:
    """A declared dimension's size, None where it is dynamic: a symbolic `dim_param`, no value, or a value
    of 0 or below (exporters write -1 for "any"; polygraphy's outputs file then holds the size that ran)."""
    return dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else None


def declared_dims(shape: onnx.TensorShapeProto) -> tuple[int | None, ...]:
    """Every dimension of a declared shape, None for the dynamic ones (`declared_dim`)."""
    return tuple(declared_dim(d) for d in shape.dim)


def set_input_shapes(proto: onnx.ModelProto, shapes: dict[str, list[int]]) -> None:
    """Fix the dims of graph inputs (dynamic dimensions) in place."""
    by_name = {i.name: i for i in proto.graph.input}
    for name, dims in shapes.items():
        if name not in by_name:
            raise SpecError("inputs.input_shapes", f"{{inputs.input_shapes}} names '{name}', which is not a model input")
        shape = by_name[name].type.tensor_type.shape
        given = f"{name}:[{','.join(str(int(d)) for d in dims)}]"
        if len(shape.dim) and len(shape.dim) != len(dims):
            raise SpecError("inputs.input_shapes",
                            f"{{inputs.input_shapes}} {given}: model input '{name}' has rank {len(shape.dim)}, got {len(dims)}")
        fixed = list(declared_dims(shape))
        clash = [i for i, (f, d) in enumerate(zip(fixed, dims)) if f is not None and f != int(d)]
        if clash:
            shown = "[" + ", ".join("?" if f is None else str(f) for f in fixed) + "]"
            raise SpecError(
                "inputs.input_shapes",
                f"{{inputs.input_shapes}} {given}: dimension {clash[0]} of input '{name}' is fixed to {fixed[clash[0]]} by the "
                f"model ({shown}); only dynamic dimensions can be set"
            )
        del shape.dim[:]
        for d in dims:
            shape.dim.add().dim_value = int(d)


def _copied(vi: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    """`vi` on its own: a part of a message keeps the whole of it alive (the inferred graph with its weights)."""
    out = onnx.ValueInfoProto()
    out.CopyFrom(vi)
    return out


def infer_shapes(proto: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference with data propagation; the input on failure (custom ops, huge models)."""
    try:
        if over_protobuf_limit(proto):
            return _infer_shapes_large(proto)
        return onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:
        return proto


def _infer_shapes_large(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Shape inference without weights (initializers as typed graph inputs): models over 2 GB cannot be serialized
    whole."""
    light = weightless(proto)
    light.graph.value_info.extend(proto.graph.value_info)
    return onnx.shape_inference.infer_shapes(light, data_prop=True)


def tensor_types_and_shapes(proto: onnx.ModelProto) -> tuple[dict[str, int], dict[str, tuple]]:
    """Element type and shape (None for unknown dims) of every typed tensor in the main graph."""
    types: dict[str, int] = {}
    shapes: dict[str, tuple] = {}
    g = proto.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if tt.elem_type:
            types[vi.name] = tt.elem_type
            if tt.HasField("shape"):
                shapes[vi.name] = declared_dims(tt.shape)
    for init in g.initializer:
        types[init.name] = init.data_type
        shapes[init.name] = tuple(init.dims)
    for node in g.node:
        if node.op_type == "Constant" and node.output:
            for a in node.attribute:
                if a.name == "value":
                    types[node.output[0]] = a.t.data_type
                    shapes[node.output[0]] = tuple(a.t.dims)
                elif a.name in ("value_float", "value_floats"):
                    types[node.output[0]] = TensorProto.FLOAT
    return types, shapes


def implicit_inputs(node: onnx.NodeProto) -> set[str]:
    """Outer-scope tensors that a node's subgraphs read (If/Loop/Scan)."""
    found: set[str] = set()
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for sub in graphs:
            found |= _free_names(sub)
    return found


def _free_names(graph: onnx.GraphProto) -> set[str]:
    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    free: set[str] = set()
    for node in graph.node:
        for t in list(node.input) + sorted(implicit_inputs(node)):
            if t and t not in defined:
                free.add(t)
        defined.update(node.output)
    return free


def _numel(shape: Iterable | None) -> int | None:
    """The element count; None when a dimension is unknown: dynamic, or negative (PaddlePaddle's exports
    declare -1, which multiplied into negative FLOPs)."""
    if shape is None:
        return None
    n = 1
    for d in shape:
        if d is None or int(d) < 0:
            return None
        n *= int(d)
    return n


def estimate_flops(node: onnx.NodeProto, shapes: dict[str, tuple], proto: onnx.ModelProto) -> int:
    """Multiply-accumulate count x2 for Conv, ConvTranspose, MatMul, Gemm and attention; else the
    output element count (one op per element) where the shape is known, else 0. With a model's declared
    shapes a dynamic dimension makes it 0: `graph/cost.py` calls it with the shapes that ran."""
    out = shapes.get(node.output[0]) if node.output else None
    out_n = _numel(out)
    op = node.op_type
    try:
        if op in ("Conv", "ConvTranspose"):
            w = shapes.get(node.input[1])
            if out_n is None or w is None or _numel(w) is None:
                return 0
            if op == "Conv":  # W: [M, C/g, k...]
                per_out = int(np.prod(w[1:]))
                return 2 * out_n * per_out
            in_n = _numel(shapes.get(node.input[0]))  # W: [C, M/g, k...]
            return 2 * in_n * int(np.prod(w[1:])) if in_n else 0
        if op in ("MatMul", "Gemm", "MatMulInteger", "FusedMatMul"):
            a = shapes.get(node.input[0])
            if out_n is None or not a or a[-1] is None:
                return 0
            trans_a = next((a_.i for a_ in node.attribute if a_.name == "transA"), 0)
            k = a[-2] if (op == "Gemm" and trans_a) else a[-1]
            return 2 * out_n * int(k) if k is not None and k > 0 else 0
        if op in ("Attention", "MultiHeadAttention", "GroupQueryAttention"):
            q = shapes.get(node.input[0])
            if not q or _numel(q) is None or len(q) < 3:
                return 0
            b, s, h = q[0], q[1], q[-1]
            return 4 * int(b) * int(s) * int(s) * int(h)
    except (TypeError, ValueError, IndexError):
        return 0
    return int(out_n or 0)


def _types_from_ort(proto: onnx.ModelProto, names: list[str]) -> dict[str, int]:
    """Element types that shape inference could not give (custom ops), as ONNX Runtime sees them."""
    from precision_doctor.graph.ort_session import ORT_TYPES, make_session, with_outputs

    try:
        sess = make_session(with_outputs(proto, names, {}), optimize=False)
    except Exception:
        return {}
    return {o.name: ORT_TYPES[o.type] for o in sess.get_outputs() if o.type in ORT_TYPES}
