"""The states a run, a batch row and a service job end in, and the outcome a diagnose step hands on.

Every status is a `str` enum: its value is what report.json, summary.csv/json and the service's JSON have
always held ("complete", "passed", "done", ...), so JSON and f-strings show the value unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum


class _Value(str, Enum):
    """A str enum whose str() and format() are its value (as `enum.StrEnum`, which Python 3.10 lacks)."""

    def __str__(self) -> str:
        return str(self.value)


class RunStatus(_Value):
    """How a run, or one search of it, ended: report.json's `status` (and a confirmation's, a knob
    search's); a service Result's status is one of these too."""

    COMPLETE = "complete"
    NO_SOLUTION = "no_solution"  # the search completed and no set meets the tolerance
    BUDGET_EXHAUSTED = "budget_exhausted"  # the best passing set so far is reported
    INTERRUPTED = "interrupted"  # stopped (Ctrl-C, a StopToken); the best passing set so far is reported
    SKIPPED = "skipped"  # a step with nothing to try (the knob search on a backend without knobs)
    STOPPED = "stopped"  # a service job stopped outside the search: no report

    @property
    def ended_early(self) -> bool:
        """A search that did not run to its end (budget or stop)."""
        return self in (RunStatus.BUDGET_EXHAUSTED, RunStatus.INTERRUPTED)


class RowStatus(_Value):
    """A batch summary row's `status`: a finished run's verdict, or where the model stands."""

    PASSED = "passed"
    FAILED = "failed"
    NO_SOLUTION = "no_solution"
    BUDGET_EXHAUSTED = "budget_exhausted"
    INTERRUPTED = "interrupted"
    ERROR = "error"  # the run raised (bad input, a crash): `message` says why
    PENDING = "pending"  # not run yet
    RUNNING = "running"  # being diagnosed (a batch_entry.json's row while its model runs)

    @classmethod
    def of_run(cls, status: RunStatus, passed: bool) -> RowStatus:
        """A finished run's row status: complete runs are passed or failed, the others keep their status."""
        if status == RunStatus.COMPLETE:
            return cls.PASSED if passed else cls.FAILED
        return cls(str(status))


class JobState(_Value):
    """A service job's `state`."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


class Decider(_Value):
    """Which check decided whether the answer holds on new inputs (pipeline/heldout_policy.py `decider`)."""

    HELD_OUT = "held_out"  # held-out samples of the user's data that no search saw
    PROBE = "probe"  # (reports before it was removed) the perturbed-copy probe
    SEARCHED = "searched"  # none: the answer is checked on the searched samples only


class Growth(_Value):
    """What grew the answer from a smaller one the run found first (report.json's `answers.grown_by`)."""

    COUNTEREXAMPLES = "counterexamples"  # search samples outside the working set failed it (search/cegis.py)
    PREDICTION = "prediction"  # (reports before it was removed) the perturbed-copy probe predicted it would not hold
    CONFIRMATION = "confirmation"  # the confirm backend (the GPU's real kernels) failed it: grown there
    HELD_OUT = "held_out"  # held-out samples failed it: repaired with them (grown by their attribution)


@dataclass(frozen=True)
class Outcome:
    """Where a diagnose run stands after a step: its status, why (None: nothing to say) and the answer so far
    (None: no passing set)."""

    status: RunStatus
    reason: str | None
    found: frozenset[str] | None

    @property
    def complete(self) -> bool:
        return self.status == RunStatus.COMPLETE

    @property
    def answered(self) -> bool:
        return self.found is not None

    def but(self, **changes) -> Outcome:
        """This outcome with `changes` (status, reason, found)."""
        return replace(self, **changes)


SUMMARY_COLUMNS = (
    "model", "status", "passed", "fallback_size", "fp32_flop_share", "evaluations", "elapsed_s", "report", "message",
    "verdict",
)


@dataclass(frozen=True)
class SummaryRow:
    """One model's row of a batch summary (summary.csv/json/html) and of its `batch_entry.json`. `verdict`: the
    report's label, as every front end says it (results/verdict.py; "" without a report); `model_hash`: the model
    file's hash the report names (finished runs only); `reused`: finished by an earlier batch (or a worker of one),
    not diagnosed in this call (never written)."""

    model: str
    status: RowStatus
    passed: bool = False
    fallback_size: int | None = None
    fp32_flop_share: float | None = None
    evaluations: int | None = None
    elapsed_s: float | None = None
    report: str = ""
    message: str = ""
    verdict: str = ""
    model_hash: str | None = None
    reused: bool = False

    def columns(self) -> dict:
        """The summary's columns (SUMMARY_COLUMNS), in order."""
        return {k: getattr(self, k) for k in SUMMARY_COLUMNS}

    def to_json(self) -> dict:
        """batch_entry.json's `row`: the columns, and the model's hash where a report named one."""
        return {**self.columns(), **({"model_hash": self.model_hash} if self.model_hash is not None else {})}

    @classmethod
    def from_json(cls, data: object) -> SummaryRow | None:
        """A row as `to_json` wrote it (absent columns take their defaults); None for anything else."""
        if not isinstance(data, dict) or not isinstance(data.get("model"), str):
            return None
        try:
            status = RowStatus(data.get("status"))
        except ValueError:
            return None
        return cls(data["model"], status, **{k: data[k] for k in (*SUMMARY_COLUMNS[2:], "model_hash") if k in data})
