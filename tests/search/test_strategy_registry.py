"""search/__init__.py's StrategyInfo: the search loop reads what a strategy can do from its record, not its name."""

from __future__ import annotations

from precision_doctor import planted
from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.model import from_proto
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline.search_loop import grow_from, polish_for
from precision_doctor.pipeline.spec_check import validate_spec
from precision_doctor.search import STRATEGIES, STRATEGY_INFO, Oracle, StrategyInfo
from precision_doctor.search.auto import polish
from precision_doctor.search.space import build_space
from precision_doctor.spec import RunSpec


def test_only_the_strategies_that_grow_from_an_answer_do():
    assert {n for n, s in STRATEGY_INFO.items() if s.grows_from_answer} == {"auto"}
    assert all(STRATEGIES[n] is s.fn for n, s in STRATEGY_INFO.items())
    assert grow_from("bisect", frozenset({"a"})) is STRATEGIES["bisect"]  # searches again
    assert polish_for("auto") is polish and polish_for("bisect") is None


def test_a_new_strategy_is_one_entry(monkeypatch):
    """A strategy that grows from an answer gets its own growth and polish in the loop's later rounds, and the
    settings accept its name: nothing in the pipeline names it."""
    grown, polished = [], []

    def grow(previous):
        grown.append(previous)
        return STRATEGIES["linear"]

    def my_polish(oracle, space, current):
        polished.append(current)
        return current

    monkeypatch.setitem(STRATEGY_INFO, "mine", StrategyInfo(STRATEGIES["bisect"], grow=grow, polish=my_polish))
    assert grow_from("mine", frozenset({"n"})) is STRATEGIES["linear"] and grown == [frozenset({"n"})]
    assert polish_for("mine") is my_polish
    assert validate_spec(RunSpec("m.onnx").with_settings({"search.strategy": "mine"}))


def test_the_growth_of_auto_keeps_the_previous_answer():
    case = planted.overflow_island()
    model = from_proto(case.model)
    samples = case.samples(2)
    with EmulateBackend(model) as backend, ReferenceRunner(model) as ref:
        oracle = Oracle(backend, samples, [ref.run(s) for s in samples], Tolerance(case.atol, case.rtol))
        start = frozenset({next(n.name for n in model.candidates if n.name not in case.expected)})
        found = grow_from("auto", start)(oracle, build_space(model, None, get_format("fp16")))
        assert found is not None and start <= found and oracle.passes(found)
