"""What the service reads of a model at submission, from the protobuf wire format, nothing else parsed: the graph's
input and initializer names, and the external data files its tensors name. A model may hold up to 2 GB of inline
weights, and `onnx.load` parses every tensor (the file's size and more in memory, seconds of CPU) in the daemon, for
each submission. Here the fields are walked by their keys and lengths (protobuf's encoding:
https://protobuf.dev/programming-guides/encoding/), the tensors' data skipped unread: the file is read in small
pieces (`os.pread`, never mapped: a file cut short while it is read is an error here, not a SIGBUS), and a file that
would take long (more than MAX_FIELDS fields outside the tensors' data, subgraphs nested deeper than MAX_DEPTH, a
name over MAX_NAME bytes) is refused as malformed. Bytes the walk does not visit (a node's contents) are not checked:
a job with such a model fails when it loads it, as `diagnose` does.

Field numbers, from onnx.proto3 (`_F`). A message field that occurs twice is merged by protobuf (repeated fields
appended, the last of a singular scalar kept): so here, but for two occurrences of one attribute's tensor (each is
read alone).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MAX_FIELDS = 2_000_000  # fields visited in one file (about 1.3 s of CPU; whisper-base: 2,760 and 13,767)
MAX_DEPTH = 40  # subgraphs in subgraphs (onnx.load refuses about 33: protobuf's 100 nested messages)
MAX_NAME = 1 << 20  # bytes of one name or location
_WINDOW = 1 << 16
_VARINT, _I64, _LEN, _SGROUP, _EGROUP, _I32 = 0, 1, 2, 3, 4, 5


class _F:
    """The field numbers read (onnx.proto3)."""

    MODEL_GRAPH, MODEL_FUNCTIONS, FUNCTION_NODE = 7, 25, 7
    GRAPH_NODE, GRAPH_INITIALIZER, GRAPH_INPUT, NODE_ATTRIBUTE = 1, 5, 11, 5
    VALUE_INFO_NAME, TENSOR_NAME = 1, 8
    ATTR_T, ATTR_G, ATTR_TENSORS, ATTR_GRAPHS, ATTR_TYPE = 5, 6, 10, 11, 20
    TYPE_GRAPH, TYPE_GRAPHS = 5, 10  # AttributeProto.AttributeType
    TENSOR_EXTERNAL_DATA, TENSOR_DATA_LOCATION, EXTERNAL = 13, 14, 1
    ENTRY_KEY, ENTRY_VALUE = 1, 2


class Malformed(ValueError):
    """The bytes are not a protobuf message (or one this walk refuses to read: see the module docstring)."""


@dataclass(frozen=True)
class GraphNames:
    """What the scan found: whether the model has a graph, its inputs and its initializers' names, in order."""

    has_graph: bool
    inputs: list[str]
    initializers: list[str]


class _Reader:
    """The file's bytes at any position, read a window at a time; a budget of fields visited."""

    def __init__(self, fd: int, size: int):
        self.fd, self.size, self.start, self.window, self.fields = fd, size, 0, b"", 0

    def byte(self, pos: int) -> int:
        i = pos - self.start
        if not 0 <= i < len(self.window):
            self.start, self.window = pos, os.pread(self.fd, _WINDOW, pos)
            i = 0
            if not self.window:
                raise Malformed(f"the file ended at byte {pos} while it was read (changed meanwhile?)")
        return self.window[i]

    def text(self, start: int, end: int) -> str:
        if end - start > MAX_NAME:
            raise Malformed(f"a name of {end - start:,} bytes at byte {start}")
        data = os.pread(self.fd, end - start, start)
        if len(data) != end - start:
            raise Malformed(f"the file ended at byte {start + len(data)} while it was read (changed meanwhile?)")
        return data.decode("utf-8", errors="replace")

    def counted(self) -> None:
        self.fields += 1
        if self.fields > MAX_FIELDS:
            raise Malformed(f"more than {MAX_FIELDS:,} protobuf fields outside the tensors' data")


def _opened(path: Path, scan):
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        return scan(_Reader(f.fileno(), size), size)


def graph_names(path: Path) -> GraphNames:
    """The graph input and initializer names of the ONNX model at `path` (Malformed: see the module docstring;
    OSError: it cannot be read). An empty file has no graph."""
    return _opened(path, _model)


def external_locations(path: Path) -> list[str]:
    """The `location`s of the external data files the model at `path` names, sorted, as `onnx.external_data_helper`
    finds them: the tensors stored externally (`data_location` EXTERNAL; "" where one names no location) among the
    initializers of its graph and of the graph's subgraphs, and the tensors of every node attribute of the graph, of
    its subgraphs and of its functions and theirs (Malformed, OSError as `graph_names`)."""

    def scan(r: _Reader, size: int) -> list[str]:
        found: set[str] = set()
        for field, wire, s, e in _fields(r, 0, size):
            if wire == _LEN and field == _F.MODEL_GRAPH:
                _graph_tensors(r, s, e, _F.GRAPH_NODE, True, found, 0)
            elif wire == _LEN and field == _F.MODEL_FUNCTIONS:
                _graph_tensors(r, s, e, _F.FUNCTION_NODE, False, found, 0)
        return sorted(found)

    return _opened(path, scan)


def _model(r: _Reader, size: int) -> GraphNames:
    inputs: list[str] = []
    inits: list[str] = []
    graphs = 0
    for field, wire, start, end in _fields(r, 0, size):
        if field == _F.MODEL_GRAPH and wire == _LEN:
            graphs += 1
            for f, w, s, e in _fields(r, start, end):
                if f == _F.GRAPH_INPUT and w == _LEN:
                    inputs.append(_name(r, s, e, _F.VALUE_INFO_NAME))
                elif f == _F.GRAPH_INITIALIZER and w == _LEN:
                    inits.append(_name(r, s, e, _F.TENSOR_NAME))
    return GraphNames(graphs > 0, inputs, inits)


def _name(r: _Reader, start: int, end: int, number: int) -> str:
    """The last string field `number` of the message in [start, end) (protobuf keeps the last of a singular one)."""
    name = ""
    for field, wire, s, e in _fields(r, start, end):
        if field == number and wire == _LEN:
            name = r.text(s, e)
    return name


def _graph_tensors(r: _Reader, start: int, end: int, node_field: int, initializers: bool, found: set[str],
                   depth: int) -> None:
    """The external locations of a graph's (or function's) initializers (`initializers`: onnx's helper reads those of
    the model's graph and its subgraphs only) and of its nodes' attribute tensors, subgraphs included."""
    if depth > MAX_DEPTH:
        raise Malformed(f"subgraphs nested deeper than {MAX_DEPTH} levels")
    for field, wire, s, e in _fields(r, start, end):
        if wire != _LEN:
            continue
        if initializers and field == _F.GRAPH_INITIALIZER:
            _tensor_location(r, s, e, found)
        elif field == node_field:
            for f, w, ns, ne in _fields(r, s, e):
                if f == _F.NODE_ATTRIBUTE and w == _LEN:
                    _attribute_tensors(r, ns, ne, initializers, found, depth)


def _attribute_tensors(r: _Reader, start: int, end: int, initializers: bool, found: set[str], depth: int) -> None:
    kind, tensors, graphs = 0, [], []
    for field, wire, s, e in _fields(r, start, end):
        if field == _F.ATTR_TYPE and wire == _VARINT:
            kind = _enum(s)
        elif field in (_F.ATTR_T, _F.ATTR_TENSORS) and wire == _LEN:
            tensors.append((s, e))
        elif field in (_F.ATTR_G, _F.ATTR_GRAPHS) and wire == _LEN:
            graphs.append((field, s, e))
    for s, e in tensors:
        _tensor_location(r, s, e, found)
    for field, s, e in graphs:  # as onnx.external_data_helper: a subgraph counts by the attribute's type
        if (field, kind) in ((_F.ATTR_G, _F.TYPE_GRAPH), (_F.ATTR_GRAPHS, _F.TYPE_GRAPHS)):
            _graph_tensors(r, s, e, _F.GRAPH_NODE, initializers, found, depth + 1)


def _tensor_location(r: _Reader, start: int, end: int, found: set[str]) -> None:
    location, external = "", False
    for field, wire, s, e in _fields(r, start, end):
        if field == _F.TENSOR_DATA_LOCATION and wire == _VARINT:
            external = _enum(s) == _F.EXTERNAL
        elif field == _F.TENSOR_EXTERNAL_DATA and wire == _LEN:
            entry = {f: r.text(es, ee) for f, w, es, ee in _fields(r, s, e) if w == _LEN and f in (1, 2)}
            if entry.get(_F.ENTRY_KEY, "") == "location":
                location = entry.get(_F.ENTRY_VALUE, "")
    if external:
        found.add(location)


def _enum(value: int) -> int:
    """A varint as protobuf reads an enum: its low 32 bits, signed."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _fields(r: _Reader, pos: int, end: int):
    """(field number, wire type, a, b) of each field of the message in [pos, end): for a length-delimited field its
    bytes [a, b); for a varint its value and -1; for the others (-1, -1). Groups (wire types 3 and 4, which
    protobuf still reads) are skipped whole."""
    while pos < end:
        number, wire, a, b, pos = _next(r, pos, end)
        if wire == _SGROUP:
            pos = _skip_group(r, pos, end, number)
        elif wire == _EGROUP:
            raise Malformed(f"the end of group {number} at byte {pos} ends no group")
        else:
            yield number, wire, a, b


def _next(r: _Reader, pos: int, end: int) -> tuple[int, int, int, int, int]:
    """The field that starts at `pos`: (number, wire type, a, b as `_fields` gives them, the position after it)."""
    r.counted()
    key, pos = _varint(r, pos, end)
    number, wire = key >> 3, key & 7
    if number == 0:
        raise Malformed(f"field number 0 at byte {pos}")
    if wire == _VARINT:
        value, pos = _varint(r, pos, end)
        return number, wire, value, -1, pos
    if wire == _LEN:
        size, pos = _varint(r, pos, end)
        if size > end - pos:
            raise Malformed(f"a field of {size:,} bytes at byte {pos} runs past its message's end")
        return number, wire, pos, pos + size, pos + size
    if wire in (_I64, _I32):
        pos += 8 if wire == _I64 else 4
        if pos > end:
            raise Malformed(f"a fixed-size field runs past its message's end at byte {end}")
        return number, wire, -1, -1, pos
    if wire in (_SGROUP, _EGROUP):
        return number, wire, -1, -1, pos
    raise Malformed(f"wire type {wire} at byte {pos}")


def _skip_group(r: _Reader, pos: int, end: int, number: int) -> int:
    """The position after the group `number` whose fields start at `pos` (its end-group key read)."""
    depth = 1
    while pos < end:
        n, wire, _, _, pos = _next(r, pos, end)
        if wire == _SGROUP:
            depth += 1
            if depth > MAX_DEPTH:
                raise Malformed(f"groups nested deeper than {MAX_DEPTH} levels")
        elif wire == _EGROUP:
            depth -= 1
            if depth == 0:
                if n != number:
                    raise Malformed(f"group {number} ended by group {n}'s end at byte {pos}")
                return pos
    raise Malformed(f"group {number} not ended before byte {end}")


def _varint(r: _Reader, pos: int, end: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= end or shift > 63:
            raise Malformed(f"a varint cut short at byte {pos}")
        b = r.byte(pos)
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
