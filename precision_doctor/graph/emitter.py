"""What a node rule (`graph.rules`) or a fusion rule (`graph.fusions`) writes its arithmetic with: the `Emitter`
protocol, which the emulator's graph builders implement (`graph.emulate`), and the small emission helpers
both kinds of rule use. Rules see only this, not the builder, so `graph.emulate` imports the rules and
nothing imports it back."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import onnx
from onnx import helper

from precision_doctor.graph.formats import Format
from precision_doctor.graph.model import Model


class Emitter(Protocol):
    """A graph being built: rules append nodes to `nodes`, name new tensors and nodes with `uid`, add
    initializers with `const` and round a tensor to the format with `cast_pair`."""

    model: Model
    fmt: Format
    nodes: list[onnx.NodeProto]
    conv_rounds_before_bias: bool  # the Conv rule in force rounds the convolution before adding the bias

    def uid(self, base: str) -> str:
        """A new name, unique in the graph, starting with `base`."""
        ...

    def const(self, base: str, value: np.ndarray) -> str:
        """A new initializer holding `value`; returns its name."""
        ...

    def cast_pair(self, src: str, dst: str, elem: int) -> None:
        """dst = src cast to the format and back to the ONNX element type `elem`."""
        ...


def emit_op(b: Emitter, op: str, inputs: list[str], base: str, **attrs) -> str:
    """A new node `op` on `inputs`; returns the name of its (one) output."""
    out = b.uid(base)
    b.nodes.append(helper.make_node(op, inputs, [out], name=b.uid(op.lower()), **attrs))
    return out


def emit_rounded(b: Emitter, src: str, like: str) -> str:
    """A new tensor: `src` rounded to the format, with the element type of tensor `like`."""
    dst = b.uid(like + "_rt")
    b.cast_pair(src, dst, b.model.tensor_types[like])
    return dst


def emit_scalar(b: Emitter, base: str, value: float, like: str) -> str:
    """A scalar constant of the element type of tensor `like`."""
    return b.const(base, np.array(value, dtype=helper.tensor_dtype_to_np_dtype(b.model.tensor_types[like])))
