"""Node fixtures: a few nodes' exact FP32 inputs and a provider's low-precision outputs, in one
`.npz`, so that a CPU test can check which emulation rule reproduces the provider's numbers.

Layout: `index` holds a JSON list of entries (key, model, node, op_type, provider, input and output
names, where they came from); for entry `k`, `k.onnx` is a one-node ONNX model (the node and the
initializers it reads, FP32), `k.in<i>` its i-th fed input (float32) and `k.out<j>` the provider's
j-th output (float16 where that is lossless, as the provider's FP16 values are). A fusion's entry
(`fusion` set in its record) holds the pattern instead of one node (`pattern_model`): its inputs are
the pattern's, its output the anchor's, computed by the provider on the real FP16 pattern with its
graph optimizations on (so the provider fuses it as it would in the whole graph).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from precision_doctor.data.activations import REFERENCE, ActivationStore
from precision_doctor.errors import UserError
from precision_doctor.graph.emulate import local_graph, local_output
from precision_doctor.graph.formats import Format
from precision_doctor.graph.fusions import Site, pattern_model
from precision_doctor.graph.model import Model, NodeInfo, from_proto
from precision_doctor.graph.ort_session import make_session, with_outputs
from precision_doctor.measure.fidelity import GPU_LOCAL, agreement


def node_model(model: Model, info: NodeInfo) -> onnx.ModelProto:
    """A model of the node alone: its initializers inside, its other inputs as graph inputs."""
    return subgraph_model(model, [info.name], name=f"node_{info.index}")


def subgraph_model(model: Model, nodes: Iterable[str], outputs: Iterable[str] | None = None,
                   name: str = "subgraph") -> onnx.ModelProto:
    """A model of `nodes` (names) cut out of `model`: the initializers they read and the Constant nodes
    whose values they read inside, the other tensors they read as graph inputs (with the model's types and
    shapes); outputs: `outputs`, else every tensor they make that none of them reads."""
    g = model.proto.graph
    wanted = {model.node(n).index for n in nodes}
    made_by = {t: i for i, n in enumerate(g.node) for t in n.output if t}
    for i in sorted(wanted):
        for t in g.node[i].input:
            j = made_by.get(t)
            if j is not None and j not in wanted and g.node[j].op_type == "Constant":
                wanted.add(j)
    picked = [g.node[i] for i in sorted(wanted)]
    made = {t for n in picked for t in n.output if t}
    read = list(dict.fromkeys(t for n in picked for t in n.input if t))
    inits = [i for i in g.initializer if i.name in set(read)]
    init_names = {i.name for i in inits}
    ins = [t for t in read if t not in made and t not in init_names]
    if outputs is None:
        outputs = [t for n in picked for t in n.output if t and (t not in set(read) or t in model.outputs)]
    types, shapes = model.tensor_types, model.tensor_shapes
    graph = helper.make_graph(
        picked, name,
        [helper.make_tensor_value_info(t, types[t], shapes.get(t)) for t in ins],
        [helper.make_tensor_value_info(t, types[t], shapes.get(t)) for t in outputs],
        inits,
    )
    out = helper.make_model(graph, opset_imports=list(model.proto.opset_import), ir_version=model.proto.ir_version)
    out.producer_name = "precision-doctor-fixture"
    return out


def pattern_entries(
    store: ActivationStore, model: Model, sites: Iterable[Site], run: str, label: str, meta: dict | None = None,
) -> list[tuple[dict, dict[str, np.ndarray]]]:
    """Entries (index record, arrays) for fusion sites from sample 0 of a store holding `reference` and the
    provider's anchor outputs in `run`."""
    out = []
    for site in sites:
        proto = pattern_model(model, site)
        ins = [i.name for i in proto.graph.input]
        y = proto.graph.output[0].name
        if not store.has(run, y) or not all(store.has(REFERENCE, t) for t in ins):
            continue
        arrays = {"onnx": np.frombuffer(proto.SerializeToString(), dtype=np.uint8)}
        arrays.update({f"in{i}": store.read(REFERENCE, t, 0) for i, t in enumerate(ins)})
        arrays["out0"] = _lossless16(store.read(run, y, 0))
        record = {"model": label, "node": site.anchor, "op_type": model.node(site.anchor).op_type, "fusion": site.fusion,
                  "pattern": [site.anchor, *site.gates], "inputs": ins, "outputs": [y], **(meta or {})}
        out.append((record, arrays))
    return out


def _lossless16(a: np.ndarray) -> np.ndarray:
    if a.dtype == np.float32:
        with np.errstate(over="ignore"):
            h = a.astype(np.float16)
        if np.array_equal(h.astype(np.float32), a, equal_nan=True):
            return h
    return a


def fixture_entries(
    store: ActivationStore, model: Model, nodes: Iterable[NodeInfo], label: str, meta: dict | None = None
) -> list[tuple[dict, dict[str, np.ndarray]]]:
    """Entries (index record, arrays) for `nodes` from sample 0 of a store holding `reference` and
    `gpu_local`; nodes without stored provider outputs or with subgraphs are left out."""
    out = []
    for info in nodes:
        if info.implicit_inputs or not all(store.has(GPU_LOCAL, t) for t in info.float_outputs):
            continue
        proto = node_model(model, info)
        ins = [i.name for i in proto.graph.input]
        if not all(store.has(REFERENCE, t) for t in ins):
            continue
        outs = list(info.float_outputs)
        arrays = {"onnx": np.frombuffer(proto.SerializeToString(), dtype=np.uint8)}
        arrays.update({f"in{i}": store.read(REFERENCE, t, 0) for i, t in enumerate(ins)})
        arrays.update({f"out{j}": _lossless16(store.read(GPU_LOCAL, t, 0)) for j, t in enumerate(outs)})
        record = {"model": label, "node": info.name, "op_type": info.op_type, "inputs": ins, "outputs": outs, **(meta or {})}
        out.append((record, arrays))
    return out


def write_fixture(path: Path, entries: list[tuple[dict, dict[str, np.ndarray]]]) -> Path:
    """Write entries (from `fixture_entries`) to one compressed `.npz`."""
    index, arrays = [], {}
    for k, (record, arrs) in enumerate(entries):
        key = f"n{k}"
        index.append({"key": key, **record})
        arrays.update({f"{key}.{name}": a for name, a in arrs.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, index=np.array(json.dumps(index)), **arrays)
    return path


def read_fixture(path: Path) -> list[tuple[dict, dict[str, np.ndarray]]]:
    """Entries of a fixture file: (index record, {'onnx', 'in<i>', 'out<j>'})."""
    try:
        with np.load(path, allow_pickle=False) as data:
            index = json.loads(str(data["index"]))
            return [(rec, {k.split(".", 1)[1]: data[k] for k in data.files if k.startswith(rec["key"] + ".")}) for rec in index]
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"not a node fixture file: {path} ({exc})") from exc


def replay(record: dict, arrays: dict[str, np.ndarray], fmt: Format, rules=None) -> dict[str, np.ndarray]:
    """The emulator's local output of the fixture's node (or pattern's anchor) under `rules`, on ORT's
    CPU provider; a pattern's inner tensors are fed exact, from its FP32 run."""
    model = from_proto(onnx.load_from_string(arrays["onnx"].tobytes()))
    exact = {t: arrays[f"in{i}"] for i, t in enumerate(record["inputs"])}
    inner = [t for n in model.nodes for t in n.outputs if t and t not in record["outputs"]]
    if inner:
        sess = make_session(with_outputs(model.proto, inner, model.tensor_types), optimize=False)
        exact.update(zip(inner, sess.run(inner, exact)))
    proto, feeds = local_graph(model, fmt, model.candidates, rules)
    names = [local_output(t) for t in record["outputs"]]
    res = make_session(proto, optimize=False).run(names, {t: exact[t] for t in feeds})
    return dict(zip(record["outputs"], res))


def check_rules(path: Path, fmt: Format, rules=None) -> list[dict]:
    """For every fixture entry: how closely `rules` reproduce the provider's outputs (see `agreement`)."""
    rows = []
    for record, arrays in read_fixture(path):
        got = replay(record, arrays, fmt, rules)
        for j, t in enumerate(record["outputs"]):
            rows.append({"model": record["model"], "node": record["node"], "op_type": record["op_type"], "output": t,
                         **agreement(got[t], arrays[f"out{j}"].astype(np.float32), fmt)})
    return rows
