"""Several fallback sets at once (a GPU backend's sessions: `parallel_sets`): `Oracle.evaluate_many` gives the
verdicts `evaluate` gives, records them in order and keeps to the budget; `shortest_passing` (the confirmation's
growth) finds the same smallest passing prefix in fewer rounds."""

from __future__ import annotations

import threading

import pytest

from precision_doctor.search.auto import repair, shortest_passing
from precision_doctor.search.oracle import Budget, BudgetExhausted
from tests.test_search import STRATEGIES, Setup


class Sessions:
    """A real backend whose sets run on threads, as a GPU backend's sessions would; records the threads."""

    def __init__(self, backend, width: int):
        self.backend, self.parallel_sets, self.threads = backend, width, set()
        self.name, self.precision = backend.name, backend.precision

    def prepare(self, fallback):
        self.threads.add(threading.current_thread().name)
        return self.backend.prepare(fallback)

    def close(self):
        self.backend.close()


def _trail(oracle):
    return repr([(sorted(e.fallback), e.verdict.passed, e.verdict.failed_sample, e.phase) for e in oracle.trajectory])


def test_evaluate_many_gives_evaluates_verdicts_in_order(tmp_path):
    s = Setup("three_defects", tmp_path, n=6)
    universe = sorted(s.space.universe)
    sets = [frozenset(universe[:k]) for k in (0, 2, len(universe) // 2, len(universe))] + [frozenset()]
    one, many = s.oracle(), s.oracle()
    many.backend = Sessions(s.backend, 3)
    seq = [one.evaluate(fb) for fb in sets]
    par = many.evaluate_many(sets)
    assert [(v.passed, v.failed_sample, repr(v.outputs)) for v in seq] == \
        [(v.passed, v.failed_sample, repr(v.outputs)) for v in par]
    assert _trail(one) == _trail(many) and many.evaluations == 4 and many.memo_hits == one.memo_hits == 1
    assert any(t.startswith("pd-sets") for t in many.backend.threads)


def test_evaluate_many_keeps_to_the_budget(tmp_path):
    s = Setup("three_defects", tmp_path, n=4)
    universe = sorted(s.space.universe)
    o = s.oracle(budget=Budget(max_evaluations=2))
    o.backend = Sessions(s.backend, 4)
    with pytest.raises(BudgetExhausted):
        o.evaluate_many([frozenset(universe[:k]) for k in (1, 2, 3, 4)])
    assert o.evaluations == 2


@pytest.mark.parametrize("width", [2, 3, 4])
def test_shortest_passing_at_once_finds_the_sequential_prefix(tmp_path, width):
    s = Setup("three_defects", tmp_path, n=6)
    order = sorted(s.space.universe)
    make = lambda k: frozenset(order[:k])  # noqa: E731
    one, many = s.oracle(), s.oracle()
    many.backend = Sessions(s.backend, width)
    expected = shortest_passing(one, make, len(order), ("grow", "bisect-grow"))
    assert shortest_passing(many, make, len(order), ("grow", "bisect-grow")) == expected is not None
    assert all(not many.passes(make(k)) for k in range(len(expected)))  # every shorter prefix fails


def test_a_grown_confirmation_is_the_same_with_sessions_at_once(tmp_path):
    """The confirmation's growth (repair without a prune) on other samples: the same answer with sets at once."""
    s = Setup("three_defects", tmp_path, n=4)
    found = STRATEGIES["auto"](s.oracle(), s.space)
    others = s.case.samples(8, seed=123)
    grown = {}
    for width in (1, 3):
        o = s.oracle(samples=others)
        o.backend = Sessions(s.backend, width)
        grown[width] = repair(o, s.space, found, prune_after=False)
    assert grown[1] == grown[3] and grown[1] is not None and found < grown[1]
