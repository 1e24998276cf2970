"""Search: the set `auto` finds is the certified minimum, holds on held-out samples, and the oracle
counts, memoizes, budgets and resumes as promised."""

from __future__ import annotations

import itertools
import json

import pytest

from precision_doctor import planted
from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.data.workload import Workload
from precision_doctor.graph.formats import FP16
from precision_doctor.graph.model import from_proto
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline.compare import capture_and_analyse
from precision_doctor.runfiles import RunDir
from precision_doctor.search import STRATEGIES, Oracle
from precision_doctor.search.oracle import Budget, BudgetExhausted
from precision_doctor.search.space import build_space
from precision_doctor.spec import InputSpec


class Setup:
    def __init__(self, name, tmp_path, n=4, seed=0):
        self.case = planted.CASES[name]()
        self.model = from_proto(self.case.model)
        self.samples = self.case.samples(n, seed)
        self.tol = Tolerance(self.case.atol, self.case.rtol)
        tmp_path.mkdir(parents=True, exist_ok=True)
        work = Workload(self.model, self.samples, InputSpec())
        self.analysis = capture_and_analyse(work, "fp16", self.tol, tmp_path)
        self.space = build_space(self.model, self.analysis, FP16)
        self.backend = EmulateBackend(self.model)
        self.ref = ReferenceRunner(self.model)

    def oracle(self, samples=None, **kw) -> Oracle:
        samples = samples or self.samples
        return Oracle(self.backend, samples, [self.ref.run(s) for s in samples], self.tol, **kw)


def certify(setup: Setup, found: frozenset[str]) -> None:
    """Every member is needed and, for small models, no smaller set passes; holds on held-out samples."""
    o = setup.oracle()
    assert o.passes(found)
    for x in found:
        assert not o.passes(found - {x}), f"{x} is not needed"
    universe = setup.space.universe
    if len(universe) <= 12:
        for k in range(len(found)):
            for combo in itertools.combinations(universe, k):
                assert not o.passes(combo), f"smaller set passes: {combo}"
    held_out = setup.oracle(samples=setup.case.samples(3, seed=99))
    assert held_out.passes(found)


@pytest.mark.parametrize("name", list(planted.CASES))
def test_auto_finds_certified_minimum(name, tmp_path):
    s = Setup(name, tmp_path)
    o = s.oracle()
    found = STRATEGIES["auto"](o, s.space)
    assert found == s.case.expected
    certify(s, found)
    if name == "clean":
        assert o.evaluations <= 2


def test_auto_beats_segment_search_on_the_suite(tmp_path):
    totals = {"auto": 0, "segment": 0}
    for i, name in enumerate(planted.CASES):
        s = Setup(name, tmp_path / str(i))
        sizes = {}
        for strat in totals:
            o = s.oracle()
            sizes[strat] = len(STRATEGIES[strat](o, s.space))
            totals[strat] += o.evaluations
        assert sizes["auto"] <= sizes["segment"]
    assert totals["auto"] <= 0.6 * totals["segment"], totals


@pytest.mark.parametrize("strategy", ["ddmin", "segment", "linear"])
def test_other_strategies_pass_and_ddmin_is_minimal(strategy, tmp_path):
    s = Setup("cancellation", tmp_path)
    found = STRATEGIES[strategy](s.oracle(), s.space)
    assert s.oracle().passes(found)
    if strategy == "ddmin":
        certify(s, found)


def test_bisect_is_polygraphys_prefix(tmp_path):
    s = Setup("deep_stack_one_bad", tmp_path)
    o = s.oracle()
    found = STRATEGIES["bisect"](o, s.space)
    k = len(found)
    assert found == frozenset(s.space.universe[:k])  # a prefix of the topological order
    assert o.trajectory[0].fallback == frozenset(s.space.universe)  # starts with everything marked
    assert o.passes(found) and not o.passes(s.space.universe[: k - 1])
    rev = STRATEGIES["bisect-reverse"](s.oracle(), s.space)
    assert rev == frozenset(s.space.universe[len(s.space.universe) - len(rev) :])


def test_oracle_memoizes_counts_and_budgets(tmp_path):
    s = Setup("cancellation", tmp_path)
    o = s.oracle(budget=Budget(max_evaluations=2))
    o.passes(())
    o.passes(())
    assert o.evaluations == 1 and o.memo_hits == 1
    o.passes({"sub_offset"})
    with pytest.raises(BudgetExhausted):
        o.passes({"add_offset"})
    assert o.best() is None
    o2 = s.oracle()
    o2.passes({"add_offset", "sub_offset"})
    o2.passes({"add_offset", "sub_offset", "pre"})
    assert o2.best() == {"add_offset", "sub_offset"}


def test_failing_sample_goes_first(tmp_path):
    s = Setup("cancellation", tmp_path)
    o = s.oracle()
    v = o.evaluate(())
    assert not v.passed and o.order[0] == v.failed_sample


def test_checkpoint_resume_repeats_nothing(tmp_path):
    s = Setup("three_defects", tmp_path)
    ck = tmp_path / "search.jsonl"
    first = s.oracle(checkpoint=ck, budget=Budget(max_evaluations=5))
    with pytest.raises(BudgetExhausted):
        STRATEGIES["auto"](first, s.space)
    lines = ck.read_text().splitlines()
    assert len(lines) == 5 and all(json.loads(line)["fallback"] is not None for line in lines)
    resumed = s.oracle(checkpoint=ck)
    assert resumed.load_checkpoint() == 5
    found = STRATEGIES["auto"](resumed, s.space)
    fresh = s.oracle()
    assert found == STRATEGIES["auto"](fresh, s.space)
    assert resumed.evaluations == fresh.evaluations  # the 5 replayed ones were not run again
    assert len(ck.read_text().splitlines()) == fresh.evaluations


def test_cost_flops_prefers_cheap_nodes(tmp_path):
    s = Setup("overflow_island", tmp_path)
    space = build_space(s.model, s.analysis, FP16, cost="flops")
    found = STRATEGIES["auto"](s.oracle(cost_of=space.cost), space)
    assert s.oracle().passes(found)
    assert space.cost(found) <= space.cost(frozenset(s.case.expected))


def test_auto_without_ranking_sweeps_in_regions(tmp_path):
    """With no information in the ranking, auto starts from all-FP32 and converts contiguous runs: the one
    bad layer of a 50-layer stack is found, certified, in far fewer evaluations than one per layer."""
    s = Setup("deep_stack_one_bad", tmp_path)
    flat = build_space(s.model, None, FP16)
    assert not flat.informative and s.space.informative
    o = s.oracle()
    found = STRATEGIES["auto"](o, flat)
    assert found == frozenset(s.case.expected)
    certify(s, found)
    assert o.evaluations <= len(flat.universe) // 2
    assert {e.phase for e in o.trajectory} >= {"all-fp32", "coarse", "sweep"}


def test_repair_carries_an_answer_over_to_a_stricter_oracle(tmp_path):
    """An answer certified on 4 samples fails on 8 others (three_defects, seed 123, as on the GPU):
    `repair` grows it on the new oracle until it passes there, then prunes it to 1-minimal there; an
    answer that already passes is only pruned."""
    from precision_doctor.search.auto import repair

    s = Setup("three_defects", tmp_path)
    found = STRATEGIES["auto"](s.oracle(), s.space)
    strict = s.oracle(samples=s.case.samples(8, seed=123))
    fixed = repair(strict, s.space, found)
    assert not strict.known(found).passed
    assert fixed is not None and strict.passes(fixed)
    assert all(not strict.passes(fixed - {x}) for x in fixed)
    assert {"confirm", "grow"} <= {e.phase for e in strict.trajectory}
    again = s.oracle()
    assert repair(again, s.space, found) == found  # 1-minimal already: nothing to add or remove
    assert {e.phase for e in again.trajectory} == {"confirm", "sweep"}


def test_repair_keeps_an_answer_from_like_kernels_that_passes_and_prunes_one_that_grew(tmp_path):
    """`keep_if_passes` (an answer searched on the GPU's own kernels, confirmed on the real graph): passing as it is,
    it is kept with one evaluation and no prune; failing, it grows and the whole set is pruned to 1-minimal."""
    from precision_doctor.search.auto import repair

    s = Setup("three_defects", tmp_path)
    found = STRATEGIES["auto"](s.oracle(), s.space)
    again = s.oracle()
    assert repair(again, s.space, found, keep_if_passes=True) == found and again.evaluations == 1
    strict = s.oracle(samples=s.case.samples(8, seed=123))
    fixed = repair(strict, s.space, found, keep_if_passes=True)
    assert fixed is not None and not strict.known(found).passed and strict.passes(fixed)
    assert all(not strict.passes(fixed - {x}) for x in fixed)  # members too: the grown set is pruned whole


def test_repair_gives_none_when_nothing_passes_there(tmp_path):
    """On an oracle where not even all-FP32 passes (references of other inputs), repair says so."""
    from precision_doctor.search.auto import repair

    s = Setup("cancellation", tmp_path)
    found = frozenset(s.case.expected)
    others = s.case.samples(len(s.samples), seed=7)
    wrong = Oracle(s.backend, s.samples, [s.ref.run(x) for x in others], s.tol)
    assert repair(wrong, s.space, found) is None
    assert not wrong.known(s.space.universe).passed




def test_repair_keeping_the_start_prunes_only_what_it_added(tmp_path):
    """`keep_start` (a confirmation of a large answer): the searched members stay, what was added to make
    it pass is pruned, and an answer that passes costs one evaluation."""
    from precision_doctor.search.auto import repair

    s = Setup("three_defects", tmp_path)
    found = STRATEGIES["auto"](s.oracle(), s.space)
    strict = s.oracle(samples=s.case.samples(8, seed=123))
    fixed = repair(strict, s.space, found, keep_start=True)
    assert fixed is not None and found < fixed and strict.passes(fixed)
    assert all(not strict.passes(fixed - {x}) for x in fixed - found)
    assert all(found <= e.fallback for e in strict.trajectory)  # no searched member was ever left out there
    again = s.oracle()
    assert repair(again, s.space, found, keep_start=True) == found and again.evaluations == 1


def test_polish_removes_what_a_grown_set_no_longer_needs(tmp_path):
    """A set grown with only its additions pruned (`keep_start`) may hold a member that the additions made
    redundant: `polish` tries every member's removal and leaves a 1-minimal set that still passes."""
    from precision_doctor.search.auto import polish, repair

    s = Setup("three_defects", tmp_path)
    found = STRATEGIES["auto"](s.oracle(), s.space)
    padded = found | frozenset(sorted(set(s.space.universe) - found)[:3])  # members it does not need
    o = s.oracle()
    slim = polish(o, s.space, padded)
    assert o.passes(slim) and slim <= padded and all(not o.passes(slim - {x}) for x in slim)
    assert len(slim) <= len(found) + 1 and o.one_minimal_checked(slim)
    strict = s.oracle(samples=s.case.samples(8, seed=123))
    grown = repair(strict, s.space, found, keep_start=True)
    assert grown is not None and polish(strict, s.space, grown) <= grown


def test_confirmation_keeps_the_searched_members_and_prunes_only_what_it_added(tmp_path):
    """The confirm backend (here the emulator on 8 other samples, where the answer fails) keeps the searched members,
    grows the answer and prunes only what it added; the report says so."""
    from precision_doctor.outcome import Outcome, RunStatus
    from precision_doctor.pipeline import confirmation
    from precision_doctor.pipeline.context import StepContext
    from precision_doctor.spec import RunSpec

    s = Setup("three_defects", tmp_path / "cap")
    found = STRATEGIES["auto"](s.oracle(), s.space)
    others = s.case.samples(8, seed=123)
    spec = RunSpec(model="m.onnx").with_settings({"tolerance.atol": s.case.atol, "tolerance.rtol": s.case.rtol,
                                                  "search.margin": 0.0})
    ctx = StepContext(spec=spec, run_dir=RunDir(tmp_path), space=s.space)
    confirmed = confirmation.confirm(ctx, Outcome(RunStatus.COMPLETE, None, found), backend=s.backend, samples=others,
                                     refs=[s.ref.run(x) for x in others], budget=Budget(None, None))
    status, final, rep = confirmed.outcome.status, confirmed.outcome.found, confirmed.report
    assert status == "complete" and rep.passed and not rep.searched_answer_passed and rep.pruned_searched is False
    assert found < final and rep.to_json()["pruned_searched"] is False and rep.one_minimal_checked is None
    strict = s.oracle(samples=others)
    assert all(not strict.passes(final - {x}) for x in final - found)


def test_confirmation_grows_by_the_failing_samples_attribution(tmp_path):
    """With the run's attribution (pipeline/growth.py) the confirmation adds only nodes the failing samples' own local
    errors name, and prunes what it added."""
    from precision_doctor.outcome import Outcome, RunStatus
    from precision_doctor.pipeline import confirmation
    from precision_doctor.pipeline.context import StepContext
    from precision_doctor.pipeline.growth import Attribution
    from precision_doctor.search.attributed import growth_names
    from precision_doctor.spec import RunSpec

    s = Setup("three_defects", tmp_path / "cap")
    found = STRATEGIES["auto"](s.oracle(), s.space)
    others = s.case.samples(8, seed=123)
    spec = RunSpec(model="m.onnx").with_settings({"tolerance.atol": s.case.atol, "tolerance.rtol": s.case.rtol,
                                                  "search.margin": 0.0})
    ctx = StepContext(spec=spec, run_dir=RunDir(tmp_path), space=s.space)
    attribution = Attribution(s.model, FP16, None, 64.0)
    confirmed = confirmation.confirm(ctx, Outcome(RunStatus.COMPLETE, None, found), backend=s.backend, samples=others,
                                     refs=[s.ref.run(x) for x in others], budget=Budget(None, None),
                                     attribution=attribution)
    final, rep = confirmed.outcome.found, confirmed.report
    assert rep.passed and not rep.searched_answer_passed and found < final and attribution.samples >= 1
    named = growth_names(s.space, attribution.scores([x for x in others]))
    assert final - found <= named
    assert any(e.phase == "attribute" for e in rep.trajectory)


def test_confirmation_on_every_search_sample_at_once_needs_no_second_round(tmp_path):
    """`every_sample` (a GPU confirm backend, where a trial's cost is its session, not its samples): every search
    sample is in the confirm oracle from the start, so the answer that passes there passes them all and the
    confirmation's loop ends in its first round with nothing left to check; without it, the loop checks the others."""
    from precision_doctor.outcome import Outcome, RunStatus
    from precision_doctor.pipeline import confirmation
    from precision_doctor.pipeline.context import StepContext
    from precision_doctor.pipeline.search_loop import RoundLog, start_loop
    from precision_doctor.spec import RunSpec

    s = Setup("three_defects", tmp_path / "cap")
    found = STRATEGIES["auto"](s.oracle(), s.space)
    search = s.case.samples(12, seed=123)  # samples the searched answer was not searched on: it fails some
    refs = [s.ref.run(x) for x in search]
    spec = RunSpec(model="m.onnx").with_settings({"tolerance.atol": s.case.atol, "tolerance.rtol": s.case.rtol,
                                                  "search.margin": 0.0})
    rounds = {}
    for every in (False, True):
        loop = start_loop(s.backend, search, refs, s.tol, RoundLog(None, False), lambda idx, start: ([], []))
        ctx = StepContext(spec=spec, run_dir=RunDir(tmp_path), space=s.space)
        work, work_refs = loop.pool.working(loop.working)
        got = confirmation.confirm(ctx, Outcome(RunStatus.COMPLETE, None, found), backend=s.backend, samples=work,
                                   refs=work_refs, budget=Budget(None, None), loop=loop, every_sample=every)
        assert got.report.passed and got.loop is not None and got.loop.verified
        assert Oracle(s.backend, search, refs, s.tol).passes(got.outcome.found)
        assert got.report.samples == len(search)
        assert (tmp_path / ("confirm-every.jsonl" if every else "confirm.jsonl")).exists()
        rounds[every] = [(r.round, r.checked) for r in got.loop.rounds]
    assert rounds[True] == [(0, 0)] and rounds[False][0][1] > 0


def test_the_confirmations_oracle_is_chosen_by_what_a_trial_costs(tmp_path):
    """`every_sample` None (a GPU confirm backend): a trial of the searched answer is timed there and every search
    sample is in the oracle from the start only when a new session costs at least the other samples' runs; the
    report keeps the measurement and says why; a resumed run keeps the choice its checkpoint shows, unmeasured."""
    from precision_doctor.measure.trial_cost import TrialCost
    from precision_doctor.outcome import Outcome, RunStatus
    from precision_doctor.pipeline import confirmation
    from precision_doctor.pipeline.context import StepContext
    from precision_doctor.pipeline.search_loop import RoundLog, start_loop
    from precision_doctor.render.wording import _oracle_choice
    from precision_doctor.spec import RunSpec

    assert TrialCost(session_s=5.0, sample_s=0.05, others=40).every_sample  # cuDNN's algorithm search per session
    assert not TrialCost(session_s=0.4, sample_s=0.11, others=44).every_sample  # a lean transformer session
    from precision_doctor.pipeline.diagnose import _oracle_choice_on  # timed only where a trial is a session kept by set
    assert [_oracle_choice_on(b) for b in ("ort-cuda", "trt", "ort-cuda-gated", "emulate")] == [None, True, True, False]
    s = Setup("three_defects", tmp_path / "cap")
    found = STRATEGIES["auto"](s.oracle(), s.space)
    search = s.case.samples(12, seed=123)
    refs = [s.ref.run(x) for x in search]
    spec = RunSpec(model="m.onnx").with_settings({"tolerance.atol": s.case.atol, "tolerance.rtol": s.case.rtol,
                                                  "search.margin": 0.0})
    for resume in (False, True):
        loop = start_loop(s.backend, search, refs, s.tol, RoundLog(None, False), lambda idx, start: ([], []))
        ctx = StepContext(spec=spec, run_dir=RunDir(tmp_path), space=s.space, resume=resume)
        work, work_refs = loop.pool.working(loop.working)
        got = confirmation.confirm(ctx, Outcome(RunStatus.COMPLETE, None, found), backend=s.backend, samples=work,
                                   refs=work_refs, budget=Budget(None, None), loop=loop, every_sample=None)
        assert got.report.passed and Oracle(s.backend, search, refs, s.tol).passes(got.outcome.found)
        cost = got.report.trial_cost
        if not resume:
            assert cost is not None and cost.others == len(search) - len(loop.working) and cost.sample_s > 0
            every = cost.every_sample
            assert (tmp_path / ("confirm-every.jsonl" if every else "confirm.jsonl")).exists()
            said = _oracle_choice(got.report)
            assert ("from the start (a new session cost" if every else "working set (the 8 other") in said, said
            assert got.report.every_sample == every and got.report.others_checked == (None if every else True)
        else:  # the same choice, read from its checkpoint, not timed again
            assert cost is None and got.report.every_sample == every
            assert (got.loop.rounds[0].checked == 0) == every
            assert _oracle_choice(got.report).endswith("from the start." if every else "every other search sample.")


def test_confirmation_keeps_an_answer_that_passes_as_it_is(tmp_path):
    """An answer that passes on the confirm backend as it is stays as it is: the confirmation grows answers that fail
    there, it never prunes what the search kept (`pruned_added` None: nothing was added)."""
    from precision_doctor.outcome import Outcome, RunStatus
    from precision_doctor.pipeline import confirmation
    from precision_doctor.pipeline.context import StepContext
    from precision_doctor.spec import RunSpec

    s = Setup("three_defects", tmp_path / "cap")
    found = STRATEGIES["auto"](s.oracle(), s.space)
    padded = found | frozenset(sorted(set(s.space.universe) - found)[:1])  # passes as is, one member it need not keep
    spec = RunSpec(model="m.onnx").with_settings({"tolerance.atol": s.case.atol, "tolerance.rtol": s.case.rtol,
                                                  "search.margin": 0.0})
    ctx = StepContext(spec=spec, run_dir=RunDir(tmp_path), space=s.space)
    got = confirmation.confirm(ctx, Outcome(RunStatus.COMPLETE, None, padded), backend=s.backend,
                               samples=s.samples, refs=[s.ref.run(x) for x in s.samples], budget=Budget(None, None))
    assert got.report.searched_answer_passed and got.outcome.found == padded
    assert got.report.pruned_searched is False and got.report.pruned_added is None
