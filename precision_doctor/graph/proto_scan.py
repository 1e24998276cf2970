"""What the service reads of a model at submission, from the protobuf wire format, nothing else parsed: the graph's
input and initializer names, and the external data files its tensors name. A model may hold up to 2 GB of inline
weights, and `onnx.load` parses every tensor (the file's size and more in memory, seconds of CPU) in the daemon, for
each submission. Here the file is mapped and its fields walked by their keys and lengths (protobuf's encoding:
https://protobuf.dev/programming-guides/encoding/), the tensors' data skipped unread.

Field numbers, from onnx.proto3 (`_F`). A message field that occurs twice is merged by protobuf (repeated fields
appended, the last of a singular scalar kept): so here.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path

MODEL_GRAPH, GRAPH_INITIALIZER, GRAPH_INPUT, VALUE_INFO_NAME, TENSOR_NAME = 7, 5, 11, 1, 8
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class _F:
    """The other field numbers the external-data walk reads (onnx.proto3)."""

    MODEL_FUNCTIONS, FUNCTION_NODE = 25, 7
    GRAPH_NODE, NODE_ATTRIBUTE = 1, 5
    ATTR_T, ATTR_G, ATTR_TENSORS, ATTR_GRAPHS, ATTR_TYPE = 5, 6, 10, 11, 20
    TYPE_GRAPH, TYPE_GRAPHS = 5, 10  # AttributeProto.AttributeType
    TENSOR_EXTERNAL_DATA, TENSOR_DATA_LOCATION, EXTERNAL = 13, 14, 1
    ENTRY_KEY, ENTRY_VALUE = 1, 2


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


def external_locations(path: Path) -> list[str]:
    """The `location`s of the external data files the model at `path` names, sorted: its tensors stored externally
    (`data_location` EXTERNAL) among the initializers of its graph and subgraphs and the tensors of its nodes'
    attributes (functions' too), as `onnx.external_data_helper` finds them (Malformed, OSError as `graph_names`)."""
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            return []
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)
            try:
                found: set[str] = set()
                for field, s, e in _fields(view, 0, len(view)):
                    if field == MODEL_GRAPH and e >= 0:
                        _graph_tensors(view, s, e, _F.GRAPH_NODE, True, found)
                    elif field == _F.MODEL_FUNCTIONS and e >= 0:
                        _graph_tensors(view, s, e, _F.FUNCTION_NODE, False, found)
                return sorted(found)
            finally:
                view.release()


def _graph_tensors(buf: memoryview, start: int, end: int, node_field: int, initializers: bool, found: set[str]) -> None:
    """The external locations of a graph's (or function's) initializers and its nodes' attribute tensors, subgraphs
    included, into `found`."""
    for field, s, e in _fields(buf, start, end):
        if e < 0:
            continue
        if initializers and field == GRAPH_INITIALIZER:
            _tensor_location(buf, s, e, found)
        elif field == node_field:
            for f, ns, ne in _fields(buf, s, e):
                if f == _F.NODE_ATTRIBUTE and ne >= 0:
                    _attribute_tensors(buf, ns, ne, found)


def _attribute_tensors(buf: memoryview, start: int, end: int, found: set[str]) -> None:
    kind, tensors, graphs = 0, [], []
    for field, s, e in _fields(buf, start, end):
        if field == _F.ATTR_TYPE and e < 0:
            kind = s
        elif field in (_F.ATTR_T, _F.ATTR_TENSORS) and e >= 0:
            tensors.append((s, e))
        elif field in (_F.ATTR_G, _F.ATTR_GRAPHS) and e >= 0:
            graphs.append((field, s, e))
    for s, e in tensors:
        _tensor_location(buf, s, e, found)
    for field, s, e in graphs:  # as onnx.external_data_helper: a subgraph counts by the attribute's type
        if (field, kind) in ((_F.ATTR_G, _F.TYPE_GRAPH), (_F.ATTR_GRAPHS, _F.TYPE_GRAPHS)):
            _graph_tensors(buf, s, e, _F.GRAPH_NODE, True, found)


def _tensor_location(buf: memoryview, start: int, end: int, found: set[str]) -> None:
    location, external = None, False
    for field, s, e in _fields(buf, start, end):
        if field == _F.TENSOR_DATA_LOCATION and e < 0:
            external = s == _F.EXTERNAL
        elif field == _F.TENSOR_EXTERNAL_DATA and e >= 0:
            entry = {f: bytes(buf[es:ee]).decode("utf-8", errors="replace") for f, es, ee in _fields(buf, s, e) if ee >= 0}
            if entry.get(_F.ENTRY_KEY, "") == "location":
                location = entry.get(_F.ENTRY_VALUE, "")
    if external and location is not None:
        found.add(location)


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
    bytes; for a varint (its value, -1); for a fixed-size one (-1, -1), skipped."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise Malformed(f"field number 0 at byte {pos}")
        if wire == _VARINT:
            value, pos = _varint(buf, pos, end)
            yield number, value, -1
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
