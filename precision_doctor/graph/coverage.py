"""What the emulation rules cover: the low-precision nodes whose behaviour on ONNX Runtime's CUDA
provider the emulator does not model, for the report (`emulation_notes`) and the verdict (a PASS that rests
on them says so and names them in `certified_by.unconfirmed`).

- `cpu-placement`: ops ONNX Runtime runs on the CPU, in FP32 between Casts, because its CUDA provider
  has no FP16 kernel for them (measured: Clip of opsets 6-11, ppocr-mobile-cls on an H100). The
  emulator rounds them as FP16 nodes; the real graph computes them in FP32 (on FP16-rounded inputs, so
  for exact ops such as Clip nothing differs).
- `unmeasured-op`: op types never measured node by node on a GPU (`MEASURED`), other than ops that only
  move or select values (exact under any rounding).
- `measured-mismatch`: op types measured on a GPU whose error there exceeds the emulator's by more than
  10% on some node (`Measured.factor`): the emulator underestimates them (cuDNN's half-math RNNs).
- `unmeasured-pattern`: node pairs ONNX Runtime's CUDA graph optimizer fuses that were never measured
  (`FUSED_PAIRS` without a measurement): the fused kernel may round differently from the two nodes. A pair
  measured to err more than the emulator (ConvTranspose + BatchNormalization, folded) is a `measured-mismatch`, as
  is MatMul + bias Add + Gelu (`BIAS_GELU`), which ORT runs as Gemm + Gelu.
- `unmeasured-format`: BF16 was never measured on a GPU; the rules are FP16 measurements.

Every kind but `cpu-placement` leaves the emulator's verdict unconfirmed (`UNCONFIRMED`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import onnx

from precision_doctor.outcome import _Value

if TYPE_CHECKING:
    from precision_doctor.graph.formats import Format
    from precision_doctor.graph.fusions import _Graph
    from precision_doctor.graph.model import Model


class NoteKind(_Value):
    """An EmulationNote's `kind` (see the module docstring)."""

    CPU_PLACEMENT = "cpu-placement"
    UNMEASURED_OP = "unmeasured-op"
    MEASURED_MISMATCH = "measured-mismatch"
    UNMEASURED_PATTERN = "unmeasured-pattern"
    UNMEASURED_FORMAT = "unmeasured-format"


# What leaves an emulator's PASS unconfirmed: the GPU may compute these nodes otherwise than the emulator does.
UNCONFIRMED = frozenset({NoteKind.UNMEASURED_OP, NoteKind.MEASURED_MISMATCH, NoteKind.UNMEASURED_PATTERN,
                         NoteKind.UNMEASURED_FORMAT})


@dataclass
class EmulationNote:
    """Low-precision nodes whose behaviour on the target the emulator does not model, grouped by op type
    (`kind`: a NoteKind's value; see the module docstring): how many, the first few names, why in words, and
    for a measured mismatch how many times the emulator's error the GPU's reached (`factor`). A piece of
    report.json (`emulation_notes`)."""

    kind: str
    op_type: str
    count: int
    nodes: list[str] = field(default_factory=list)
    detail: str = ""
    factor: float | None = None

    @property
    def unconfirmed(self) -> bool:
        return self.kind in UNCONFIRMED


@dataclass(frozen=True)
class Measured:
    """Where an op type's FP16 nodes were measured one by one on ONNX Runtime's CUDA provider (onnxruntime-gpu
    1.31.1, TF32 off; docs/BENCHMARKS.md), and the largest ratio of the GPU's error to the emulator's under the
    `ort-cuda` rules over the nodes measured (1: reproduced)."""

    where: str
    factor: float = 1.0


# Where and on what the op types were measured node by node (docs/BENCHMARKS.md).
H100_ZOO = "an H100, on the zoo's models and the planted suite"
H200_PROBES = "an H200, on bench/probe_models.py's probe models"
H100_FUSIONS = "an H100, on bench/gpu_fusion_checks.py's fusion patterns"
H100_AND_H200 = f"{H100_ZOO}; {H200_PROBES}"
MISMATCH = 1.1  # above this factor an op type is a measured mismatch (probe-ops' threshold)

# Op types whose FP16 nodes were measured one by one, each reproduced by the standard rule or an ort-cuda rule
# (bit for bit on 99% of the elements, node fixtures replayed in tests/graph/test_gpu_rules.py), or not (factor).
MEASURED: dict[str, Measured] = {
    **{op: Measured(H100_ZOO) for op in (
        "BatchNormalization", "Cast", "Concat", "ConstantOfShape", "MaxPool", "Pad", "Split", "Unsqueeze")},
    **{op: Measured(H100_AND_H200) for op in (
        "Add", "Clip", "Conv", "ConvTranspose", "Div", "Exp", "Expand", "GlobalAveragePool", "HardSigmoid", "Identity",
        "MatMul", "Mul", "Pow", "ReduceMean", "ReduceSum", "Relu", "Reshape", "Resize", "Sigmoid", "Slice", "Softmax",
        "Sqrt", "Sub", "Tanh", "Transpose")},
    **{op: Measured(H200_PROBES) for op in (
        "Abs", "Einsum", "Erf", "Gelu", "GlobalMaxPool", "HardSwish", "InstanceNormalization", "LayerNormalization",
        "Reciprocal", "ReduceMax", "Squeeze")},
    "LSTM": Measured(H200_PROBES, 1.64),  # cuDNN's half-math RNN: no rule reproduced it (docs/BENCHMARKS.md)
    "GRU": Measured(H200_PROBES, 6.47),
}  # fmt: skip
MEASURED_OPS = frozenset(op for op, m in MEASURED.items() if m.factor <= MISMATCH)
# (producer, consumer) op pairs that ONNX Runtime's CUDA graph optimizer may fuse into one kernel: the fusion, and
# where it was measured (None: never). ConvTranspose + BatchNormalization: folded into the ConvTranspose on the H100
# (ConvBNFusion), 41% of the elements bit-exact, the GPU's error 1.8-2.0x the emulator's (the emulator rounds the
# two nodes); Add + LayerNormalization (SkipLayerNormFusion; also a decomposed LayerNorm after an Add, which
# LayerNormFusion makes one first): ORT made the residual Add part of a Gemm there, so SkipLayerNorm stays unmeasured.
FUSED_PAIRS: dict[tuple[str, str], tuple[str, Measured | None]] = {
    ("ConvTranspose", "BatchNormalization"): ("ConvBNFusion", Measured(H100_FUSIONS, 2.0)),
    ("Add", "LayerNormalization"): ("SkipLayerNormFusion", None),
}
# MatMul, an Add of a constant bias, then Gelu (the op, or its Erf form that GeluFusion makes one): on the H100 ORT
# ran Gemm + Gelu, whose error reached 1.37x the emulator's three nodes (bench/gpu_fusion_checks.py, `bias-gelu`).
BIAS_GELU = "MatMul + Add + Gelu"
BIAS_GELU_MEASURED = Measured(H100_FUSIONS, 1.37)
# (op type, its versions) that ONNX Runtime's CUDA provider runs only in FP32: placed on the CPU.
CPU_PLACED = {("Clip", 6): "Clip-6", ("Clip", 11): "Clip-11"}
_SHOWN = 5


def _since(model: Model, node: onnx.NodeProto) -> int | None:
    opset = next((o.version for o in model.proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    try:
        return onnx.defs.get_schema(node.op_type, opset, node.domain or "").since_version
    except onnx.defs.SchemaError:
        return None


def _pairs(g: _Graph, lowp: set[str]) -> dict[str, list[str]]:
    """Pattern name ("Add + LayerNormalization") -> the consumers of FUSED_PAIRS whose producer's output only
    they read, both low precision; a decomposed LayerNorm (a layernorm-fusion site) counts as LayerNormalization."""
    from precision_doctor.graph.fusions import FUSIONS

    heads = {}  # node name -> (op type it becomes, the tensor it normalizes)
    for site in FUSIONS["layernorm-fusion"].sites(g):
        if {site.anchor, *site.data.core} <= lowp:
            heads[site.data.core[0]] = ("LayerNormalization", site.anchor)
    out: dict[str, list[str]] = {}
    for name, (node, _) in g.nodes.items():
        op, shown = heads.get(name, (node.op_type, name))
        if name not in lowp or not node.input:
            continue
        found = g.node_of(node.input[0])
        if found is None or found[0].name not in lowp or (found[0].op_type, op) not in FUSED_PAIRS:
            continue
        t = node.input[0]
        readers = set(g.readers.get(t, []))
        if name in heads:  # the decomposed LayerNorm reads x in its ReduceMean and Sub
            readers -= {name, *(n for n in readers if g.nodes[n][0].op_type == "Sub")}
        else:
            readers -= {name}
        if not readers and t not in g.outputs:
            out.setdefault(f"{found[0].op_type} + {op}", []).append(shown)
    return out


def emulation_notes(model: Model, fmt: Format, lowp: Iterable[str]) -> list[EmulationNote]:
    """Notes for the nodes named in `lowp` (those that compute in low precision), grouped by op type."""
    from precision_doctor.graph.emulate import is_exact
    from precision_doctor.graph.fusions import _Graph

    lowp = set(lowp)
    groups: dict[tuple[NoteKind, str], list[str]] = {}
    for info in model.nodes:
        if info.name not in lowp:
            continue
        node = model.proto.graph.node[info.index]
        if (node.op_type, _since(model, node)) in CPU_PLACED:
            groups.setdefault((NoteKind.CPU_PLACEMENT, node.op_type), []).append(info.name)
        elif node.op_type in MEASURED and node.op_type not in MEASURED_OPS:
            groups.setdefault((NoteKind.MEASURED_MISMATCH, node.op_type), []).append(info.name)
        elif node.op_type not in MEASURED and not is_exact(node):
            groups.setdefault((NoteKind.UNMEASURED_OP, node.op_type), []).append(info.name)
    measured_as = dict(MEASURED)  # op type or pattern -> where it was measured
    g = _Graph(model, fmt)  # the patterns' graph, built once
    if names := _bias_gelus(g, lowp):
        groups[(NoteKind.MEASURED_MISMATCH, BIAS_GELU)] = names
        measured_as[BIAS_GELU] = BIAS_GELU_MEASURED
    for pattern, names in _pairs(g, lowp).items():
        measured = _pair(pattern)[1]
        if measured is None:
            groups[(NoteKind.UNMEASURED_PATTERN, pattern)] = names
        elif measured.factor > MISMATCH:
            groups[(NoteKind.MEASURED_MISMATCH, pattern)] = names
            measured_as[pattern] = measured
    notes = []
    for (kind, op), names in groups.items():
        measured = measured_as.get(op)
        factor = measured.factor if kind == NoteKind.MEASURED_MISMATCH and measured is not None else None
        if kind == NoteKind.CPU_PLACEMENT:
            detail = (f"ONNX Runtime's CUDA provider has no FP16 kernel for {op} at this opset: it runs on the CPU in FP32 "
                      "between Casts, where the emulator rounds it as an FP16 node")
        elif kind == NoteKind.MEASURED_MISMATCH and op == BIAS_GELU:
            detail = (f"ONNX Runtime's CUDA graph optimizer runs {op} as Gemm + Gelu, which in {fmt.name.upper()} errs up "
                      f"to {factor:.3g}x more than the emulator computes for the three nodes (measured: {measured.where}); "
                      "no rule reproduces it")
        elif kind == NoteKind.MEASURED_MISMATCH and " + " in op:
            detail = (f"ONNX Runtime's CUDA graph optimizer fuses {op} into one kernel ({_pair(op)[0]}), which in "
                      f"{fmt.name.upper()} errs up to {factor:.3g}x more than the emulator computes for the two nodes "
                      f"(measured: {measured.where}); no rule reproduces it")
        elif kind == NoteKind.MEASURED_MISMATCH:
            detail = (f"{op} in {fmt.name.upper()} on ONNX Runtime's CUDA provider errs up to {factor:.3g}x more than the "
                      f"emulator computes (measured: {measured.where}); no rule reproduces it")
        elif kind == NoteKind.UNMEASURED_PATTERN:
            fusion = _pair(op)[0]
            detail = (f"ONNX Runtime's CUDA graph optimizer may fuse {op} into one kernel ({fusion}), never measured: "
                      "the emulator computes the two nodes")
        else:
            detail = f"{op} in {fmt.name.upper()} was never measured on a GPU: its rule is the standard one, unconfirmed"
        notes.append(EmulationNote(str(kind), op, len(names), names[:_SHOWN], detail, factor))
    if fmt.name == "bf16" and lowp:
        notes.append(EmulationNote(str(NoteKind.UNMEASURED_FORMAT), "", len(lowp), [], "BF16 was never measured on a "
                                   "GPU: the emulation rules are FP16 measurements applied to BF16"))
    return notes


def _bias_gelus(g: _Graph, lowp: set[str]) -> list[str]:
    """The Gelus (the op, or the anchor of an Erf-form Gelu that GeluFusion makes one) of BIAS_GELU, every node in
    low precision: the Gelu's input is an Add of a constant and a MatMul's output."""
    from precision_doctor.graph.fusions import FUSIONS

    gelus = [(site.anchor, site.reads[0]) for site in FUSIONS["gelu-fusion"].sites(g)
             if {site.anchor, *site.gates} <= lowp and site.reads]
    gelus += [(name, node.input[0]) for name, (node, _) in g.nodes.items()
              if node.op_type == "Gelu" and name in lowp and node.input]
    out = []
    for anchor, x in gelus:
        add = g.node_of(x)
        if add is None or add[0].op_type != "Add" or add[0].name not in lowp or len(add[0].input) != 2:
            continue
        a, b = add[0].input
        matmul = g.node_of(b if g.is_constant(a) else a) if g.is_constant(a) or g.is_constant(b) else None
        if matmul is not None and matmul[0].op_type == "MatMul" and matmul[0].name in lowp:
            out.append(anchor)
    return out


def _pair(pattern: str) -> tuple[str, Measured | None]:
    producer, consumer = pattern.split(" + ")
    return FUSED_PAIRS[(producer, consumer)]


def unconfirmed_parts(notes: Iterable[EmulationNote]) -> list[str]:
    """What of the notes leaves an emulator's PASS unconfirmed, one name each (op type, pattern, or the format)."""
    return [n.op_type or "BF16" for n in notes if n.unconfirmed]
