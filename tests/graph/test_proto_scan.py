"""graph/proto_scan.py: a model's graph input and initializer names from the protobuf wire format, what the service's
check at submission reads of a model instead of parsing its weights."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_doctor import planted
from precision_doctor.graph.proto_scan import Malformed, graph_names

ROOT = Path(__file__).resolve().parents[2]


def _onnx_names(path: Path) -> tuple[bool, list[str], list[str]]:
    proto = onnx.load(str(path), load_external_data=False)
    return proto.HasField("graph"), [i.name for i in proto.graph.input], [t.name for t in proto.graph.initializer]


def _with_weights(mb: int, also_input: bool = False) -> onnx.ModelProto:
    """x + w (w: `mb` MiB of inline weights), w also a graph input where `also_input` (an overridable initializer)."""
    w = numpy_helper.from_array(np.ones((mb << 18,), np.float32), "w")
    vi = helper.make_tensor_value_info
    inputs = [vi("x", TensorProto.FLOAT, [mb << 18])] + ([vi("w", TensorProto.FLOAT, [mb << 18])] if also_input else [])
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", inputs,
                          [vi("y", TensorProto.FLOAT, [mb << 18])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_the_names_are_those_onnx_parses(tmp_path):
    """On every planted model, one whose initializer is also a graph input, one with its weights in an external file,
    and the repository's example models: the same inputs and initializers, in order, as onnx.load's."""
    models = {name: make().model for name, make in planted.CASES.items()}
    models["layernorm_block"] = planted.layernorm_block().model
    models["overridable"] = _with_weights(1, also_input=True)
    paths = []
    for name, proto in models.items():
        onnx.save(proto, str(tmp_path / f"{name}.onnx"))
        paths.append(tmp_path / f"{name}.onnx")
    onnx.save(_with_weights(1), str(tmp_path / "external.onnx"), save_as_external_data=True, location="external.bin")
    paths += [tmp_path / "external.onnx", *sorted(ROOT.glob("examples/**/*.onnx"))]
    for path in paths:
        names = graph_names(path)
        assert (names.has_graph, names.inputs, names.initializers) == _onnx_names(path), path
    assert graph_names(tmp_path / "overridable.onnx").inputs == ["x", "w"]


def test_large_inline_weights_are_never_read_into_memory(tmp_path):
    """A model with 64 MiB of inline weights: the scan allocates a few KiB, whatever the weights' size."""
    path = tmp_path / "big.onnx"
    onnx.save(_with_weights(64), str(path))
    tracemalloc.start()
    try:
        names = graph_names(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert names.inputs == ["x"] and names.initializers == ["w"] and peak < 1 << 20


def test_what_is_no_protobuf_message_is_malformed_and_an_empty_file_has_no_graph(tmp_path):
    onnx.save(_with_weights(1), str(tmp_path / "m.onnx"))
    whole = (tmp_path / "m.onnx").read_bytes()
    cases = {"cut": whole[: len(whole) // 2], "noise": bytes(range(256)) * 4, "varint": b"\x3a" + b"\xff" * 12,
             "wire type 7": b"\x3f"}
    for name, data in cases.items():
        (tmp_path / f"{name}.onnx").write_bytes(data)
        with pytest.raises(Malformed):
            graph_names(tmp_path / f"{name}.onnx")
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert graph_names(tmp_path / "empty.onnx").has_graph is False


def _onnx_locations(path: Path) -> list[str]:
    from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

    proto = onnx.load(str(path), load_external_data=False)
    return sorted({ExternalDataInfo(t).location for t in _get_all_tensors(proto) if uses_external_data(t)})


def _nested() -> onnx.ModelProto:
    """Weights in every place onnx's external-data helper looks: an initializer, a Constant's value, an If's branch
    initializer and a Constant inside that branch, and a Constant in a model function."""
    def const(name: str, n: int) -> onnx.NodeProto:
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.full((n,), 2.0, np.float32), name))

    vi = helper.make_tensor_value_info
    branch = helper.make_graph([const("bc", 4096), helper.make_node("Add", ["bw", "bc"], ["bo"])], "then", [],
                               [vi("bo", TensorProto.FLOAT, [4096])],
                               [numpy_helper.from_array(np.ones(4096, np.float32), "bw")])
    fn = helper.make_function("local", "Scale", ["a"], ["b"], [const("fc", 4096), helper.make_node("Mul", ["a", "fc"], ["b"])],
                              [helper.make_opsetid("", 17)])
    nodes = [const("c", 4096), helper.make_node("Add", ["x", "w"], ["s"]), helper.make_node("Add", ["s", "c"], ["t"]),
             helper.make_node("If", ["cond"], ["u"], then_branch=branch, else_branch=branch),
             helper.make_node("Add", ["t", "u"], ["v"]), helper.make_node("Scale", ["v"], ["y"], domain="local")]
    g = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [4096]), vi("cond", TensorProto.BOOL, [])],
                          [vi("y", TensorProto.FLOAT, [4096])], [numpy_helper.from_array(np.ones(4096, np.float32), "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                             functions=[fn])


def test_the_external_data_files_are_those_onnx_finds(tmp_path):
    """A model with its weights in one file, in a file per tensor, and inline: the locations onnx's external-data
    helper finds (initializers, Constants, an If branch's weights and Constant, a function's Constant)."""
    from precision_doctor.graph.proto_scan import external_locations

    one, each, inline = tmp_path / "one.onnx", tmp_path / "each" / "m.onnx", tmp_path / "inline.onnx"
    each.parent.mkdir()
    onnx.save(_nested(), str(one), save_as_external_data=True, location="weights.bin", size_threshold=0,
              convert_attribute=True)
    onnx.save(_nested(), str(each), save_as_external_data=True, all_tensors_to_one_file=False, size_threshold=0,
              convert_attribute=True)
    onnx.save(_nested(), str(inline))
    assert external_locations(one) == _onnx_locations(one) == ["weights.bin"]
    assert external_locations(each) == _onnx_locations(each) and len(external_locations(each)) == 5
    assert external_locations(inline) == _onnx_locations(inline) == []


def _deep(levels: int) -> onnx.ModelProto:
    """An If whose then-branch holds an If, `levels` deep, the innermost branch an external-looking Constant."""
    vi = helper.make_tensor_value_info
    inner = helper.make_graph([helper.make_node("Constant", [], ["o"], value=numpy_helper.from_array(np.ones(2, np.float32)))],
                              "b0", [], [vi("o", TensorProto.FLOAT, [2])])
    leaf = inner
    for k in range(levels):
        node = helper.make_node("If", ["cond"], ["o"], then_branch=inner, else_branch=leaf)
        inner = helper.make_graph([node], f"b{k + 1}", [], [vi("o", TensorProto.FLOAT, [2])])
    g = helper.make_graph(inner.node, "g", [vi("cond", TensorProto.BOOL, [])], [vi("o", TensorProto.FLOAT, [2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_what_would_take_long_is_refused_and_what_protobuf_skips_is_skipped(tmp_path, monkeypatch):
    """Subgraphs nested past MAX_DEPTH, more than MAX_FIELDS fields: Malformed (the daemon answers 422), never a
    RecursionError or minutes of CPU; an unknown group field, which protobuf reads past, is skipped."""
    from precision_doctor.graph import proto_scan

    (tmp_path / "deep.onnx").write_bytes(_deep(8).SerializeToString())  # onnx's own helper refuses about 33 levels
    assert proto_scan.external_locations(tmp_path / "deep.onnx") == []
    monkeypatch.setattr(proto_scan, "MAX_DEPTH", 5)
    with pytest.raises(Malformed, match="nested deeper than 5"):
        proto_scan.external_locations(tmp_path / "deep.onnx")
    (tmp_path / "ok.onnx").write_bytes(_deep(3).SerializeToString())
    assert proto_scan.external_locations(tmp_path / "ok.onnx") == []
    monkeypatch.setattr(proto_scan, "MAX_FIELDS", 5)
    with pytest.raises(Malformed, match="more than 5 protobuf fields"):
        graph_names(tmp_path / "ok.onnx")
    monkeypatch.undo()
    group = b"\xfb\x01" + b"\x08\x01" + b"\xfc\x01"  # field 31 as a group holding a varint, then its end
    (tmp_path / "group.onnx").write_bytes(_with_weights(1).SerializeToString() + group)
    assert (lambda n: (n.has_graph, n.inputs, n.initializers))(graph_names(tmp_path / "group.onnx")) == \
        _onnx_names(tmp_path / "group.onnx")
