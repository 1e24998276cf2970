"""A graph run as a chain of segments: each segment's session computes one group's tensors from the graph inputs and
the tensors earlier segments computed (carried from segment to segment, one sample at a time), so that a run over
every group of a model computes the model once, not once per group up to its tensors.

`plan_chain` cuts a graph into segments for groups of wanted tensors; `Chain` holds their sessions and runs one
sample through them. Only tensors named in `carried` (a model's own tensors, whose types are known) cross between
segments; anything else a segment reads (an emulation graph's internal tensors) it computes again itself."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from precision_doctor.graph.model import implicit_inputs
from precision_doctor.graph.ort_session import run_session, shrinking_gpu_arena


@dataclass(frozen=True)
class Segment:
    """One link of a chain: the graph's nodes it runs (indices, in the graph's order), what it is fed (graph inputs
    and carried tensors), what it returns (its targets it computes and the carried tensors later segments read),
    and its targets (what the caller wants of it, some perhaps computed earlier)."""

    nodes: tuple[int, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    targets: tuple[str, ...]


def _reads(node: onnx.NodeProto) -> list[str]:
    return [t for t in dict.fromkeys([*node.input, *sorted(implicit_inputs(node))]) if t]


def plan_chain(proto: onnx.ModelProto, targets: Sequence[Sequence[str]], carried: Collection[str]) -> list[Segment]:
    """One Segment per group of `targets`, in order: each runs the nodes its targets need that no earlier segment
    computed (a tensor in `carried` that an earlier one computed is fed to it instead; any other is computed again)."""
    graph = proto.graph
    producer: dict[str, int] = {}
    for i, n in enumerate(graph.node):
        for t in n.output:
            if t:
                producer.setdefault(t, i)
    given = {i.name for i in graph.input}
    consts = {i.name for i in graph.initializer} | {i.values.name for i in graph.sparse_initializer}
    computed: dict[str, int] = {}  # carried tensor -> the segment that first computed it
    plans: list[tuple[set[int], set[str], tuple[str, ...]]] = []
    for k, wanted in enumerate(targets):
        mine: set[int] = set()
        fed: set[str] = set()
        stack, seen = list(wanted), set()
        while stack:
            t = stack.pop()
            if not t or t in seen or t in consts:
                continue
            seen.add(t)
            if t in given or t in computed:
                fed.add(t)
            elif t in producer and producer[t] not in mine:
                mine.add(producer[t])
                stack.extend(_reads(graph.node[producer[t]]))
        for i in mine:
            for t in graph.node[i].output:
                if t and t in carried and t not in computed:
                    computed[t] = k
        plans.append((mine, fed, tuple(dict.fromkeys(wanted))))
    later: dict[int, set[str]] = {}
    for _, fed, _ in plans:
        for t in fed - given:
            later.setdefault(computed[t], set()).add(t)
    segments = []
    for k, (mine, fed, wanted) in enumerate(plans):
        made = {t for i in mine for t in graph.node[i].output if t}
        outs = [t for t in wanted if t in made] + sorted(later.get(k, set()) - set(wanted))
        segments.append(Segment(tuple(sorted(mine)), tuple(sorted(fed)), tuple(outs), wanted))
    return segments


def segment_proto(proto: onnx.ModelProto, seg: Segment, types: Mapping[str, int]) -> onnx.ModelProto:
    """The model that runs `seg` of `proto` alone: its nodes, the initializers they read, `seg.inputs` as graph
    inputs (a graph input keeps its declaration; a carried tensor gets its type from `types`)."""
    graph = proto.graph
    nodes = [graph.node[i] for i in seg.nodes]
    read = {t for n in nodes for t in _reads(n)}
    declared = {i.name: i for i in graph.input}
    inputs = [declared[t] if t in declared else helper.make_tensor_value_info(t, types.get(t, 0), None)
              for t in seg.inputs]
    outputs = [helper.make_tensor_value_info(t, types.get(t, 0), None) for t in seg.outputs]
    g = helper.make_graph(nodes, graph.name, inputs, outputs,
                          initializer=[x for x in graph.initializer if x.name in read],
                          sparse_initializer=[x for x in graph.sparse_initializer if x.values.name in read])
    m = helper.make_model(g, opset_imports=list(proto.opset_import), ir_version=proto.ir_version)
    m.functions.extend(proto.functions)
    return m


class Chain:
    """The sessions of a planned chain (`make` turns a segment's model into a session) and, per sample, the run
    through them: `run` yields each segment's targets in turn, holding only what later segments still read (a
    segment on the GPU gives its arena's unused memory back after each run: `shrinking_gpu_arena`)."""

    def __init__(self, proto: onnx.ModelProto, plan: Sequence[Segment], types: Mapping[str, int],
                 make: Callable[[onnx.ModelProto], object]):
        self.plan = list(plan)
        self.sessions = [make(segment_proto(proto, seg, types)) if seg.outputs else None for seg in self.plan]
        self.options = [shrinking_gpu_arena(s) if s is not None else None for s in self.sessions]
        last: dict[str, int] = {}
        for k, seg in enumerate(self.plan):
            for t in (*seg.inputs, *seg.targets):
                last[t] = k
        self.drop = [[t for t, k2 in last.items() if k2 == k] for k in range(len(self.plan))]

    def run(self, feed: Mapping[str, np.ndarray], model: object = None) -> Iterator[dict[str, np.ndarray]]:
        """One sample (`feed`: the graph inputs) through every segment: each segment's targets by name."""
        live = dict(feed)
        for seg, sess, options, drop in zip(self.plan, self.sessions, self.options, self.drop):
            if sess is not None:
                feed_k = {t: live[t] for t in seg.inputs}
                live.update(zip(seg.outputs, run_session(sess, seg.outputs, feed_k, model, options)))
            yield {t: live[t] for t in seg.targets}
            for t in drop:
                if t not in feed:
                    live.pop(t, None)
