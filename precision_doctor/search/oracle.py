"""The oracle: evaluate a fallback set on every search sample. Memoized, counted, logged, budgeted.

One evaluation is one configuration tried, on however many samples it takes (samples that failed
before go first; the first failure stops it). A memo hit is not an evaluation. Every evaluation is
appended to a JSON-lines checkpoint, so a resumed run replays them without running again.

The samples can grow and the check can get stricter mid-search (`tighten`: counterexamples joining the
working set, a second search at a larger margin): a failing verdict stays one (more samples or a stricter
check cannot make it pass), passing ones are forgotten, and each such step starts a new `round`, which the
checkpoint records, so a resumed run replays each evaluation in the round it was made in.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from precision_doctor.backends.base import Backend
from precision_doctor.backends.registry import on_gpu
from precision_doctor.control import StopToken
from precision_doctor.data.inputs import Sample
from precision_doctor.errors import UserError
from precision_doctor.jsonio import as_float, jsonable
from precision_doctor.measure.checked import checked_runs
from precision_doctor.measure.tolerance import OutputCheck, Tolerance, merge
from precision_doctor.runfiles import RunDir


class BudgetExhausted(Exception):
    """The evaluation or time budget ran out."""


@dataclass(frozen=True)
class Verdict:
    passed: bool
    outputs: dict[str, OutputCheck]
    failed_sample: int | None = None
    elapsed_s: float = 0.0

    @property
    def worst(self) -> tuple[str | None, float]:
        if not self.outputs:
            return None, 0.0
        name, c = max(self.outputs.items(), key=lambda kv: (not kv[1].passed, np.nan_to_num(kv[1].max_abs, nan=np.inf)))
        return name, c.max_abs

    @property
    def tol_used(self) -> float:
        """The largest share of the tolerance any output uses (tolerance.py); NaN if not recorded."""
        vals = [c.tol_used for c in self.outputs.values()]
        return max(vals, key=lambda v: np.nan_to_num(v, nan=-1.0)) if vals else 0.0


@dataclass
class Evaluation:
    """One line of the trajectory."""

    step: int
    fallback: frozenset[str]
    verdict: Verdict
    phase: str
    cost: float
    at_s: float
    round: int = 0

    def to_dict(self) -> dict:
        worst, max_abs = self.verdict.worst
        return {
            "step": self.step,
            "round": self.round,
            "size": len(self.fallback),
            "cost": self.cost,
            "passed": self.verdict.passed,
            "elapsed_s": self.verdict.elapsed_s,
            "at_s": self.at_s,
            "phase": self.phase,
            "fallback": sorted(self.fallback),
            "worst_output": worst,
            "max_abs": max_abs,
            "failed_sample": self.verdict.failed_sample,
            "outputs": {k: v.to_dict() for k, v in self.verdict.outputs.items()},
        }


def _number(x: object) -> bool | int | float:
    """A number of a checkpoint record (non-finite ones are written as strings); ValueError otherwise."""
    value = as_float(x) if isinstance(x, str) else x
    if not isinstance(value, (bool, int, float)):
        raise ValueError(x)
    return value


def _verdict_of(rec: object) -> tuple[frozenset[str], Verdict, str]:
    """A checkpoint record as (fallback, verdict, phase); ValueError saying what is wrong with it."""
    if not isinstance(rec, dict):
        raise ValueError("not a JSON object")
    fallback, passed, outputs = rec.get("fallback"), rec.get("passed"), rec.get("outputs", {})
    if not isinstance(fallback, list) or not all(isinstance(n, str) for n in fallback):
        raise ValueError("'fallback' is not a list of node names")
    if not isinstance(passed, bool):
        raise ValueError("'passed' is not true or false")
    if not isinstance(outputs, dict) or not all(isinstance(v, dict) for v in outputs.values()):
        raise ValueError("'outputs' is not an object of output checks")
    names = {f.name for f in fields(OutputCheck)}
    outs = {}
    for k, v in outputs.items():
        if not set(v) <= names or "passed" not in v or not isinstance(v["passed"], bool):
            raise ValueError(f"output '{k}' is not an output check")
        try:
            values = {f: _number(x) for f, x in v.items()}
        except ValueError:
            raise ValueError(f"output '{k}' holds a value that is not a number") from None
        outs[str(k)] = OutputCheck(**values)
    failed, elapsed, phase = rec.get("failed_sample"), rec.get("elapsed_s", 0.0), rec.get("phase", "resumed")
    if failed is not None and (not isinstance(failed, int) or isinstance(failed, bool)):
        raise ValueError("'failed_sample' is not a sample index")
    if not isinstance(elapsed, (int, float)) or isinstance(elapsed, bool) or not isinstance(phase, str):
        raise ValueError("'elapsed_s' or 'phase' has the wrong type")
    return frozenset(fallback), Verdict(passed, outs, failed, float(elapsed)), phase


def _parse_record(line: str) -> dict | None:
    """One checkpoint record; a record glued onto a torn line is taken from its end; None for a fragment."""
    for start in (0, line.rfind('{"step": ', 1)):
        if start < 0:
            break
        try:
            return json.loads(line[start:])
        except json.JSONDecodeError:
            continue
    return None


@dataclass
class Budget:
    max_evaluations: int | None = None
    time_s: float | None = None


@dataclass
class Oracle:
    """Evaluates fallback sets against FP32 reference outputs under a tolerance."""

    backend: Backend
    samples: Sequence[Sample]
    references: Sequence[dict[str, np.ndarray]]
    tolerance: Tolerance
    cost_of: Callable[[frozenset[str]], float] = len
    budget: Budget = field(default_factory=Budget)
    checkpoint: Path | None = None
    writer: RunDir | None = None  # the run directory the checkpoint is in (its manifest lists it); None: not recorded
    on_evaluation: Callable[[Evaluation], None] | None = None
    stop: StopToken | None = None

    def __post_init__(self):
        self.memo: dict[frozenset[str], Verdict] = {}
        self.trajectory: list[Evaluation] = []
        self.evaluations = 0
        self.memo_hits = 0
        self.order = list(range(len(self.samples)))
        self.started = time.monotonic()
        self.phase = ""
        self.round = 0
        self._pending: dict[int, list[tuple[frozenset[str], Verdict, str]]] = {}
        self._noted = False

    # -- checkpoint --------------------------------------------------------------------------
    def switch_checkpoint(self, path: Path, resume: bool) -> None:
        """Record further evaluations in `path` (a later search on this oracle, under other checks):
        on `resume` its earlier records count as done; otherwise an old file of ours there is removed."""
        self.checkpoint, self._noted, self._pending = path, False, {}
        if resume:
            self.load_checkpoint()
        elif path.exists():
            path.unlink()

    def load_checkpoint(self) -> int:
        """Read earlier evaluations of this run; they count as done. Returns how many. Those of the current
        round (and records without one, from older versions) are replayed now, the failures of earlier rounds
        too, those of later rounds when `tighten` reaches them.

        A last line cut short by a kill (no newline) is cut off the file, so that the next record
        starts a line of its own; a record appended onto such a fragment by an earlier version is
        recovered from the line."""
        if not self.checkpoint or not self.checkpoint.exists():
            return 0
        if not self.checkpoint.is_file():
            raise UserError(f"{self.checkpoint} is not a file (the run's checkpoint must be): move it away to continue")
        data = self.checkpoint.read_bytes()
        if data and not data.endswith(b"\n"):
            data = data[: data.rfind(b"\n") + 1]
            with self.checkpoint.open("r+b") as f:
                f.truncate(len(data))
        for i, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            try:
                rec = _parse_record(line)
                if rec is None:
                    continue  # a fragment: its evaluation runs again
                fb, verdict, phase = _verdict_of(rec)
                r = rec.get("round", self.round)
                if not isinstance(r, int) or isinstance(r, bool) or r < 0:
                    raise ValueError("'round' is not a round number")
            except (ValueError, TypeError, RecursionError) as exc:
                why = "JSON nested too deeply" if isinstance(exc, RecursionError) else exc
                raise UserError(f"{self.checkpoint} line {i} is not a checkpoint record ({why}); it was not written "
                                "by precision-doctor: move the file away to search again") from None
            if r > self.round:
                self._pending.setdefault(r, []).append((fb, verdict, phase))
            elif r == self.round or not verdict.passed:
                self._record(fb, verdict, phase, write=False)
        return self.evaluations

    def tighten(self, samples: list[Sample] | None = None, references: list[dict] | None = None,
                tolerance: Tolerance | None = None) -> None:
        """More samples (checked first from now on) and/or a stricter `tolerance`: passing verdicts are
        forgotten, failing ones stay; a new round starts (a resumed run replays its evaluations here)."""
        samples, references = samples or [], references or []
        if len(samples) != len(references):
            raise ValueError("tighten: one reference per sample")
        start = len(self.samples)
        self.samples = self.samples + list(samples)
        self.references = self.references + list(references)
        self.order = list(range(start, len(self.samples))) + self.order
        if tolerance is not None:
            self.tolerance = tolerance
        self.memo = {k: v for k, v in self.memo.items() if not v.passed}
        self.round += 1
        for fb, verdict, phase in self._pending.pop(self.round, []):
            self._record(fb, verdict, phase, write=False)

    def _record(self, fb: frozenset[str], verdict: Verdict, phase: str, write: bool = True) -> Evaluation:
        self.memo[fb] = verdict
        self.evaluations += 1
        ev = Evaluation(self.evaluations, fb, verdict, phase, float(self.cost_of(fb)), time.monotonic() - self.started,
                        self.round)
        self.trajectory.append(ev)
        if write and self.checkpoint:
            if not self._noted and self.writer is not None:
                self.writer.written(self.checkpoint)  # the run directory's manifest lists it
                self._noted = True
            with self.checkpoint.open("a", encoding="utf-8") as f:
                f.write(json.dumps(jsonable(ev.to_dict())) + "\n")
        if self.on_evaluation:
            self.on_evaluation(ev)
        return ev

    # -- evaluation --------------------------------------------------------------------------
    def evaluate(self, fallback: Iterable[str], phase: str | None = None) -> Verdict:
        fb = frozenset(fallback)
        if fb in self.memo:
            self.memo_hits += 1
            return self.memo[fb]
        if self.stop is not None:
            self.stop.check()
        self.check_budget()
        t0 = time.monotonic()
        runner = self.backend.prepare(fb)
        per_output: dict[str, list[OutputCheck]] = {}
        failed = None
        runs = checked_runs(runner, self.samples, self.references, list(self.order), self.tolerance,
                            overlap=on_gpu(self.backend.name))
        with contextlib.closing(runs):
            for i, checks in runs:
                for k, c in checks.items():
                    per_output.setdefault(k, []).append(c)
                if not all(c.passed for c in checks.values()):
                    failed = i
                    self.order.remove(i)
                    self.order.insert(0, i)  # cheapest to fail first next time
                    break
        merged = {k: merge(v) for k, v in per_output.items()}
        verdict = Verdict(failed is None, merged, failed, time.monotonic() - t0)
        self._record(fb, verdict, phase if phase is not None else self.phase)
        return verdict

    def close(self) -> None:
        """Close the backend: an oracle owns the backend it was given."""
        self.backend.close()

    def passes(self, fallback: Iterable[str], phase: str | None = None) -> bool:
        return self.evaluate(fallback, phase).passed

    def check_budget(self, evaluations: bool = True) -> None:
        """BudgetExhausted when the evaluation budget (unless not `evaluations`: runs that are not evaluations)
        or the time budget is spent."""
        b = self.budget
        if evaluations and b.max_evaluations is not None and self.evaluations >= b.max_evaluations:
            raise BudgetExhausted(f"evaluation budget of {b.max_evaluations} reached")
        if b.time_s is not None and time.monotonic() - self.started > b.time_s:
            raise BudgetExhausted(f"time budget of {b.time_s:g} s reached")

    # -- results -----------------------------------------------------------------------------
    def best(self) -> frozenset[str] | None:
        """The cheapest passing set evaluated so far (fewest nodes on ties)."""
        passing = [fb for fb, v in self.memo.items() if v.passed]
        return min(passing, key=lambda fb: (self.cost_of(fb), len(fb), sorted(fb))) if passing else None

    def known(self, fallback: Iterable[str]) -> Verdict | None:
        return self.memo.get(frozenset(fallback))

    def one_minimal_checked(self, fallback: frozenset[str] | None) -> bool | None:
        """Whether removing any single member of `fallback` was evaluated and failed (None: no set)."""
        if fallback is None:
            return None
        return all((v := self.known(fallback - {x})) is not None and not v.passed for x in fallback)
