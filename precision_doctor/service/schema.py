"""What the API says about a job, typed: its progress, its result and the job itself. The daemon builds
these and sends `to_json()`; the client reads the JSON back with `from_json()`. Nothing here imports
FastAPI or httpx, so both sides use it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from precision_doctor.outcome import JobState, RunStatus

STATES = tuple(JobState)
TERMINAL = tuple(s for s in JobState if s.terminal)


def _known(cls: type, data: Any) -> dict[str, Any]:
    """The keys of `data` that are fields of `cls` (a newer daemon may send more)."""
    if not isinstance(data, dict):
        return {}
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass
class CaptureProgress:
    """`done` of `total` tensors (or nodes) of a capture stage (reference, lowp, local, fixed) written."""

    stage: str
    done: int
    total: int


@dataclass
class Progress:
    """Where a job stands: its phase (queued, claimed, load, capture, reference, search, validate, confirm,
    artifacts; then done, failed or cancelled), evaluations so far, the size of the smallest passing set so
    far, the last evaluation, the capture's progress and the seconds spent per phase."""

    phase: str = "queued"
    evaluations: int = 0
    best_size: int | None = None
    search_phase: str | None = None
    last_size: int | None = None
    last_passed: bool | None = None
    capture: CaptureProgress | None = None
    phase_s: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Progress:
        values = _known(cls, data)
        cap = values.get("capture")
        values["capture"] = CaptureProgress(**_known(CaptureProgress, cap)) if isinstance(cap, dict) else None
        return cls(**values)


@dataclass
class Result:
    """What a job's run came to (report.json has the rest). `status` is the report's (complete,
    no_solution, budget_exhausted, interrupted) or "stopped": cut off outside the search. `capture_reused`:
    the capture (and its analysis) came from the daemon's cache; `capture_s`: seconds of the capture phase
    (capture and analysis, or the copy). `verdict`, `label`, `tone`, `headline`: the report's verdict (an
    `outcome.Verdict`), its label and tone (pass, warn, fail) and headline sentence, as render/wording.py says them
    (None: no report)."""

    status: RunStatus | str  # a RunStatus (a newer daemon's unknown status stays a string)
    passed: bool
    fallback_size: int | None = None
    fp32_flop_share: float | None = None
    evaluations: int | None = None
    elapsed_s: float | None = None
    reason: str | None = None
    capture_reused: bool = False
    capture_s: float | None = None
    verdict: str | None = None
    label: str | None = None
    tone: str | None = None
    headline: str | None = None

    def to_json(self) -> dict:
        return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: Any) -> Result | None:
        values = _known(cls, data)
        if "status" not in values or "passed" not in values:
            return None
        if values["status"] in tuple(RunStatus):
            values["status"] = RunStatus(values["status"])
        return cls(**values)


@dataclass
class JobView:
    """A job as GET /jobs/{id} shows it (`spec`: its settings, the RunSpec's JSON, in the detailed view;
    `files_removed`: the retention's note once its run directory and uploads are gone)."""

    id: str
    state: str
    name: str
    created: str | None = None
    started: str | None = None
    finished: str | None = None
    attempts: int = 0
    worker_pid: int | None = None
    cancel_requested: bool = False
    progress: Progress = field(default_factory=Progress)
    result: Result | None = None
    error: str | None = None
    links: dict[str, str] = field(default_factory=dict)
    spec: dict | None = None
    files_removed: str | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["progress"] = self.progress.to_json()
        out["result"] = self.result.to_json() if self.result else None
        if self.spec is None:
            del out["spec"]
        return out

    @classmethod
    def from_json(cls, data: Any) -> JobView:
        values = _known(cls, data)
        values["progress"] = Progress.from_json(values.get("progress"))
        values["result"] = Result.from_json(values.get("result"))
        return cls(**values)
