"""Issue 33: growth by attribution. An answer that fails a sample grows only by the nodes that sample's own error is
attributed to (each node's local error on it), what it added is pruned again, and a repair with failing held-out
samples leaves the answer not validated."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_doctor import api, planted
from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.model import from_proto
from precision_doctor.measure.attribution import local_scores
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.outcome import Growth
from precision_doctor.search.attributed import attributed, attributed_repair, growth_names
from precision_doctor.search.oracle import Oracle
from precision_doctor.search.space import build_space
from precision_doctor.spec import InputSpec, RunSpec, SearchSpec

WIDTH = 16
UNUSUAL = 400.0  # x * 300 overflows FP16 (65504) where |x| > 218: only the unusual samples reach it


def _two_branches() -> onnx.ModelProto:
    """y = tanh(x @ W) + (x * 300) / 300. On ordinary inputs (|x| < 5) all-FP16 meets atol 0.05 (the MatMul's
    rounding is the largest error, the ranking's first); on an unusual input with one element at 400 the Mul
    overflows FP16 and its Div divides inf: only those two nodes matter there."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(300.0, np.float32), "k")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
             helper.make_node("Tanh", ["m"], ["t"], name="tanh"),
             helper.make_node("Mul", ["x", "k"], ["big"], name="scale_up"),
             helper.make_node("Div", ["big", "k"], ["small"], name="scale_down"),
             helper.make_node("Add", ["t", "small"], ["y"], name="add")]
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "two_branches", [vi("x", TensorProto.FLOAT, [1, WIDTH])],
                          [vi("y", TensorProto.FLOAT, [1, WIDTH])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def _sample(i: int, unusual: bool = False) -> dict[str, np.ndarray]:
    x = np.random.default_rng(i).uniform(-4, 4, (1, WIDTH)).astype(np.float32)
    if unusual:
        x[0, i % WIDTH] = UNUSUAL
    return {"x": x}


TOL = Tolerance(atol=0.05, rtol=0.0)


def _oracle(model, samples):
    backend = EmulateBackend(model, "fp16")
    refs = [ReferenceRunner(model).run(s) for s in samples]
    return Oracle(backend, samples, refs, TOL)


def test_growth_names_only_what_the_failing_sample_is_attributed_to():
    """Unit level: the attributed space ranks only nodes with a score above zero, most attributed first, and a
    repair never adds a node outside `growth_names` of the scores it was given, even where the search's own
    ranking puts another node first."""
    model = from_proto(_two_branches())
    space = build_space(model, None, get_format("fp16"))
    scores = {"scale_up": float("inf"), "scale_down": 3.0, "matmul": 0.0, "tanh": 0.0, "add": 0.0}
    sp = attributed(space, scores)
    assert sp.ranking == ["scale_up", "scale_down"] and sp.growth_only
    oracle = _oracle(model, [_sample(1, unusual=True)])
    found = attributed_repair(oracle, space, frozenset(), lambda idx: scores, failing=[0])
    assert found == {"scale_up", "scale_down"}
    assert found <= growth_names(space, scores)
    assert all(not (e.fallback & {"matmul", "tanh", "add"}) for e in oracle.trajectory)


def test_no_growth_where_the_attribution_names_nothing_that_helps():
    """A repair whose attributed nodes cannot make the set pass gives no answer rather than adding others."""
    model = from_proto(_two_branches())
    space = build_space(model, None, get_format("fp16"))
    oracle = _oracle(model, [_sample(1, unusual=True)])
    scores = {"matmul": 1.0, "tanh": 1.0}  # attributed elsewhere: the overflow is not named
    assert attributed_repair(oracle, space, frozenset(), lambda idx: scores, failing=[0]) is None
    assert all(e.fallback <= {"matmul", "tanh"} for e in oracle.trajectory)


def test_local_scores_name_the_overflow_of_the_unusual_sample(tmp_path):
    """The real attribution: on the unusual sample the Mul that overflows and the Div reading it score infinite,
    the rest finite; on an ordinary sample nothing overflows."""
    model = from_proto(_two_branches())
    fmt = get_format("fp16")
    odd, plain = local_scores(model, fmt, [_sample(3, unusual=True), _sample(3)], rules=None, group_mb=64)
    assert odd["scale_up"] == float("inf") and odd["scale_down"] == float("inf")
    assert np.isfinite(odd["matmul"]) and all(np.isfinite(v) for v in plain.values())
    # one pass over both samples gives each the scores it gets alone
    assert [odd, plain] == [local_scores(model, fmt, [s], rules=None, group_mb=64)[0]
                            for s in (_sample(3, unusual=True), _sample(3))]


@pytest.mark.parametrize("name", sorted(planted.CASES))
def test_attributed_repair_stays_within_the_attribution_on_the_planted_suite(name, tmp_path):
    """Every planted case, repaired from nothing by the real attribution of its first sample: the answer passes,
    adds nothing the attribution does not name, and none of its members can go (1-minimal over what it added)."""
    case = planted.CASES[name]()
    model = from_proto(case.model)
    fmt = get_format("fp16")
    samples = case.samples(2)
    space = build_space(model, None, fmt)
    oracle = Oracle(EmulateBackend(model, "fp16"), samples, [ReferenceRunner(model).run(s) for s in samples],
                    Tolerance(atol=case.atol, rtol=case.rtol))
    scores = {}

    def attribute(idx):
        for i in idx:
            scores[i] = local_scores(model, fmt, [samples[i]], rules=None, group_mb=64)[0]
        return {n: max(scores[i].get(n, 0.0) for i in scores) for n in scores[idx[0]]}

    found = attributed_repair(oracle, space, frozenset(), attribute, failing=[0])
    assert found is not None and oracle.passes(found)
    assert found <= growth_names(space, attribute(sorted(scores) or [0]))
    assert all(not oracle.passes(found - {n}) for n in found)


def _files(tmp_path, n: int, unusual: set[int]) -> RunSpec:
    model = tmp_path / "two_branches.onnx"
    onnx.save(_two_branches(), str(model))
    files = []
    for i in range(n):
        files.append(tmp_path / f"s{i:02d}.npz")
        np.savez(files[-1], **_sample(i, unusual=i in unusual))
    return RunSpec(str(model), inputs=InputSpec(files=tuple(map(str, files))), tolerance=TOL,
                   search=SearchSpec(margin=0.0))


def test_a_failing_held_out_sample_repairs_the_answer_by_attribution_and_leaves_it_not_validated(tmp_path):
    """12 samples, the unusual one held out (the default split holds out 2, 6 and 10 of 12): the search's answer is
    empty (all FP16 passes every search sample); the held-out sample fails it; the repair adds the overflowing Mul
    and its Div, never the MatMul the search's ranking puts first; both answers stay and no bound is claimed."""
    report = api.diagnose(_files(tmp_path, 12, {6}), tmp_path / "run")
    assert set(report.answer.fallback_nodes) == {"scale_up", "scale_down"}
    v = report.promise.validation
    assert v is not None and not v.passed and v.first_candidate == [] and v.passed_after_research
    assert v.backend == "emulate" and v.failing_samples == [1]
    assert report.promise.held_out_bound is None  # spent on the repair: nothing independent checked the answer
    assert report.promise.answers is not None and report.promise.answers.grown_by == [Growth.HELD_OUT]
    evaluated = [json.loads(line)["fallback"] for line in (tmp_path / "run" / "repair.jsonl").read_text().splitlines()]
    assert evaluated and all("matmul" not in fb for fb in evaluated)


def test_unusual_search_samples_are_searched_and_the_held_out_ones_check_the_answer(tmp_path):
    """20 samples, two unusual ones among the search samples (the hardest: the working set searches them): the answer
    names exactly the overflow, and the five held-out samples (a quarter of 20), all ordinary, pass it unseen: a
    measured bound."""
    report = api.diagnose(_files(tmp_path, 20, {3, 13}), tmp_path / "run")
    assert set(report.answer.fallback_nodes) == {"scale_up", "scale_down"}
    v = report.promise.validation
    assert v is not None and v.passed and report.promise.held_out_bound is not None
    assert report.promise.held_out_bound.samples == 5 and report.promise.held_out_bound.failures == 0


def test_attribution_falls_back_to_the_cpu_where_the_capture_device_cannot_run_it(monkeypatch):
    """The attribution runs where the capture does; asked for CUDA where there is none (a resumed run that captured
    nothing) or failed by the GPU (the search's sessions hold its memory), it ranks on the CPU, and says the latter."""
    from precision_doctor.control import PhaseEvent
    from precision_doctor.graph.ort_session import GpuRunError
    from precision_doctor.measure import attribution as attribution_module
    from precision_doctor.pipeline import growth

    model = from_proto(_two_branches())
    fmt = get_format("fp16")
    want = local_scores(model, fmt, [_sample(3, unusual=True)], rules=None, group_mb=64)[0]
    heard = []
    no_cuda = growth.Attribution(model, fmt, None, 64.0, heard.append, device="cuda")
    assert no_cuda.scores([_sample(3, unusual=True)]) == want and no_cuda.device == "cpu"
    assert not [e for e in heard if isinstance(e, PhaseEvent)]

    calls = []

    def gpu_fails_once(*a, providers=None, **k):
        calls.append(providers)
        if len(calls) == 1:
            raise GpuRunError("m.onnx: ONNX Runtime's CUDA provider failed at node 'mm' (CUDNN failure)")
        return attribution_module.local_scores(*a, **k)

    monkeypatch.setattr(growth, "local_scores", gpu_fails_once)
    monkeypatch.setattr(growth, "capture_providers", lambda device: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    failed = growth.Attribution(model, fmt, None, 64.0, heard.append, device="auto")
    assert failed.scores([_sample(3, unusual=True)]) == want and failed.device == "cpu" and len(calls) == 2
    said = [e for e in heard if isinstance(e, PhaseEvent)]
    assert [e.phase for e in said] == ["attribute"] and "the GPU failed it" in said[0].detail
