"""Issue 20: the counterexample-guided search on a planted model whose second defect shows on a few samples only,
the working set's choice, resume of its rounds, and the two answers in the report."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_doctor import api
from precision_doctor.outcome import Growth
from precision_doctor.results.report import Report
from precision_doctor.search.cegis import SampleScore, hardest, hardness_order
from precision_doctor.spec import InputSpec, RunSpec, SearchSpec, Tolerance

WIDTH = 8
DEFECT = (4, 6, 8)  # samples whose second defect shows (6 is held out: the default split of 12 holds out 2, 6, 10)


def _two_paths() -> onnx.ModelProto:
    """Two cancellations: y0 = (x0 + 2048) - 2048 (FP16's spacing at 2048 is 2: an error of up to 1 on every
    sample) and y1 = (x1 + 256) - 256 (spacing 0.25: no error where x1 is a multiple of 0.25, 0.1 where it is
    0.1). At atol 0.01 the all-FP16 model fails every sample on y0, and the samples in DEFECT also on y1, where
    they use less of the tolerance than the others do on y0: the hardest samples do not show the second
    defect."""
    c = [numpy_helper.from_array(np.array(2048.0, np.float32), "big"),
         numpy_helper.from_array(np.array(256.0, np.float32), "small")]
    nodes = [helper.make_node("Add", ["x0", "big"], ["a0"], name="add_big"),
             helper.make_node("Sub", ["a0", "big"], ["y0"], name="sub_big"),
             helper.make_node("Add", ["x1", "small"], ["a1"], name="add_small"),
             helper.make_node("Sub", ["a1", "small"], ["y1"], name="sub_small")]
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "two_paths", [vi("x0", TensorProto.FLOAT, [1, WIDTH]), vi("x1", TensorProto.FLOAT, [1, WIDTH])],
                          [vi("y0", TensorProto.FLOAT, [1, WIDTH]), vi("y1", TensorProto.FLOAT, [1, WIDTH])], c)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def _sample(i: int) -> dict[str, np.ndarray]:
    """x0 = an even integer + e (the error of rounding x0 + 2048 to FP16 is e): e in 0.5-0.9 on the ordinary
    samples, 0.25 on the DEFECT ones; x1 = 0.1 on the DEFECT samples, multiples of 0.25 elsewhere (few distinct
    values: perturbed copies leave x1 as it is)."""
    rng = np.random.default_rng(i)
    e = 0.25 if i in DEFECT else 0.5 + 0.4 * (i % 5) / 4
    x0 = 2 * rng.integers(0, 40, (1, WIDTH)) + e
    x1 = np.full((1, WIDTH), 0.1 if i in DEFECT else 0.25 * (i % 3))
    return {"x0": x0.astype(np.float32), "x1": x1.astype(np.float32)}


def _spec(tmp_path, n: int = 12, **search) -> RunSpec:
    tmp_path.mkdir(parents=True, exist_ok=True)
    model = tmp_path / "two_paths.onnx"
    onnx.save(_two_paths(), str(model))
    files = []
    for i in range(n):
        files.append(tmp_path / f"s{i:02d}.npz")
        np.savez(files[-1], **_sample(i))
    return RunSpec(str(model), inputs=InputSpec(files=tuple(map(str, files))), tolerance=Tolerance(atol=0.01, rtol=0.0),
                   search=SearchSpec(**{"cost": "nodes", **search})).with_settings({"backends.backend": "emulate"})


def test_the_working_set_takes_the_hardest_spread_over_shapes_and_outputs():
    s = [SampleScore(0, 5.0, "a", "g1"), SampleScore(1, 9.0, "a", "g1"), SampleScore(2, 1.0, "b", "g1"),
         SampleScore(3, 7.0, "a", "g2"), SampleScore(4, float("nan"), "a", "g1"), SampleScore(5, 8.0, "a", "g1")]
    assert hardness_order(s) == [4, 1, 5, 3, 0, 2]  # NaN (a NaN output) is the hardest
    assert hardest(s, 3) == [4, 3, 2]  # one of each bucket (shape group, worst output) before a second of any
    assert hardest(s, 5) == [4, 3, 2, 1, 5] and hardest(s, 10) == [4, 3, 2, 1, 5, 0]


def test_scores_survive_the_round_log_with_non_finite_shares(tmp_path):
    from precision_doctor.pipeline.search_loop import RoundLog

    scores = [SampleScore(0, float("inf"), "y", "x:1x8"), SampleScore(1, float("nan"), None, "x:1x8"),
              SampleScore(2, 0.5, "y", "x:1x9")]
    RoundLog(tmp_path / "r.jsonl", resume=False).write_scores(scores)
    back = RoundLog(tmp_path / "r.jsonl", resume=True).scores()
    assert hardness_order(back) == hardness_order(scores) == [0, 1, 2] and back[0] == scores[0] and back[2] == scores[2]
    assert RoundLog(tmp_path / "r.jsonl", resume=False).scores() is None and not (tmp_path / "r.jsonl").exists()


def test_counterexamples_join_the_working_set_and_the_answer_grows(tmp_path):
    """12 samples, 3 held out (2, 6, 10), 9 searched: the first round searches on the 4 hardest, whose answer
    (path 0 in FP32) fails the DEFECT samples among the other search samples; they join and the second round's
    answer keeps both paths in FP32, which passes every search sample and the held-out ones. Both answers are in
    the report: the smaller one failed 2 search samples and 1 of the 3 held-out ones."""
    rep = api.diagnose(_spec(tmp_path), tmp_path / "run")
    r = rep.search.rounds
    first = [x for x in r.rounds if x.search == "first"]
    assert r.search_samples == 9 and r.start == 4 and r.verified and r.failing == 0 and len(first) == 2
    assert len(r.captured) == 8  # the capture ran on the 8 hardest
    search_ids = [i for i in range(12) if i not in (2, 6, 10)]  # search-sample index -> file index
    assert not {search_ids[i] for i in first[0].working} & set(DEFECT)
    assert first[0].answer == ["add_big", "sub_big"] and sorted(search_ids[i] for i in first[0].counterexamples) == [4, 8]
    assert first[1].working == first[0].working + first[0].counterexamples and first[1].counterexamples == []
    assert first[1].checked == 9 - len(first[1].working)  # checked on every other search sample
    assert rep.passed and rep.answer.fallback_nodes == ["add_big", "sub_big", "add_small", "sub_small"]
    a = rep.promise.answers
    assert a is not None and a.grown_by == [Growth.COUNTEREXAMPLES]
    assert a.smaller.nodes == ["add_big", "sub_big"] and a.smaller.search_failures == 2
    assert (a.smaller.held_out.samples, a.smaller.held_out.failures) == (3, 1)
    assert a.safer.size == 4 and (a.safer.held_out.samples, a.safer.held_out.failures) == (3, 0)
    assert rep.promise.held_out_bound.failures == 0 and rep.promise.held_out_bound.samples == 3
    assert rep.promise.held_out_choice.source == "split" and rep.promise.held_out_choice.samples == 3
    # the oracle never held more than the working set (and its copies): 6 of the 9 search samples at most
    assert max(t.failed_sample or 0 for t in rep.search.trajectory) < 6 * 4
    # the second round pruned only what it added (each removal of an earlier member failed in the first round
    # already, and failures stay known): the answer is 1-minimal on the working set
    assert rep.search.one_minimal_checked is True


def test_cegis_answers_round_trip_and_render(tmp_path):
    rep = api.diagnose(_spec(tmp_path), tmp_path / "run")
    data = json.loads((tmp_path / "run" / "report.json").read_text())
    assert data["promise"]["answers"]["grown_by"] == ["counterexamples"] and data["promise"]["decided_by"] == "held_out"
    assert data["search"]["rounds"]["rounds"][0]["counterexamples"] \
        and data["promise"]["held_out_bound"]["method"].startswith("one-sided")
    back = Report.from_json(data)
    assert back.promise.answers == rep.promise.answers and back.search.rounds == rep.search.rounds
    assert back.promise.held_out_bound == rep.promise.held_out_bound and back.promise.decided_by == rep.promise.decided_by
    md = (tmp_path / "run" / "report.md").read_text()
    html = (tmp_path / "run" / "report.html").read_text()
    for text in (md, html):
        assert "2 nodes" in text and "held-out" in text and "Counterexample" in text


def test_a_few_samples_search_as_before(tmp_path):
    """With 4 or fewer search samples the loop is the search of before: one round, every sample in it, in order."""
    rep = api.diagnose(_spec(tmp_path, n=3, augment=0), tmp_path / "run")
    r = rep.search.rounds
    assert [x.working for x in r.rounds] == [[0, 1, 2]] and r.verified and r.rounds[0].checked == 0
    assert rep.promise.answers is None and rep.promise.held_out_choice.source == "none"
    assert not (tmp_path / "run" / "search_rounds.jsonl").exists() or \
        "scores" not in (tmp_path / "run" / "search_rounds.jsonl").read_text()


@pytest.mark.parametrize("where", ["round 1", "check"])
def test_a_cegis_run_stopped_mid_loop_resumes_to_the_same_answer(tmp_path, where):
    """Stopped in the second round's search (or while the first answer is checked on the other samples), the
    run resumes: the scores and the finished round are read back, the checkpointed evaluations are replayed in
    their rounds, and it ends where an uninterrupted run ends, with the same evaluations."""
    from precision_doctor.control import EvaluationEvent, PhaseEvent, StopToken
    from precision_doctor.pipeline import search_loop

    whole = api.diagnose(_spec(tmp_path / "whole"), tmp_path / "whole" / "run")
    step = next(t.step for t in whole.search.trajectory if t.round == 1)
    spec = _spec(tmp_path)
    stop = StopToken()
    real = search_loop.counterexamples

    def cut_in_check(*args, **kwargs):
        stop.stop()
        return real(*args, **kwargs)

    def sink(event):
        if where == "round 1" and isinstance(event, EvaluationEvent) and event.step == step:
            stop.stop()
    if where == "check":
        search_loop.counterexamples = cut_in_check
    try:
        cut = api.diagnose(spec, tmp_path / "run", progress=sink, stop=stop)
    finally:
        search_loop.counterexamples = real
    assert cut.status == "interrupted"
    log = (tmp_path / "run" / "search_rounds.jsonl").read_text()
    assert '"scores"' in log
    scored = []
    real_score = search_loop.score_samples
    search_loop.score_samples = lambda *a, **k: scored.append(1) or real_score(*a, **k)
    try:
        resumed = api.diagnose(spec, tmp_path / "run", resume=True, progress=lambda e: isinstance(e, PhaseEvent))
    finally:
        search_loop.score_samples = real_score
    assert not scored  # read back, not scored again
    assert resumed.status == "complete" and resumed.answer.fallback_nodes == whole.answer.fallback_nodes
    assert resumed.search.evaluations == whole.search.evaluations
    assert [(x.round, x.working, x.answer, x.counterexamples) for x in resumed.search.rounds.rounds] == \
        [(x.round, x.working, x.answer, x.counterexamples) for x in whole.search.rounds.rounds]


def test_checks_beside_the_next_run_change_nothing(tmp_path, monkeypatch):
    """The overlap used on a GPU (measure/checked.py), forced here on the CPU for every oracle, score and
    counterexample check: the same evaluations, in the same order, with the same verdicts, and the same answer."""
    from precision_doctor.measure import checked, headroom
    from precision_doctor.search import cegis, oracle

    plain = api.diagnose(_spec(tmp_path / "a"), tmp_path / "a" / "run")
    overlapped = []
    real = checked.checked_runs

    def forced(runner, samples, refs, order, tol, overlap=False, before_run=None):
        overlapped.append(1)
        return real(runner, samples, refs, order, tol, True, before_run)

    for module in (oracle, cegis, headroom):
        monkeypatch.setattr(module, "checked_runs", forced)
    beside = api.diagnose(_spec(tmp_path / "b"), tmp_path / "b" / "run")
    assert len(overlapped) > 10

    def trace(rep: Report) -> list:
        return [(sorted(t.fallback), t.passed, t.failed_sample, t.phase) for t in rep.search.trajectory]

    assert trace(beside) == trace(plain) and len(trace(plain)) > 5
    assert beside.answer.fallback_nodes == plain.answer.fallback_nodes and beside.passed == plain.passed


class _Needs:
    """A backend whose sample `i` (its input "i") passes where node f"n{need}" is in FP32, `need` being the sample's
    own node for i >= 4 and n0 for the first four: every other sample fails an answer found on the first four."""

    name, precision = "emulate", "fp16"

    def prepare(self, fallback):
        class Runner:
            def run(self, feeds, outputs=None):
                i = int(feeds["i"][0])
                return {"y": np.array([0.0 if f"n{i if i >= 4 else 0}" in fallback else 1.0], np.float32)}

        return Runner()

    def close(self):
        pass


def test_a_check_takes_as_many_counterexamples_as_the_working_set_holds(monkeypatch):
    """16 search samples fail the first answer, each needing a node of its own: each round's check collects 3 of
    them or as many as the working set holds, so the working set doubles (4, 8, 16, 20) and the loop ends in 4
    rounds where 3 a round would take 7. With 2 rounds at most, the last round's check stops at 3: nothing joins."""
    from precision_doctor.measure.tolerance import Tolerance as Tol
    from precision_doctor.pipeline.search_loop import Loop, RoundLog, SamplePool, run_loop
    from precision_doctor.search import Oracle
    from precision_doctor.search.space import SearchSpace

    samples = [{"i": np.array([i], np.float32)} for i in range(20)]
    refs = [{"y": np.zeros(1, np.float32)} for _ in samples]
    loop = Loop(SamplePool(samples, refs, list(range(20))), [0, 1, 2, 3], RoundLog(None, False))
    oracle = Oracle(_Needs(), samples[:4], refs[:4], Tol(atol=0.5, rtol=0.0))

    def needed(o, sp):  # what the oracle's samples need: an answer that passes them all
        return frozenset(f"n{int(s['i'][0]) if int(s['i'][0]) >= 4 else 0}" for s in o.samples)

    out = run_loop(loop, oracle, SearchSpace(universe=[f"n{i}" for i in range(20)]), needed, lambda prev, f: needed)
    assert out.complete and loop.verified and out.found == frozenset(f"n{i}" for i in [0, *range(4, 20)])
    assert [len(r.working) for r in loop.rounds] == [4, 8, 16, 20]
    assert [len(r.counterexamples) for r in loop.rounds] == [4, 8, 4, 0]

    from precision_doctor.pipeline import search_loop

    monkeypatch.setattr(search_loop, "MAX_ROUNDS", 2)
    loop = Loop(SamplePool(samples, refs, list(range(20))), [0, 1, 2, 3], RoundLog(None, False))
    out = run_loop(loop, Oracle(_Needs(), samples[:4], refs[:4], Tol(atol=0.5, rtol=0.0)),
                   SearchSpace(universe=[f"n{i}" for i in range(20)]), needed, lambda prev, f: needed)
    assert not out.complete and [len(r.counterexamples) for r in loop.rounds] == [4, 3] and loop.failing == 3
