"""Constants saturate, activations overflow.

When an initializer or a `Constant` is converted for a low-precision consumer, a finite value beyond
the format's largest finite value becomes that value (+-65504 for FP16) instead of +-inf. NaN and
+-inf stay what they are, and values below the smallest subnormal round as the format does (to zero
or the smallest subnormal, round to nearest even). This is what converters do with weights:
onnxconverter-common's `convert_np_to_float16` clips finite values to `max_finite_val` and keeps
NaN and +-inf; TensorRT's builder warns "Finite FP32 values which would overflow in FP16 detected.
Converting to closest finite FP16 value." when it converts FP32 weights (it differs below the range:
"Values less than smallest positive FP16 Subnormal value detected. Converting to FP16 minimum
subnormalized value", where we round). Tensors computed at run time are not constants: they still
overflow to inf.

The emulator (`emulate.py`, rounded copies of constants) and `fixed.onnx` (`mixed.py`, converted
weights and Constant values) both go through `saturate_round`, so they agree bit for bit.
`saturated_constants` lists what was changed, for report.json.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.graph.formats import Format
from precision_doctor.graph.model import Model


def saturate(x: np.ndarray, fmt: Format) -> np.ndarray:
    """Finite values beyond +-fmt.max clipped to +-fmt.max (NaN and +-inf unchanged), dtype kept."""
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        return x
    big = np.isfinite(x) & (np.abs(x) > fmt.max)
    if not big.any():
        return x
    return np.where(big, np.copysign(np.asarray(fmt.max, dtype=x.dtype), x), x).astype(x.dtype)


def to_format(x: np.ndarray, fmt: Format) -> np.ndarray:
    """A constant converted to the format, saturated (the values `fixed.onnx` stores)."""
    with np.errstate(over="ignore"):
        return saturate(x, fmt).astype(fmt.np_dtype)


def saturate_round(x: np.ndarray, fmt: Format) -> np.ndarray:
    """A constant rounded to the format and back, saturated (the values the emulator uses), dtype kept."""
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        return x
    return to_format(x, fmt).astype(x.dtype)


_FLOATING = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)


def float_value(t: onnx.TensorProto) -> np.ndarray | None:
    """A dense tensor's values if they are floating (else None)."""
    return numpy_helper.to_array(t) if t.data_type in _FLOATING else None


def constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    """The value of a `Constant` node whose value is a dense floating tensor (else None)."""
    if node.op_type != "Constant" or not node.attribute:
        return None
    attr = node.attribute[0]
    if attr.name == "value":
        return float_value(attr.t)
    if attr.name == "value_float":
        return np.asarray(attr.f, dtype=np.float32)
    if attr.name == "value_floats":
        return np.asarray(list(attr.floats), dtype=np.float32)
    return None


def constant_tensors(model: Model) -> dict[str, np.ndarray]:
    """Floating constants of the main graph by tensor name: Constant node outputs (initializers are
    read where needed, not here, so that large weights are not all converted at once)."""
    out = {}
    for node in model.proto.graph.node:
        value = constant_value(node)
        if value is not None and node.output and node.output[0]:
            out[node.output[0]] = value
    return out


def saturated_constants(model: Model, fmt: Format, lowp: Iterable[str]) -> list[dict]:
    """Every floating initializer or Constant read by a node in `lowp` (names of low-precision nodes)
    that has finite values beyond the format's range: name, largest |value|, how many elements were
    saturated, and which low-precision nodes read it. In graph order (initializers first)."""
    lowp = set(lowp)
    readers: dict[str, list[str]] = {}
    for info in model.nodes:
        if info.name in lowp:
            for t in dict.fromkeys(info.float_inputs):
                readers.setdefault(t, []).append(info.name)
    found = []
    inits = [(i.name, i) for i in model.proto.graph.initializer if i.name in readers]
    consts = [(name, v) for name, v in constant_tensors(model).items() if name in readers]
    for name, src in inits + consts:
        arr = numpy_helper.to_array(src) if isinstance(src, onnx.TensorProto) else src
        if not np.issubdtype(arr.dtype, np.floating) or arr.dtype == fmt.np_dtype:
            continue
        big = np.isfinite(arr) & (np.abs(arr) > fmt.max)
        n = int(np.count_nonzero(big))
        if n:
            found.append({
                "name": name, "kind": "initializer" if isinstance(src, onnx.TensorProto) else "Constant",
                "max_abs": float(np.max(np.abs(arr[big]))), "saturated": n, "size": int(arr.size),
                "to": float(fmt.max), "read_by": readers[name],
            })
    return found


def lowp_constant_node(name: str, output: str, value: np.ndarray, fmt: Format) -> onnx.NodeProto:
    """A Constant node holding `value` converted (saturated) to the format."""
    return helper.make_node("Constant", [], [output], name=name, value=numpy_helper.from_array(to_format(value, fmt)))
