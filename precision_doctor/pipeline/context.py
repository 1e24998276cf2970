"""What the steps of one diagnose run share: `StepContext` (what every step reads) and `RunContext` (the whole
run: workload, backends, references, the oracle), plus `Findings`, what the steps after the search found (the
held-out check's `HeldOutCheck`, the knob search's `KnobOutcome`, ...)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from precision_doctor.backends import knobs
from precision_doctor.backends.base import Backend, SessionHolder
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.backends.registry import BackendPlan, knob_family
from precision_doctor.control import PhaseEvent, ProgressSink, StopToken, notify
from precision_doctor.data.inputs import Sample
from precision_doctor.data.workload import Workload
from precision_doctor.measure.analysis import Analysis
from precision_doctor.measure.floor import RoundingFloor
from precision_doctor.measure.spread import KernelSpread
from precision_doctor.outcome import Decider, Outcome, RunStatus
from precision_doctor.pipeline.growth import Attribution
from precision_doctor.pipeline.search_loop import Loop
from precision_doctor.results.report import Confirm, HeldOutChoice, KnobsResult, OtherRuntime, TwoAnswers, Validation
from precision_doctor.runfiles import RunDir
from precision_doctor.search import Oracle
from precision_doctor.search.oracle import Budget, Verdict
from precision_doctor.search.space import SearchSpace
from precision_doctor.spec import RunSpec


@dataclass(kw_only=True)
class StepContext:
    """What every step reads: the settings (`spec`: those the verdict is checked at), the run directory (`run_dir`:
    what writes there records each file in its manifest through it), the search space, and how the caller follows
    (`progress`), stops (`stop`) and resumes (`resume`) the run."""

    spec: RunSpec
    run_dir: RunDir
    space: SearchSpace
    progress: ProgressSink | None = None
    stop: StopToken | None = None
    resume: bool = False

    @property
    def out_dir(self) -> Path:
        """The run directory's path."""
        return self.run_dir.root


@dataclass(frozen=True)
class Backends:
    """The run's backends (opened and closed by the run): what `plan_backends` decided, the search backend
    and the confirm backend (None: none)."""

    plan: BackendPlan
    search: Backend
    confirm: Backend | None

    def pause(self) -> None:
        """Pause the sessions of the backends that can make them again (`SessionHolder.pause`): through a capture,
        which makes its own."""
        for b in (self.search, self.confirm):
            if isinstance(b, SessionHolder):
                b.pause()

    @property
    def forms_to_time(self) -> bool:
        """Whether `choose_form` has forms to time (on a GPU: seconds of it)."""
        from precision_doctor.backends.ort_gated import OrtGatedBackend

        return isinstance(self.search, OrtGatedBackend) and bool(self.search.untimed)

    def choose_form(self, sample: Sample, progress: ProgressSink | None, quiet=None) -> None:
        """The search graph's form timed on `sample` and the faster kept, where its backend has forms to choose from
        (`OrtGatedBackend.choose_form`: on a GPU; `quiet` held while a form is timed), said in the reference phase's
        progress."""
        from precision_doctor.backends.ort_gated import FORM_WORDS, OrtGatedBackend

        b = self.search
        if isinstance(b, OrtGatedBackend) and b.untimed:  # as `forms_to_time` says
            forms = " and ".join(FORM_WORDS[f] for f in (b.form, *b.untimed))
            notify(progress, PhaseEvent("reference", f"the search graph's {forms} timed on a sample"))
            notify(progress, PhaseEvent("reference", b.choose_form(sample, quiet)))

    def kept_fp32(self) -> dict[str, str]:
        """Op types the backends' ONNX Runtime refused a session for in the format (op -> why; ONNX Runtime backends
        only: `backends.ort.session_keeping_fp32`), which fixed.onnx keeps FP32 too."""
        out: dict[str, str] = {}
        for b in (self.search, self.confirm):
            out.update(getattr(b, "kept_fp32", None) or {})
        return out


@dataclass(frozen=True)
class References:
    """The FP32 reference outputs of the search samples and of the held-out ones (`held`, with `held_refs`),
    and the runner that computes those of new samples (perturbed copies)."""

    refs: list[dict]
    held: list[Sample]
    held_refs: list[dict]
    runner: ReferenceRunner


@dataclass(frozen=True)
class LastWord:
    """The oracle whose verdicts decide the answer (the confirm backend's where it confirmed, else the search's) and
    its counterexample-guided loop: a repair with failing held-out samples continues on them."""

    oracle: Oracle
    loop: Loop


@dataclass
class HeldOutCheck:
    """The answer after the held-out check (`outcome`): the check itself (`validation`: None without held-out
    samples or without an answer), where failing held-out samples repaired it, the answer that failed them
    (`first_answer`), and which held-out samples (their indices) a repair added to the search's oracle
    (`in_search_oracle`: checked with every sample it holds from then on)."""

    outcome: Outcome
    validation: Validation | None = None
    first_answer: frozenset[str] | None = None
    in_search_oracle: frozenset[int] = frozenset()

    @property
    def repaired(self) -> bool:
        return self.first_answer is not None


@dataclass(frozen=True)
class KnobOutcome:
    """What the knob search decided: the report's `knobs`, the answer (the searched one, or a smaller set
    under another configuration), that configuration (None: the backend has no knobs) and its verdict."""

    result: KnobsResult
    fallback: frozenset[str]
    config: knobs.KnobConfig | None
    verdict: Verdict | None
    status: RunStatus = RunStatus.COMPLETE
    reason: str | None = None

    @property
    def emitted(self) -> knobs.KnobConfig | None:
        """The configuration the emitted commands carry: a real knob's (not ort-cpu's, where they do nothing)."""
        family = knob_family(self.result.backend)
        return self.config if family in (knobs.ORT_CUDA, knobs.TRT) and self.result.best is not None else None


@dataclass
class Findings:
    """What the steps after the search found, for the report; each field is set by one step."""

    confirmed: Confirm | None = None  # confirm
    confirm_verdict: Verdict | None = None  # confirm: the verdict on the final set there
    spread: KernelSpread | None = None  # confirm: the GPU's own spread of the searched answer (a GPU confirmation)
    last_word: LastWord | None = None  # search, then confirm: whose verdicts decide the answer
    knobs: KnobOutcome | None = None  # knobs
    held: HeldOutCheck | None = None  # validate
    decided_by: Decider | None = None  # validate: which check decides whether the answer holds
    answers: TwoAnswers | None = None  # answers: the smaller answer found first, and the final one
    other: OtherRuntime | None = None  # pipeline/target.py: the answer on the other runtime, and that runtime's own

    @property
    def validation(self) -> Validation | None:
        return self.held.validation if self.held is not None else None


@dataclass(kw_only=True)
class RunContext(StepContext):
    """One diagnose run, as its steps see it once the search can start: the workload, the analysis, the
    backends, the references, the search's oracle (its samples: the counterexample-guided search's working set
    and their perturbed copies) and budget, that search's `loop` (the search samples, the working set, how many
    of the oracle's samples are the user's, the rounds), which samples were held out and why (`held_choice`),
    what closes what the run opened
    (`owned`), when it started (`t0`, monotonic: before the model was loaded where `api.diagnose` started it) and
    when the steps that spend the time budget ended (`search_ended`), what rounding the reference outputs to the
    format alone uses of the tolerance (`floor`), and what the steps found (`findings`)."""

    work: Workload
    analysis: Analysis
    backends: Backends
    references: References
    oracle: Oracle
    budget: Budget
    loop: Loop
    owned: contextlib.ExitStack
    t0: float
    floor: RoundingFloor | None = None
    search_ended: float | None = None
    held_choice: HeldOutChoice | None = None
    attribution: Attribution | None = None  # growth by attribution: the failing samples' local errors
    findings: Findings = field(default_factory=Findings)

    @property
    def given(self) -> RunSpec:
        """The settings as the run was given them (the report's invocation)."""
        return self.spec
