"""What the emulation rules cover: the low-precision nodes whose behaviour on ONNX Runtime's CUDA
provider the emulator does not model, for the report (`emulation_notes`).

- `cpu-placement`: ops ONNX Runtime runs on the CPU, in FP32 between Casts, because its CUDA provider
  has no FP16 kernel for them (measured: Clip of opsets 6-11, ppocr-mobile-cls in GPU session A). The
  emulator rounds them as FP16 nodes; the real graph computes them in FP32 (on FP16-rounded inputs, so
  for exact ops such as Clip nothing differs).
- `unmeasured-op`: op types never measured node by node on a GPU (bench/gpu_nodewise.py), other than
  ops that only move or select values (exact under any rounding).
- `unmeasured-format`: BF16 was never measured on a GPU; the rules are FP16 measurements.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import onnx

if TYPE_CHECKING:
    from precision_doctor.graph.formats import Format
    from precision_doctor.graph.model import Model


@dataclass
class EmulationNote:
    """Low-precision nodes whose behaviour on the target the emulator does not model, grouped by op type
    (`kind`: cpu-placement, unmeasured-op, unmeasured-format; see the module docstring): how many, the
    first few names, and why in words. A piece of report.json (`emulation_notes`)."""

    kind: str
    op_type: str
    count: int
    nodes: list[str] = field(default_factory=list)
    detail: str = ""


# Op types whose FP16 nodes were measured one by one on an H100 (onnxruntime-gpu 1.31.1, GPU session A,
# docs/BENCHMARKS.md), each reproduced by the standard rule or an ort-cuda rule; and the fused patterns'
# ops, measured in whole models.
MEASURED_OPS = frozenset({
    "Add", "BatchNormalization", "Cast", "Clip", "Concat", "ConstantOfShape", "Conv", "ConvTranspose", "Div", "Exp",
    "Expand", "GlobalAveragePool", "HardSigmoid", "Identity", "MatMul", "MaxPool", "Mul", "Pad", "Pow", "ReduceMean",
    "ReduceSum", "Relu", "Reshape", "Resize", "Sigmoid", "Slice", "Softmax", "Split", "Sqrt", "Sub", "Tanh",
    "Transpose", "Unsqueeze",
})  # fmt: skip
# (op type, its versions) that ONNX Runtime's CUDA provider runs only in FP32: placed on the CPU.
CPU_PLACED = {("Clip", 6): "Clip-6", ("Clip", 11): "Clip-11"}
_SHOWN = 5


def _since(model: Model, node: onnx.NodeProto) -> int | None:
    opset = next((o.version for o in model.proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    try:
        return onnx.defs.get_schema(node.op_type, opset, node.domain or "").since_version
    except onnx.defs.SchemaError:
        return None


def emulation_notes(model: Model, fmt: Format, lowp: Iterable[str]) -> list[EmulationNote]:
    """Notes for the nodes named in `lowp` (those that compute in low precision), grouped by op type."""
    from precision_doctor.graph.emulate import is_exact

    lowp = set(lowp)
    groups: dict[tuple[str, str], list[str]] = {}
    for info in model.nodes:
        if info.name not in lowp:
            continue
        node = model.proto.graph.node[info.index]
        if (node.op_type, _since(model, node)) in CPU_PLACED:
            groups.setdefault(("cpu-placement", node.op_type), []).append(info.name)
        elif node.op_type not in MEASURED_OPS and not is_exact(node):
            groups.setdefault(("unmeasured-op", node.op_type), []).append(info.name)
    notes = []
    for (kind, op), names in groups.items():
        if kind == "cpu-placement":
            detail = (f"ONNX Runtime's CUDA provider has no FP16 kernel for {op} at this opset: it runs on the CPU in FP32 "
                      "between Casts, where the emulator rounds it as an FP16 node")
        else:
            detail = f"{op} in {fmt.name.upper()} was never measured on a GPU: its rule is the standard one, unconfirmed"
        notes.append(EmulationNote(kind, op, len(names), names[:_SHOWN], detail))
    if fmt.name == "bf16" and lowp:
        notes.append(EmulationNote("unmeasured-format", "", len(lowp), [], "BF16 was never measured on a GPU: the "
                                   "emulation rules are FP16 measurements applied to BF16"))
    return notes
