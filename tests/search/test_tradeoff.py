"""The trade-off: FP32 cost against the tolerance a user could choose, from the search's own verdicts and a few
prunes at 0.5x, 2x and 4x; every point holds where it says it does."""

from __future__ import annotations

import pytest

from precision_doctor import planted
from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.data.activations import captured_shapes
from precision_doctor.data.workload import Workload
from precision_doctor.graph.cost import cost_model
from precision_doctor.graph.formats import FP16
from precision_doctor.graph.model import from_proto
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline.compare import capture_and_analyse
from precision_doctor.render.pricing import tradeoff_sentence
from precision_doctor.search import STRATEGIES, Oracle
from precision_doctor.search.space import build_space
from precision_doctor.search.tradeoff import seeded_verdict, tradeoff
from precision_doctor.spec import InputSpec


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """The clean MLP at a tolerance FP16 misses: the answer keeps every layer; looser ones need fewer."""
    case = planted.CASES["clean"]()
    model = from_proto(case.model)
    samples = case.samples(3, 0)
    tol = Tolerance(3e-4, 3e-4)
    d = tmp_path_factory.mktemp("tradeoff")
    analysis = capture_and_analyse(Workload(model, samples, InputSpec()), "fp16", tol, d)
    cm = cost_model(model, "fp16", {"x": (2, 32)}, captured_shapes(d / "activations.h5"))
    space = build_space(model, analysis, FP16, "deploy", cost_model=cm)
    ref = ReferenceRunner(model)
    oracle = Oracle(EmulateBackend(model), samples, [ref.run(s) for s in samples], tol, cost_of=space.cost)
    answer = STRATEGIES["auto"](oracle, space)
    return oracle, space, answer


def test_a_verdict_decides_at_a_multiple_what_an_evaluation_there_says(searched):
    oracle, space, _ = searched
    decided = 0
    for m in (0.5, 2.0, 4.0):
        fresh = Oracle(oracle.backend, oracle.samples, oracle.references, oracle.tolerance.scaled(m))
        for fb, v in list(oracle.memo.items()):
            seeded = seeded_verdict(v, m)
            if seeded is not None:
                decided += 1
                assert seeded.passed == fresh.passes(fb), (sorted(fb), m, v.tol_used)
    assert decided >= 5


def test_tradeoff_points_hold_at_their_tolerance_and_cost_less_when_looser(searched):
    oracle, space, answer = searched
    before = oracle.evaluations
    t = tradeoff(oracle, space, answer)
    assert oracle.evaluations == before  # its own oracles: the search's count and memo stay as they were
    assert [p.multiplier for p in t.points] == [0.5, 1.0, 2.0, 4.0]
    assert t.at(1.0).fallback == sorted(answer) and t.at(1.0).evaluations == 0
    shares = [p.fp32_flop_share for p in t.points]
    assert shares == sorted(shares, reverse=True) and shares[-1] < shares[1]
    for p in t.points:
        assert p.found and p.complete
        check = Oracle(oracle.backend, oracle.samples, oracle.references, oracle.tolerance.scaled(p.multiplier))
        assert check.passes(p.fallback), p
        assert p.fp32_flop_share == pytest.approx(space.cost_model.fp32_flop_share(p.fallback))
    assert t.evaluations == sum(p.evaluations for p in t.points)
    front = t.frontier
    assert front and [f.share for f in front] == sorted(f.share for f in front)
    assert all(a.fp32_flop_share > b.fp32_flop_share for a, b in zip(front, front[1:]))
    text = tradeoff_sentence(t)
    assert text.startswith("At 2x this tolerance the answer would keep ") and "instead of 100%" in text


def test_a_tradeoff_budget_gives_an_upper_bound(searched):
    """With no evaluation to spend, the point is the cheapest set the search's verdicts say passes there."""
    oracle, space, answer = searched
    t = tradeoff(oracle, space, answer, multipliers=(2.0,), budget_each=0)
    point = t.at(2.0)
    assert point.found and not point.complete and point.evaluations == 0
    check = Oracle(oracle.backend, oracle.samples, oracle.references, oracle.tolerance.scaled(2.0))
    assert check.passes(point.fallback)
    assert "would keep at most" in tradeoff_sentence(t)


def test_two_shares_that_round_alike_are_told_apart():
    """ddddocr's detector: 37 nodes at 2x keep 12.036% of the FLOPs, the answer's 40 keep 12.046%: the sentence
    said "at most 12% ... instead of 12% (40)"."""
    from precision_doctor.costs import Tradeoff, TradeoffPoint

    t = Tradeoff(points=[TradeoffPoint(1.0, True, 40, 0.12046426, fallback=["a"] * 40),
                         TradeoffPoint(2.0, True, 37, 0.12036261, complete=False, fallback=["a"] * 37)])
    assert tradeoff_sentence(t) == ("At 2x this tolerance the answer would keep at most 12.04% of the FLOPs in FP32 "
                                    "(37 nodes) instead of 12.05% (40).")
