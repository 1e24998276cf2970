"""What the API says about a job, typed: its progress, its result and the job itself. The daemon builds
these and sends `to_json()`; the client reads the JSON back with `from_json()`; both through `JOB_JSON`
(codec.py), whose hooks at the end of this module make the reader lenient where a newer daemon may differ.
Nothing here imports FastAPI or httpx, so both sides use it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from precision_doctor.codec import Codec, Hook, from_json
from precision_doctor.outcome import JobState, RunStatus

STATES = tuple(JobState)
TERMINAL = tuple(s for s in JobState if s.terminal)


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
    far, the last evaluation, the capture's progress, the seconds spent per phase and the warnings the run gave as it
    went (`warnings`, in words: a tolerance below the format's rounding at the outputs, a large capture), which the
    CLI prints before its search and a job's followers see here."""

    phase: str = "queued"
    evaluations: int = 0
    best_size: int | None = None
    search_phase: str | None = None
    search_round: int = 0  # the counterexample-guided round (0: the first); best_size is that round's
    last_size: int | None = None
    last_passed: bool | None = None
    capture: CaptureProgress | None = None
    phase_s: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # seconds the current phase had run when this was written: a step that sends no event (a large model's load, a
    # capture's sample) still changes the job every `workers.BEAT_S`, so its event stream is never silent for long
    phase_for_s: float | None = None

    def to_json(self) -> dict:
        return JOB_JSON.to_json(self)

    @classmethod
    def from_json(cls, data: Any, path: str = "progress") -> Progress:
        """BadValue (codec.py) naming the key of a malformed value."""
        return JOB_JSON.from_json(cls, data, path)


@dataclass
class Result:
    """What a job's run came to (report.json has the rest). `status` is the report's (complete,
    no_solution, budget_exhausted, interrupted) or "stopped": cut off outside the search. `capture_reused`:
    the capture (and its analysis) came from the daemon's cache; `capture_s`: seconds of the capture phase
    (capture and analysis, or the copy). `verdict`, `qualifiers`, `label`, `tone`, `headline`: the report's verdict
    (results/verdict.py: its status and qualifiers), its label and tone (pass, warn, fail) and headline, as
    render/brief.py says them (None: no report)."""

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
    qualifiers: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return JOB_JSON.to_json(self)

    @classmethod
    def from_json(cls, data: Any, path: str = "result") -> Result | None:
        """None for JSON without a status and passed; BadValue (codec.py) naming the key of a malformed value."""
        return JOB_JSON.from_json(cls, data, path)


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
    spec: dict[str, Any] | None = None
    files_removed: str | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def to_json(self) -> dict:
        return JOB_JSON.to_json(self)

    @classmethod
    def from_json(cls, data: Any, path: str = "") -> JobView:
        """BadValue (codec.py) naming the key of a malformed value or of a missing id, state or name."""
        return JOB_JSON.from_json(cls, data, path)


# -- the API's exceptions to the plain field mapping (codec.py) ------------------------------------------


def _status_in(data: Any, path: str) -> RunStatus | str:
    """A RunStatus; a newer daemon's status that is not one stays a string."""
    value = from_json(str, data, path)
    return RunStatus(value) if value in RunStatus._value2member_map_ else value


def _finite_or_null(result: Result, data: dict) -> dict:
    """A Result's non-finite numbers are written as null."""
    return {k: None if isinstance(v := getattr(result, k), float) and not math.isfinite(v) else x
            for k, x in data.items()}


JOB_JSON = Codec({
    RunStatus | str: Hook(decode=_status_in),
    Progress: Hook(otherwise=Progress),  # not an object: no progress yet
    CaptureProgress: Hook(otherwise=lambda: None),
    Result: Hook(out=_finite_or_null, otherwise=lambda: None),  # no status and passed: no result
    JobView: Hook(out=lambda j, d: {k: v for k, v in d.items() if k != "spec" or j.spec is not None}),
})
