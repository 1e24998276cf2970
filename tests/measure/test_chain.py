"""A run as a chain of segments (measure/chain.py): every node of the model runs once per sample however many groups
the capture cuts it into, the values are those of one session over the whole graph, and the emulation graph (whose
nodes read tensors inside If branches) chains the same way."""

from __future__ import annotations

import numpy as np
import pytest

from precision_doctor import planted
from precision_doctor.graph.emulate import MASK_INPUT, gated_graph
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.model import from_proto
from precision_doctor.graph.ort_session import make_session, with_outputs
from precision_doctor.measure.chain import Chain, plan_chain
from precision_doctor.spec import BackendSpec

NAMES = sorted(planted.CASES)


def _whole(proto, names, feed, model):
    """One session over the whole graph with `names` as its outputs."""
    sess = make_session(with_outputs(proto, names, model.tensor_types), optimize=False)
    return dict(zip(names, sess.run(names, feed)))


@pytest.mark.parametrize("name", NAMES)
def test_one_group_per_node_runs_every_node_once(name):
    case = planted.CASES[name]()
    model = from_proto(case.model)
    targets = [[t for t in n.outputs if t] for n in model.nodes]
    plan = plan_chain(model.proto, targets, model.tensor_types)
    assert sorted(i for seg in plan for i in seg.nodes) == list(range(len(model.nodes)))  # each node once
    chain = Chain(model.proto, plan, model.tensor_types, lambda p: make_session(p, optimize=False))
    sample = case.samples(1, seed=3)[0]
    got = {t: v for values in chain.run(sample, model) for t, v in values.items()}
    want = _whole(model.proto, [t for ts in targets for t in ts], sample, model)
    assert set(got) == set(want)
    for t in want:
        np.testing.assert_array_equal(got[t], want[t], err_msg=t)


@pytest.mark.parametrize("name", NAMES)
def test_the_emulation_graph_chains_with_its_gates_and_branches(name):
    """The gated graph's nodes that stand for a model's node are cut where the model's are; what only they compute
    (the gates read from the mask, rounded copies) is computed again where a segment needs it."""
    case = planted.CASES[name]()
    model = from_proto(case.model)
    gated = gated_graph(model, get_format("fp16"), rules=BackendSpec().rules)
    targets = [list(n.float_outputs) for n in model.nodes]
    plan = plan_chain(gated.proto, targets, model.tensor_types)
    ifs = [i for i, n in enumerate(gated.proto.graph.node) if n.op_type == "If"]
    assert sorted(i for seg in plan for i in seg.nodes if i in ifs) == ifs  # each wrapped node once
    chain = Chain(gated.proto, plan, model.tensor_types, lambda p: make_session(p, optimize=False))
    sample = case.samples(1, seed=4)[0]
    fallback = frozenset(n.name for n in model.candidates[::2])
    feed = {**sample, MASK_INPUT: gated.mask(fallback)}
    got = {t: v for values in chain.run(feed, model) for t, v in values.items()}
    want = _whole(gated.proto, [t for ts in targets for t in ts], feed, model)
    for t in want:
        np.testing.assert_array_equal(got[t], want[t], err_msg=t)


def test_targets_out_of_order_are_carried_not_computed_again():
    """A later group's target that an earlier segment computed is fed from it (held until then), not recomputed."""
    case = planted.CASES["three_defects"]()
    model = from_proto(case.model)
    first, last = model.nodes[0].outputs[0], model.nodes[-1].outputs[0]
    plan = plan_chain(model.proto, [[last], [first]], model.tensor_types)
    assert plan[1].nodes == () and plan[1].inputs == (first,) and first in plan[0].outputs
    chain = Chain(model.proto, plan, model.tensor_types, lambda p: make_session(p, optimize=False))
    sample = case.samples(1, seed=5)[0]
    got = [v for values in chain.run(sample, model) for v in values.values()]
    want = _whole(model.proto, [last, first], sample, model)
    np.testing.assert_array_equal(got[0], want[last])
    np.testing.assert_array_equal(got[1], want[first])


def test_only_a_session_on_the_gpu_gives_its_arena_back():
    """The arena-shrinking run options go to sessions that run on the CUDA provider only: ONNX Runtime refuses them
    where no GPU arena is registered (a CPU session, or a CUDA one that fell back to the CPU)."""
    from precision_doctor.graph.ort_session import shrinking_gpu_arena

    case = planted.CASES["three_defects"]()
    sess = make_session(case.model, optimize=False)
    assert shrinking_gpu_arena(sess) is None
    sess.run(None, case.samples(1, seed=6)[0], shrinking_gpu_arena(sess))


def test_a_shrinkable_session_computes_what_any_other_does():
    """A capture session on the GPU keeps its weights outside the arena (`shrinkable`): a session option ONNX
    Runtime takes, with the same outputs (here on the CPU; on the GPU: tests/measure/test_streaming_capture.py)."""
    case = planted.CASES["three_defects"]()
    feed = case.samples(1, seed=6)[0]
    want = make_session(case.model, optimize=False).run(None, feed)
    got = make_session(case.model, optimize=False, shrinkable=True).run(None, feed)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_a_shrinkable_session_plans_no_memory_pattern(monkeypatch):
    """Its arena's first allocation, which no shrink frees, is then one tensor, not the block a memory pattern plans
    for all of a run's tensors; its weights outside the arena."""
    import onnxruntime as ort

    from precision_doctor.graph import ort_session

    made = []
    real = ort.InferenceSession

    def spy(data, so, **kw):
        made.append(so)
        return real(data, so, **kw)

    monkeypatch.setattr(ort_session.ort, "InferenceSession", spy)
    model = planted.CASES["three_defects"]().model
    make_session(model, optimize=False)
    make_session(model, optimize=False, shrinkable=True)
    plain, shrinkable = made
    assert plain.enable_mem_pattern and not shrinkable.enable_mem_pattern
    assert shrinkable.get_session_config_entry("session.use_device_allocator_for_initializers") == "1"


def test_a_gpu_failure_in_the_capture_says_to_capture_on_the_cpu(monkeypatch):
    """ONNX Runtime's CUDA provider failing in a capture's run (isnet-1024 on the H200, beside another diagnosis: out
    of memory at the capture's second step) is one line that names the node and says --capture-device cpu, not only
    --backend emulate, which leaves the capture where it was. No GPU here: the failure is the one `run_error` makes of
    such an ONNX Runtime error."""
    from precision_doctor.graph.ort_session import GpuRunError
    from precision_doctor.measure import chain
    from precision_doctor.measure.capture import layer_groups, run_groups

    def fail(*args, **kwargs):
        raise GpuRunError("m.onnx: ONNX Runtime's CUDA provider failed at node '/stage1/Concat_10' (cublas error)")

    monkeypatch.setattr(chain, "run_session", fail)
    case = planted.CASES["three_defects"]()
    model = from_proto(case.model)
    groups = layer_groups(model, model.nodes, 1 << 20)
    with pytest.raises(GpuRunError) as err:
        list(run_groups(model, case.samples(1, seed=2), get_format("fp16"), groups, stage="statistics"))
    words = str(err.value)
    assert "failed at node '/stage1/Concat_10'" in words and "--capture-device cpu" in words and "\n" not in words
