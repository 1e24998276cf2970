"""`search.knobs`: try the answer's backend under its knob configurations (backends/knobs.py).

The plan is `knobs.knob_plan`: the answer under the default configuration, every configuration alone
(all low precision), then every configuration with the answer less one node. Each configuration has its
own backend and its own `Oracle` (memoized, counted, checkpointed in `knobs/<configuration>.jsonl`,
stopped by the run's token) over every sample, search and held-out, at the search tolerance. Trials
that cannot beat the cheapest passing one found so far are not evaluated. The cheapest passing trial
(fewest FP32 nodes, the default configuration first among equals) is the result; when it needs fewer
nodes than the answer, it replaces the answer and its settings go into the emitted commands.
"""

from __future__ import annotations

import contextlib
import re
import time

from precision_doctor.backends import knobs
from precision_doctor.backends.base import Backend
from precision_doctor.backends.registry import knob_family
from precision_doctor.control import PhaseEvent, notify, stopped_by
from precision_doctor.data.inputs import Sample
from precision_doctor.graph.model import Model
from precision_doctor.outcome import RunStatus
from precision_doctor.pipeline.context import KnobOutcome, StepContext
from precision_doctor.pipeline.strategy import evaluation_events, remaining, user_share
from precision_doctor.results.report import Confirm, KnobsResult, KnobTrial
from precision_doctor.search import Oracle
from precision_doctor.search.oracle import Budget, BudgetExhausted, Verdict
from precision_doctor.words import counted

KNOBS_DIR = "knobs"


def budget_after(budget: Budget, oracle: Oracle, confirmed: Confirm | None) -> Budget:
    """What the search and the confirmation left of the run's budget."""
    left = remaining(budget, oracle)
    spent = confirmed.evaluations or 0 if confirmed is not None else 0
    if left.max_evaluations is None:
        return left
    return Budget(max(left.max_evaluations - spent, 0), left.time_s)


def checkpoint_name(config: knobs.KnobConfig) -> str:
    """The checkpoint file of a configuration, in KNOBS_DIR."""
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", config.label) + ".jsonl"


class _Oracles:
    """One oracle per configuration, made when first needed; the default configuration reuses the run's
    backend, the others get a backend of their own (closed by `owned`)."""

    def __init__(self, ctx: StepContext, family: str, backend: Backend, model: Model, samples: list[Sample],
                 refs: list[dict], owned: contextlib.ExitStack):
        self.ctx, self.family, self.backend, self.model = ctx, family, backend, model
        self.samples, self.refs, self.owned = samples, refs, owned
        self.dir = ctx.out_dir / KNOBS_DIR
        self.by_config: dict[knobs.KnobConfig, Oracle] = {}
        self.dir.mkdir(exist_ok=True)
        if not ctx.resume:
            for old in self.dir.glob("*.jsonl"):  # our own files from an earlier forced run (nobody else's)
                if ctx.run_dir.ours(old):
                    old.unlink()

    def __getitem__(self, config: knobs.KnobConfig) -> Oracle:
        if config not in self.by_config:
            backend = self.backend if config.is_default else self.owned.enter_context(contextlib.closing(
                knobs.knob_backend(self.family, self.model, self.ctx.spec.precision, self.model.outputs, config,
                                   level=getattr(self.backend, "level", None))))
            oracle = Oracle(backend, self.samples, self.refs, self.ctx.spec.search_tolerance,
                            cost_of=self.ctx.space.cost, checkpoint=self.dir / checkpoint_name(config),
                            writer=self.ctx.run_dir,
                            on_evaluation=evaluation_events(self.ctx.progress), stop=self.ctx.stop)
            if self.ctx.resume:
                oracle.load_checkpoint()
            self.by_config[config] = oracle
        return self.by_config[config]

    @property
    def evaluations(self) -> int:
        return sum(o.evaluations for o in self.by_config.values())

    @property
    def memo_hits(self) -> int:
        return sum(o.memo_hits for o in self.by_config.values())


def search_knobs(
    ctx: StepContext, answer: list[str], *, backend: Backend, model: Model, samples: list[Sample], refs: list[dict],
    budget: Budget, owned: contextlib.ExitStack, copies: int = 0,
) -> KnobOutcome:
    """Run the knob plan around `answer` (node names in graph order) on `backend`'s family (configurations'
    own backends are closed by `owned`); see the module docstring. `budget` is what the run has left
    (evaluations over all configurations, seconds); `copies`: how many of `samples` are the search's perturbed
    copies (not counted as the user's samples)."""
    family = knob_family(backend.name)
    if family is None:
        note = f"the {backend.name} backend has no knobs: nothing was tried"
        result = KnobsResult(backend.name, [], list(answer), status=RunStatus.SKIPPED, note=note, answer=list(answer))
        return KnobOutcome(result, frozenset(answer), None, None, RunStatus.COMPLETE)
    spec, stop = ctx.spec, ctx.stop
    configs = knobs.knob_configs(family)
    plan = knobs.knob_plan(answer, configs)
    notify(ctx.progress, PhaseEvent("knobs", f"{counted(len(plan), 'trial')} of {counted(len(configs), 'configuration')} on "
                                             f"{backend.name}"))
    oracles = _Oracles(ctx, family, backend, model, samples, refs, owned)
    started = time.monotonic()
    evaluated: list[tuple[knobs.Trial, Verdict]] = []
    status, reason = RunStatus.COMPLETE, None
    try:
        for trial in plan:
            best = knobs.best_trial([(t, v.passed) for t, v in evaluated])
            if best is not None and len(trial.fallback) >= len(best.fallback):
                continue  # it cannot be cheaper than a passing trial already found
            _check_budget(budget, oracles.evaluations, started)
            oracle = oracles[trial.knobs]
            evaluated.append((trial, oracle.evaluate(trial.fallback, phase=f"knobs {trial.knobs.label}: {trial.why}")))
    except BudgetExhausted as exc:
        status = RunStatus.BUDGET_EXHAUSTED
        reason = f"{exc} during the knob search; the cheapest passing trial so far is reported"
    except KeyboardInterrupt:
        if stop is not None:
            stop.handled()
        status = RunStatus.INTERRUPTED
        reason = f"interrupted {stopped_by(stop)} during the knob search; the cheapest passing trial so far is reported"
    verdicts = {(t.knobs, t.fallback): v for t, v in evaluated}
    best = knobs.best_trial([(t, v.passed) for t, v in evaluated])
    if best is None or len(best.fallback) >= len(answer):
        config, final = configs[0], frozenset(answer)
        verdict = verdicts.get((config, final))
    else:
        config, final, verdict = best.knobs, best.fallback, verdicts[(best.knobs, best.fallback)]
    trials = []
    for t in plan:
        v = verdicts.get((t.knobs, t.fallback))
        trials.append(KnobTrial(t.knobs.label, len(t.fallback), t.why, None if v is None else v.passed,
                                user_share(spec, v) if v is not None and v.passed else None))
    order = [n.name for n in model.nodes if n.name in final]
    result = KnobsResult(
        backend=backend.name, configurations=[c.label for c in configs], searched_answer=list(answer), status=status,
        note=knobs.ORT_CPU_NOTE if family == knobs.ORT_CPU else None, samples=len(samples) - copies,
        evaluations=oracles.evaluations, memo_hits=oracles.memo_hits, trials=trials,
        best=config.label if verdict is not None and verdict.passed else None,
        best_settings=dict(config.settings) if verdict is not None and verdict.passed else {},
        answer=order, tolerance_used=user_share(spec, verdict) if verdict is not None and verdict.passed else None,
    )
    return KnobOutcome(result, final, config, verdict, status, reason)


def _check_budget(budget: Budget, evaluations: int, started: float) -> None:
    if budget.max_evaluations is not None and evaluations >= budget.max_evaluations:
        raise BudgetExhausted(f"evaluation budget reached ({budget.max_evaluations} left for the knob search)")
    if budget.time_s is not None and time.monotonic() - started > budget.time_s:
        raise BudgetExhausted(f"time budget reached ({budget.time_s:g} s left for the knob search)")
