"""A model's graph input and initializer names read from the protobuf wire format, nothing else parsed: what a check
at submission needs of a model of up to 2 GB of inline weights, without holding them (`onnx.load` parses every
tensor: the file's size and more in memory, seconds of CPU). The file is mapped, its fields walked by their keys and
lengths (protobuf's encoding: https://protobuf.dev/programming-guides/encoding/), the tensors' data skipped unread.

Field numbers, from onnx.proto3: ModelProto.graph = 7; GraphProto.initializer = 5, .input = 11; ValueInfoProto.name = 1;
TensorProto.name = 8. A message field that occurs twice is merged by protobuf (repeated fields appended): so here.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path

MODEL_GRAPH, GRAPH_INITIALIZER, GRAPH_INPUT, VALUE_INFO_NAME, TENSOR_NAME = 7, 5, 11, 1, 8
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class Malformed(ValueError):
    """The bytes are not a protobuf message (what `onnx.load` would fail on too)."""


@dataclass(frozen=True)
class GraphNames:
    """What the scan found: whether the model has a graph, its inputs and its initializers' names, in order."""

    has_graph: bool
    inputs: list[str]
    initializers: list[str]


def graph_names(path: Path) -> GraphNames:
    """The graph input and initializer names of the ONNX model at `path` (Malformed: its bytes are no protobuf
    message; OSError: it cannot be read)."""
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            return GraphNames(False, [], [])
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)
            try:
                return _model(view)
            finally:
                view.release()


def _model(buf: memoryview) -> GraphNames:
    inputs: list[str] = []
    inits: list[str] = []
    graphs = 0
    for field, start, end in _fields(buf, 0, len(buf)):
        if field == MODEL_GRAPH and end >= 0:
            graphs += 1
            for f, s, e in _fields(buf, start, end):
                if f == GRAPH_INPUT and e >= 0:
                    inputs.append(_name(buf, s, e, VALUE_INFO_NAME))
                elif f == GRAPH_INITIALIZER and e >= 0:
                    inits.append(_name(buf, s, e, TENSOR_NAME))
    return GraphNames(graphs > 0, inputs, inits)


def _name(buf: memoryview, start: int, end: int, number: int) -> str:
    """The last string field `number` of the message in buf[start:end] (protobuf keeps the last of a singular one)."""
    name = ""
    for field, s, e in _fields(buf, start, end):
        if field == number and e >= 0:
            name = bytes(buf[s:e]).decode("utf-8", errors="replace")
    return name


def _fields(buf: memoryview, pos: int, end: int):
    """(field number, start, end) of each field of the message in buf[pos:end]: for a length-delimited field its
    bytes; for the others (-1, -1), skipped."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise Malformed(f"field number 0 at byte {pos}")
        if wire == _VARINT:
            _, pos = _varint(buf, pos, end)
            yield number, -1, -1
        elif wire == _LEN:
            size, pos = _varint(buf, pos, end)
            if size > end - pos:
                raise Malformed(f"a field of {size} bytes at byte {pos} runs past its message's end")
            yield number, pos, pos + size
            pos += size
        elif wire in (_I64, _I32):
            pos += 8 if wire == _I64 else 4
            if pos > end:
                raise Malformed(f"a fixed-size field runs past its message's end at byte {end}")
            yield number, -1, -1
        else:
            raise Malformed(f"wire type {wire} at byte {pos}")


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= end or shift > 63:
            raise Malformed(f"a varint cut short at byte {pos}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
