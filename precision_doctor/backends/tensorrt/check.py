"""`trt_check`: does a real TensorRT parser give every layer of `fixed.onnx` the precision the answer says?

`fixed.onnx` is parsed into a strongly typed network (TensorRT-RTX parses and types a network
without a GPU, so this runs in CI). Every layer is mapped to its ONNX node through the parser's
metadata (`[ONNX Layer: <node>]`; `node_of_<first output>` for an unnamed node); then, per node:

* fallback nodes and nodes fixed.onnx keeps FP32 anyway (`forced`) must compute in FLOAT,
* every other candidate in the low type (HALF for fp16, BF16 for bf16).

A node "computes in" the type of its layers' floating outputs. Layers are left out of the check when
they cannot say anything about compute precision: layers of nodes that are not candidates (our
border Casts, shape arithmetic, control flow), CONSTANT and SHAPE layers, layers without floating
outputs (comparisons, integer gathers), and CAST layers the parser inserts inside another op's
layers (a node that is itself a Cast is checked by its output). Candidates that no layer comes from
(folded into constants, or shape-only) are listed as `unmapped`, not as mismatches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from precision_doctor.backends.tensorrt.build import LayerInfo, parse_onnx
from precision_doctor.backends.tensorrt.layers import resolve_nodes, tensorrt_names
from precision_doctor.backends.tensorrt.library import TrtLibrary, load_library
from precision_doctor.errors import UserError
from precision_doctor.words import counted

FLOATING = ("FLOAT", "HALF", "BF16")
LOW_TYPES = {"fp16": "HALF", "bf16": "BF16"}
_NOT_COMPUTE = ("CONSTANT", "SHAPE")

FALLBACK, FORCED, LOW = "fallback", "forced FP32", "low precision"


@dataclass(frozen=True)
class LayerMismatch:
    """A layer whose floating outputs are not of the type its node's role asks for."""

    node: str
    layer: str
    layer_type: str
    role: str  # FALLBACK, FORCED or LOW
    expected: str
    found: tuple[str, ...]

    def describe(self) -> str:
        found = "/".join(self.found)
        return f"{self.node} ({self.role}): layer '{self.layer}' [{self.layer_type}] computes {found}, not {self.expected}"


@dataclass(frozen=True)
class TrtCheck:
    """The result of `trt_check`. `passed` when no layer disagrees with the answer."""

    library: str
    version: str
    onnx_path: str
    precision: str
    layers: int  # layers of the parsed network
    checked_layers: int
    checked_nodes: int
    mismatches: tuple[LayerMismatch, ...]
    unmapped: tuple[str, ...]  # candidates no layer comes from
    forced: dict[str, str] = field(default_factory=dict)  # node -> why fixed.onnx keeps it FP32

    @property
    def passed(self) -> bool:
        return not self.mismatches

    def summary(self) -> str:
        disagree = f"{counted(len(self.mismatches), 'layer')} disagree{'s' if len(self.mismatches) == 1 else ''}"
        verdict = "every checked layer matches the answer" if self.passed else disagree
        return (
            f"{self.library} {self.version}: {self.layers} layers from {Path(self.onnx_path).name}, "
            f"{self.checked_layers} checked over {self.checked_nodes} nodes: {verdict}"
        )

    def to_dict(self) -> dict:
        return {
            "library": self.library, "version": self.version, "onnx": self.onnx_path, "precision": self.precision,
            "layers": self.layers, "checked_layers": self.checked_layers, "checked_nodes": self.checked_nodes,
            "passed": self.passed,
            "mismatches": [
                {"node": m.node, "layer": m.layer, "layer_type": m.layer_type, "role": m.role, "expected": m.expected,
                 "found": list(m.found)}
                for m in self.mismatches
            ],
            "unmapped": list(self.unmapped), "forced": dict(self.forced),
        }


def _our_names(graph: onnx.GraphProto) -> list[str]:
    """The names precision-doctor gives the nodes of `graph` (its `name_nodes` rule, on a copy)."""
    from precision_doctor.graph.model import name_nodes

    copy = onnx.GraphProto()
    copy.node.extend(graph.node)
    name_nodes(copy)
    return [n.name for n in copy.node]


def _checked_types(layer: LayerInfo, op_type: str) -> tuple[str, ...]:
    """The floating output types that speak for a layer's compute precision (empty: not checked)."""
    if layer.type in _NOT_COMPUTE or (layer.type == "CAST" and op_type != "Cast"):
        return ()
    return tuple(t for t in layer.output_types if t in FLOATING)


def trt_check(
    fixed_onnx: str | Path,
    fallback: Iterable[str],
    candidates: Iterable[str],
    precision: str = "fp16",
    *,
    forced: Mapping[str, str] | None = None,
    lib: TrtLibrary | None = None,
) -> TrtCheck:
    """Parse `fixed_onnx` strongly typed and check each layer's precision against the answer.

    `fallback`: the answer's FP32 nodes; `candidates`: every node whose precision the search chose
    (the model's candidates; names as in the report, which fixed.onnx keeps); `forced`: nodes
    fixed.onnx keeps FP32 beyond the answer, with why (`graph.mixed.forced_fp32_nodes`).
    """
    if precision not in LOW_TYPES:
        raise UserError(f"precision must be one of {', '.join(LOW_TYPES)}, got '{precision}'")
    lib = lib or load_library()
    path = Path(fixed_onnx)
    graph = onnx.load(str(path), load_external_data=False).graph
    ours = _our_names(graph)
    names = tensorrt_names(graph, ours)
    op_of = dict(zip(ours, (n.op_type for n in graph.node)))
    fallback, forced = set(fallback), dict(forced or {})
    candidates = list(dict.fromkeys(candidates))
    unknown = sorted((fallback | set(forced)) - set(candidates))
    if unknown:
        raise UserError(f"fallback/forced node(s) not among the candidates: {', '.join(unknown[:5])}")
    role = {n: FALLBACK if n in fallback else FORCED if n in forced else LOW for n in candidates}

    parsed = parse_onnx(lib, path, strongly_typed=True)
    layers = parsed.layers()
    mismatches: list[LayerMismatch] = []
    covered: set[str] = set()
    checked_layers = 0
    checked_nodes: set[str] = set()
    for layer in layers:
        nodes = [n for n in resolve_nodes(layer.name, layer.metadata, names) if n in role]
        covered.update(nodes)
        if not nodes:
            continue
        node = nodes[0]
        types = _checked_types(layer, op_of.get(node, ""))
        if not types:
            continue
        checked_layers += 1
        checked_nodes.add(node)
        want = "FLOAT" if role[node] in (FALLBACK, FORCED) else LOW_TYPES[precision]
        if any(t != want for t in types):
            mismatches.append(LayerMismatch(node, layer.name, layer.type, role[node], want, types))
    return TrtCheck(
        library=lib.family, version=lib.version, onnx_path=str(path), precision=precision, layers=len(layers),
        checked_layers=checked_layers, checked_nodes=len(checked_nodes), mismatches=tuple(mismatches),
        unmapped=tuple(n for n in candidates if n not in covered), forced=forced,
    )
