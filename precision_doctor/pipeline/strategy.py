"""Running a search strategy on an oracle until it ends, its budget runs out, or the run is stopped; and
what a report keeps of its evaluations (trajectory rows, shares of the user's tolerance)."""

from __future__ import annotations

import time
from collections.abc import Callable

from precision_doctor.control import EvaluationEvent, ProgressSink, StopToken, notify, stopped_by
from precision_doctor.outcome import Outcome, RunStatus
from precision_doctor.results.report import TrajectoryRow
from precision_doctor.search import STRATEGY_INFO, Oracle
from precision_doctor.search.oracle import Budget, BudgetExhausted, Evaluation, Verdict
from precision_doctor.search.space import SearchSpace
from precision_doctor.spec import RunSpec, SearchSpec

Found = frozenset[str] | None
StrategyFn = Callable[[Oracle, SearchSpace], Found]


def run_strategy(oracle: Oracle, space: SearchSpace, strategy: str | StrategyFn,
                 stop: StopToken | None = None) -> Outcome:
    """The outcome of a strategy (a name in STRATEGY_INFO, or the strategy itself); a budget and a stop end it
    early with the best passing set found so far."""
    try:
        found = (STRATEGY_INFO[strategy].fn if isinstance(strategy, str) else strategy)(oracle, space)
        return Outcome(RunStatus.COMPLETE, None, found)
    except BudgetExhausted as exc:
        best = oracle.best()
        return Outcome(RunStatus.BUDGET_EXHAUSTED, f"{exc}; {_so_far(best)}", best)
    except KeyboardInterrupt:  # Ctrl-C, or the run's StopToken (control.Stopped)
        if stop is not None:
            stop.handled()
        best = oracle.best()
        return Outcome(RunStatus.INTERRUPTED, f"interrupted {stopped_by(stop)}; {_so_far(best)}", best)


def _so_far(best: Found) -> str:
    return "the best passing set found so far is reported" if best is not None else "no set had passed yet"


def budget_of(search: SearchSpec) -> Budget:
    return Budget(search.max_evaluations, search.time_budget)


def remaining(budget: Budget, oracle: Oracle) -> Budget:
    """What a search left of the evaluation and time budget (the confirmation spends the rest)."""
    return Budget(
        None if budget.max_evaluations is None else max(budget.max_evaluations - oracle.evaluations, 0),
        None if budget.time_s is None else max(budget.time_s - (time.monotonic() - oracle.started), 0.0),
    )


def evaluation_events(progress: ProgressSink | None) -> Callable[[Evaluation], None] | None:
    """An oracle's `on_evaluation` hook that reports each evaluation to `progress` as an EvaluationEvent."""
    if progress is None:
        return None
    best: dict[int, int] = {}  # round -> the smallest set passing in it (on its working set)

    def on_evaluation(ev: Evaluation) -> None:
        if ev.verdict.passed:
            best[ev.round] = min(best.get(ev.round, len(ev.fallback)), len(ev.fallback))
        notify(progress, EvaluationEvent(ev.step, ev.phase, len(ev.fallback), ev.verdict.passed, best.get(ev.round),
                                         ev.round))

    return on_evaluation


def user_share(spec: RunSpec, verdict: Verdict | None) -> float | None:
    """A search-oracle verdict's share of the tolerance, as a share of the user's (unscaled) one."""
    return verdict.tol_used * (1.0 - spec.search.margin) if verdict else None


def trajectory_row(e: Evaluation) -> TrajectoryRow:
    """An evaluation as a row of the report's trajectory (its per-output checks left out)."""
    return TrajectoryRow(**{k: v for k, v in e.to_dict().items() if k != "outputs"})
