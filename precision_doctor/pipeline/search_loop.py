"""The counterexample-guided search loop (search/cegis.py) as a run runs it: the working set's samples and
perturbed copies, the rounds, and their record for `--resume`.

A round: the strategy searches on the oracle's working set; its answer is checked on the other search samples,
hardest first, until a few fail (3, or as many as the working set holds: `cegis.per_round`); those join the
working set (`Oracle.tighten`) and the next round continues from the answer where the strategy grows from one
(`StrategyInfo.grow`, `auto`: grown by the nodes the failing samples' own error is attributed to until it passes,
then what it added pruned: pipeline/growth.py; other strategies search again, with the failures memoized). The
loop ends when an answer passes every search sample, or after cegis.MAX_ROUNDS rounds, or when the budget or a stop
ends the search (then the answer is not verified on every search sample, and the report says so). The same loop
serves the first search, the repair with failing held-out samples and the confirmation (`search`: which).

ROUNDS_LOG records the samples' scores and every finished round (its working set, answer and counterexamples), so
that a resumed run does not score or check again what it already did; the oracle's checkpoint records each
evaluation's round, so it is replayed in the round it was made in.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from precision_doctor.backends.base import Backend
from precision_doctor.control import StopToken
from precision_doctor.data.inputs import Sample
from precision_doctor.jsonio import as_float, jsonable
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.outcome import Outcome, RunStatus
from precision_doctor.pipeline.growth import Attribution, grow_by_attribution
from precision_doctor.pipeline.strategy import StrategyFn, run_strategy
from precision_doctor.render.numbers import counted
from precision_doctor.results.report import SearchRound, SearchRounds
from precision_doctor.runfiles import RunDir
from precision_doctor.search import STRATEGY_INFO, Oracle, Polish
from precision_doctor.search.cegis import (
    COUNTEREXAMPLES,
    MAX_ROUNDS,
    START,
    Check,
    SampleScore,
    counterexamples,
    hardest,
    hardness_order,
    per_round,
    score_samples,
)
from precision_doctor.search.oracle import BudgetExhausted
from precision_doctor.search.space import SearchSpace

ROUNDS_LOG = "search_rounds.jsonl"


@dataclass
class SamplePool:
    """The search samples (any Sequence: loaded on demand), their FP32 references, the search-sample indices
    hardest first (`order`), and `copies(indices)`: the perturbed copies of those samples and their references
    (the oracle checks them beside the samples; none with `search.augment` 0)."""

    samples: Sequence[Sample]
    refs: Sequence[dict]
    order: list[int]
    copies: Callable[[list[int]], tuple[list[Sample], list[dict]]] = lambda idx: ([], [])

    def working(self, indices: list[int]) -> tuple[list[Sample], list[dict]]:
        """The samples `indices` names and their copies, with references: what the oracle checks for them."""
        copies, copy_refs = self.copies(indices)
        return [self.samples[i] for i in indices] + copies, [self.refs[i] for i in indices] + copy_refs

    def outside(self, working: Sequence[int]) -> list[int]:
        """The search samples outside the working set, hardest first."""
        inside = set(working)
        return [i for i in self.order if i not in inside]


class RoundLog:
    """ROUNDS_LOG of a run directory: the scores, then one JSON line per finished round. Without `resume` an
    earlier file of ours is removed; with it, its records are what the loop does not repeat."""

    def __init__(self, path: Path | None, resume: bool, writer: RunDir | None = None):
        self.path, self.writer, self._noted = path, writer, False
        self.records: list[dict] = []
        if path is None:
            return
        if resume and path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    self.records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill: that round runs again
        elif path.exists():
            path.unlink()

    def scores(self) -> list[SampleScore] | None:
        rec = next((r for r in self.records if "scores" in r), None)
        if rec is None:
            return None
        return [SampleScore(s["index"], float(as_float(s["share"])), s["worst_output"], s["group"]) for s in rec["scores"]]

    def write_scores(self, scores: list[SampleScore]) -> None:
        self._append({"scores": [asdict(s) for s in scores]})

    def recorded(self, search: str, index: int) -> SearchRound | None:
        rec = next((r for r in self.records if r.get("search") == search and r.get("round") == index), None)
        return None if rec is None else SearchRound(**rec)

    def write(self, rnd: SearchRound) -> None:
        self._append(asdict(rnd))

    def _append(self, record: dict) -> None:
        if self.path is None:
            return
        if not self._noted and self.writer is not None:
            self.writer.written(self.path)
            self._noted = True
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(jsonable(record)) + "\n")


@dataclass
class Loop:
    """The loop's state across its searches: the pool, the working set (search-sample indices in the oracle),
    the rounds so far, and the record; `user_samples`: how many of the oracle's samples are the user's (the
    working set's, and held-out ones a second search was given), the others being perturbed copies."""

    pool: SamplePool
    working: list[int]
    log: RoundLog
    user_samples: int = -1
    captured: list[int] = field(default_factory=list)  # the search samples the capture ran on
    scores: list[SampleScore] | None = None  # each search sample's score (None: 4 or fewer, not scored)
    rounds: list[SearchRound] = field(default_factory=list)
    verified: bool = False
    failing: int = 0
    stopped: str | None = None
    checked: int = 0

    def __post_init__(self) -> None:
        if self.user_samples < 0:
            self.user_samples = len(self.working)

    def record(self) -> SearchRounds:
        return SearchRounds(search_samples=len(self.pool.samples), start=min(START, len(self.pool.samples)),
                            rounds=list(self.rounds), verified=self.verified, failing=self.failing,
                            stopped=self.stopped, checked=self.checked, captured=list(self.captured))

    def first_answer(self, search: str = "first") -> frozenset[str] | None:
        """The answer of the first round of `search` (None: none)."""
        rnd = next((r for r in self.rounds if r.search == search and r.round == 0), None)
        return None if rnd is None or rnd.answer is None else frozenset(rnd.answer)


def start_loop(backend: Backend, samples: Sequence[Sample], refs: Sequence[dict], tol: Tolerance, log: RoundLog,
               copies: Callable[[list[int], list[int]], tuple[list[Sample], list[dict]]],
               stop: StopToken | None = None) -> Loop:
    """The loop's start: with more than cegis.START search samples, each is scored once on `backend` (or the
    scores are read back from `log` on resume) and the working set is the START hardest, spread over shape
    groups and worst outputs; with fewer, every sample, in order (the search of 2-4 samples is as it was).
    The scores (`Loop.scores`) also choose the capture's samples (data.samples.capture_choice).
    `copies(indices, start)`: the perturbed copies of those search samples, made alike for the start's samples
    and for counterexamples that join later (`start`: the starting working set, which fixes their ranges)."""
    n = len(samples)
    scores = None
    if n <= START:
        order = working = list(range(n))
    else:
        scores = log.scores()
        if scores is None or len(scores) != n:
            scores = score_samples(backend, samples, refs, tol, check=None if stop is None else stop.check)
            log.write_scores(scores)
        order, working = hardness_order(scores), hardest(scores, START)
    start = list(working)
    return Loop(SamplePool(samples, refs, order, lambda idx: copies(idx, start)), list(working), log,
                scores=scores)


def grow_from(strategy: str | StrategyFn, previous: frozenset[str], attribution: Attribution | None = None,
              failing: Sequence[int] = ()) -> StrategyFn:
    """How a round after the first continues from the previous answer: a strategy that grows from an answer
    (`StrategyInfo.grow`: `auto`) grows it until it passes and prunes what it added (the loop's `polish` later owes
    the rest): by the nodes its failing samples (`failing`, the oracle's indices) are attributed to where the run
    measures attributions (pipeline/growth.py), else as the strategy grows (`auto`: along the search's ranking);
    another strategy searches again (its failures stay memoized)."""
    if not isinstance(strategy, str):
        return strategy
    info = STRATEGY_INFO[strategy]
    if info.grow is None:
        return info.fn
    if attribution is not None:
        return grow_by_attribution(attribution, previous, failing)
    return info.grow(previous)


def polish_for(strategy: str | StrategyFn) -> Polish | None:
    """What an answer grown by `grow_from(strategy, ...)` owes once it passes every search sample (`StrategyInfo.polish`;
    `auto`: single-member removals over all of it, since it pruned only what each round added)."""
    return STRATEGY_INFO[strategy].polish if isinstance(strategy, str) else None


Grow = Callable[[frozenset[str], Sequence[int]], StrategyFn]  # (the answer, the oracle's failing samples) -> strategy


def run_loop(loop: Loop, oracle: Oracle, space: SearchSpace, first: str | StrategyFn,
             grow: Grow, *, search: str = "first",
             stop: StopToken | None = None, polish: Polish | None = None) -> Outcome:
    """Search on the oracle (its samples: `loop.working` and their copies, and whatever else it was given), check
    each answer on the other search samples, add the failing ones and search on (`grow` from the answer and the
    oracle's indices of the samples that failed it) until an
    answer passes every search sample, MAX_ROUNDS rounds end it, or the budget or a stop does. `polish`: what an
    answer that `grow` (or a `first` that is not a strategy's name) made owes once it passes every search sample
    (the removals `grow` did not try); a slimmer answer replaces it only if it too passes every search sample."""
    loop.verified, loop.failing, loop.stopped = False, 0, None
    t0 = time.monotonic()
    owed = polish is not None and not isinstance(first, str)
    outcome = run_strategy(oracle, space, first, stop)
    for index in range(MAX_ROUNDS):
        spent = sum(1 for e in oracle.trajectory if e.round == oracle.round)  # replayed ones too, on resume
        if outcome.found is None or not outcome.complete:
            loop.rounds.append(_round(search, index, loop.working, outcome.found, spent, 0, [], t0))
            return outcome
        rnd = loop.log.recorded(search, index)
        if rnd is None or rnd.answer != sorted(outcome.found):
            try:  # the last round's counterexamples join nothing: 3 say that it fails
                limit = per_round(len(loop.working)) if index + 1 < MAX_ROUNDS else COUNTEREXAMPLES
                found = _check(oracle, loop.pool, outcome.found, loop.working, stop, limit)
            except BudgetExhausted as exc:
                loop.stopped = f"{exc} while the answer was checked on the other search samples"
                loop.rounds.append(_round(search, index, loop.working, outcome.found, spent, 0, [], t0))
                return outcome.but(status=RunStatus.BUDGET_EXHAUSTED, reason=f"{loop.stopped}; it passes the "
                                   f"{counted(len(loop.working), 'sample')} it was searched on, the others were not all checked")
            except KeyboardInterrupt:
                if stop is not None:
                    stop.handled()
                loop.stopped = "interrupted while the answer was checked on the other search samples"
                loop.rounds.append(_round(search, index, loop.working, outcome.found, spent, 0, [], t0))
                return outcome.but(status=RunStatus.INTERRUPTED, reason=f"{loop.stopped}; resume continues there")
            rnd = _round(search, index, loop.working, outcome.found, spent, found.checked, found.failing, t0)
            loop.log.write(rnd)
        loop.rounds.append(rnd)
        loop.checked += rnd.checked
        if not rnd.counterexamples:
            loop.verified = True
            if owed:
                return _polished(loop, oracle, space, outcome, polish, stop)
            return outcome
        if index + 1 == MAX_ROUNDS:
            loop.failing = len(rnd.counterexamples)
            loop.stopped = (f"the counterexample-guided search reached its {MAX_ROUNDS} rounds: the answer still fails "
                            f"{counted(loop.failing, 'search sample')} outside its working set")
            return Outcome(RunStatus.BUDGET_EXHAUSTED, loop.stopped, outcome.found)
        samples, refs = loop.pool.working(rnd.counterexamples)
        first_new = len(oracle.samples)
        oracle.tighten(samples, refs)  # the counterexamples first, then their perturbed copies
        loop.working = loop.working + rnd.counterexamples
        loop.user_samples += len(rnd.counterexamples)
        t0 = time.monotonic()
        failing = list(range(first_new, first_new + len(rnd.counterexamples)))
        outcome = run_strategy(oracle, space, grow(outcome.found, failing), stop)
        owed = polish is not None
    raise AssertionError("not reached: the last round returns")


def _polished(loop: Loop, oracle: Oracle, space: SearchSpace, verified: Outcome, polish: Polish | None,
              stop: StopToken | None) -> Outcome:
    """The verified answer polished (`polish` on the oracle, run as a strategy runs) and the slimmer answer checked
    on the other search samples: it replaces the verified one only if it passes every one of them. A budget or a
    stop that ends either leaves the verified answer, with the status that ended it."""
    found = verified.found
    assert found is not None and polish is not None
    polished = run_strategy(oracle, space, lambda o, sp: polish(o, sp, found), stop)
    why = "while the answer that passes every search sample was polished: it is reported as it was"
    if not polished.complete:
        return verified.but(status=polished.status, reason=f"{polished.reason} ({why})")
    if polished.found is None or polished.found == found:
        return verified
    try:
        slim = _check(oracle, loop.pool, polished.found, loop.working, stop, limit=1)  # one failure decides
    except BudgetExhausted as exc:
        return verified.but(status=RunStatus.BUDGET_EXHAUSTED, reason=f"{exc} ({why})")
    except KeyboardInterrupt:
        if stop is not None:
            stop.handled()
        return verified.but(status=RunStatus.INTERRUPTED, reason=f"interrupted ({why}); resume continues there")
    loop.checked += slim.checked
    return polished if not slim.failing else verified


def _check(oracle: Oracle, pool: SamplePool, found: frozenset[str], working: list[int],
           stop: StopToken | None, limit: int) -> Check:
    """The answer on the search samples outside the working set (hardest first), at the oracle's tolerance, until
    `limit` of them fail."""
    def check() -> None:
        if stop is not None:
            stop.check()
        oracle.check_budget(evaluations=False)  # a check is not an evaluation: only the time budget ends it

    return counterexamples(oracle.backend, found, pool.samples, pool.refs, pool.outside(working), oracle.tolerance,
                           limit, check)


def _round(search: str, index: int, working: list[int], found: frozenset[str] | None, evaluations: int,
           checked: int, failing: list[int], t0: float) -> SearchRound:
    return SearchRound(round=index, working=list(working), answer=None if found is None else sorted(found),
                       evaluations=evaluations, checked=checked, counterexamples=list(failing),
                       seconds=time.monotonic() - t0, search=search)
