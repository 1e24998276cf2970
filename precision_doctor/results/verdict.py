"""What a diagnose run means, as one typed statement derived from its Report only: `statement(report)` (also
`Report.statement`; `Report.passed` and the CLI's exit code are its).

- `status` and `qualifiers`: the one result, whose label is always composed of the same words: a base (`PASSED`,
  `FAILED ON HELD-OUT SAMPLES`, `INCOMPLETE (budget exhausted)`, `INCOMPLETE (interrupted)`, `NO SOLUTION`) and,
  for a pass, its qualifiers in this order: `NOT VALIDATED` (no held-out sample of the user's data checked this
  exact answer independently), `ON THE EMULATOR (CONFIRM ON A GPU)` (its low-precision part holds what the emulator
  does not model on a GPU), `LITTLE FP16 BENEFIT` or `ALL IN FP32 (NO FP16 BENEFIT)` (BF16 for a BF16 run).
- `claim`: the one measured claim: k of n held-out samples failed (where, and the exact one-sided Clopper-Pearson
  bound, measure/bound.py), or why the answer is not validated.
- `benefit`: what the answer keeps of low precision: FP32 FLOP share, speed-up kept (measured, else estimated), and
  the trade-off point that keeps more in low precision.
- `basis`: which backend had the last word, and what of the answer it does not model.
- `next`: the one next step (render/commands.py gives its command and words).

Every front end says these fields, each in one sentence (render/verdict.py), so two sentences about one run cannot
disagree. Left out on purpose: a prediction from perturbed copies of the search samples. It was not calibrated
(issue 33: two PASS verdicts that said "at most 0.2%" failed 8-9% of unseen samples), and the probe was removed.

results/report.py imports this module (`Report.statement`), so this one reads the Report by its attributes and
imports nothing of report.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from precision_doctor.backends.registry import check_only, on_gpu
from precision_doctor.graph.coverage import EmulationNote
from precision_doctor.measure.bound import CONFIDENCE, METHOD, failure_rate_upper, samples_for_bound
from precision_doctor.outcome import Growth, RunStatus, _Value

LITTLE_FP32_SHARE = 0.8  # an answer that keeps more than this share of the FLOPs in FP32 has little benefit
# Held-out samples that all passed validate an answer only where they bound its failure rate below this: 2 passing
# samples bound it at 78% (no better than a coin), 5 at 45% (issue 33: "where held-out data is too small to bound
# anything useful, say so plainly"; on the GPU truth benchmark 3 of 4 answers checked on 2 held-out samples failed
# 6-31% of unseen ones, each within its 78%).
USEFUL_BOUND = 0.5
MIN_VALIDATING = samples_for_bound(USEFUL_BOUND, CONFIDENCE)  # passing held-out samples that bound it there (5)
LITTLE_SPEEDUP_KEPT = 0.2  # ... and so has one whose latency keeps less than this share of the speed-up


class Status(_Value):
    """The base of the result."""

    PASSED = "passed"  # passes every sample it was checked on, the run complete
    FAILED_HELD_OUT = "failed_held_out"  # fails held-out samples, the run complete (its repair found no set)
    INCOMPLETE = "incomplete"  # the run stopped (budget, interrupt) before its answer was settled, whatever its set measured
    NO_SOLUTION = "no_solution"  # no set meets the tolerance


class Qualifier(_Value):
    """What qualifies a pass (in this order in its label)."""

    NOT_VALIDATED = "not_validated"
    ON_THE_EMULATOR = "on_the_emulator"
    LITTLE_BENEFIT = "little_benefit"
    ALL_FP32 = "all_fp32"


BASE_LABELS = {Status.PASSED: "PASSED", Status.FAILED_HELD_OUT: "FAILED ON HELD-OUT SAMPLES",
               Status.INCOMPLETE: "INCOMPLETE ({stopped})", Status.NO_SOLUTION: "NO SOLUTION"}
QUALIFIER_LABELS = {Qualifier.NOT_VALIDATED: "NOT VALIDATED", Qualifier.ON_THE_EMULATOR: "ON THE EMULATOR (CONFIRM ON A GPU)",
                    Qualifier.LITTLE_BENEFIT: "LITTLE {precision} BENEFIT",
                    Qualifier.ALL_FP32: "ALL IN FP32 (NO {precision} BENEFIT)"}
STOPPED = {RunStatus.BUDGET_EXHAUSTED: "budget exhausted", RunStatus.INTERRUPTED: "interrupted"}


def label_of(status: Status, qualifiers: tuple[Qualifier, ...] = (), precision: str = "FP16",
             stopped: RunStatus | None = None) -> str:
    """The label: the base, then the qualifiers, joined by ", "."""
    base = BASE_LABELS[status].format(stopped=STOPPED.get(stopped, "budget exhausted"))
    return ", ".join([base, *(QUALIFIER_LABELS[q].format(precision=precision) for q in qualifiers)])


def all_labels(precision: str = "FP16") -> list[str]:
    """Every label a run can get (README.md lists them)."""
    passes = [(nv, emu, benefit) for nv in ((), (Qualifier.NOT_VALIDATED,))
              for emu, benefit in (((), ()), ((), (Qualifier.LITTLE_BENEFIT,)), ((Qualifier.ON_THE_EMULATOR,), ()),
                                   ((Qualifier.ON_THE_EMULATOR,), (Qualifier.LITTLE_BENEFIT,)), ((), (Qualifier.ALL_FP32,)))]
    return [*(label_of(Status.PASSED, (*nv, *emu, *b), precision) for nv, emu, b in passes),
            label_of(Status.FAILED_HELD_OUT), *(label_of(Status.INCOMPLETE, stopped=s) for s in STOPPED),
            label_of(Status.NO_SOLUTION)]


class Unvalidated(_Value):
    """Why no held-out sample of the user's data checked the answer independently."""

    TOO_FEW = "too_few"  # fewer than HOLD_OUT_FROM --inputs samples (or a split of them holding none out)
    FEW_HELD_OUT = "few_held_out"  # held-out samples all passed, too few to bound the failure rate below USEFUL_BOUND
    SPLIT_ZERO = "split_zero"  # --validation-split 0
    GENERATED = "generated"  # the samples were generated, not the user's data
    REPAIRED = "repaired"  # the first answer failed held-out samples; a second search used them
    NOT_CHECKED = "not_checked"  # the run stopped before the held-out samples checked the answer
    NONE_HELD_OUT = "none_held_out"  # no sample was held out (a report that says no more)


@dataclass(frozen=True)
class Earlier:
    """The answer the held-out samples checked before they were spent on it: its size, its failures among them,
    on which backend, and what spent them (`by`: "a repair by their attribution", "a second search")."""

    nodes: int
    failures: int
    samples: int
    backend: str
    by: str


@dataclass(frozen=True)
class Claim:
    """The one measured claim. `measured`: held-out samples of the user's data that no search used checked this
    very answer: `failures` of `samples` failed on `backend`, which bounds its failure rate on data like theirs at
    `bound` (`method` at `confidence`). Otherwise `unvalidated` says why, `samples` counts the samples the search
    used (all of them), `held_out` the held-out ones among them (spent, generated, or not yet checked) and
    `earlier` what the held-out samples measured of an earlier answer before they were spent; `ties`: those of the
    `failures` that another cuDNN algorithm choice passes (measure/spread.py): failures all the same, since a
    deployment may get ONNX Runtime CUDA's default choice."""

    measured: bool
    samples: int
    failures: int = 0
    bound: float | None = None
    confidence: float = CONFIDENCE
    method: str = METHOD
    backend: str | None = None
    unvalidated: Unvalidated | None = None
    held_out: int = 0
    earlier: Earlier | None = None
    ties: int = 0  # of the failures: those another cuDNN algorithm choice passes


@dataclass(frozen=True)
class TradePoint:
    """A point of the trade-off against the tolerance (`pricing.tradeoff`) that keeps more in low precision:
    at `multiple` x the tolerance the answer would be `nodes` nodes with `fp32_flop_share` of the FLOPs in FP32."""

    multiple: float
    nodes: int
    fp32_flop_share: float


@dataclass(frozen=True)
class Benefit:
    """What the answer leaves of low precision's benefit: `nodes` of `candidates` in FP32, `fp32_flop_share` (of
    the deployed fixed.onnx where the cost model priced it), the share of the low-precision speed-up it keeps
    (`speedup_kept`: `measured` on a GPU, else estimated by the cost model; None: not known, or `no_gain`: measured,
    and low precision is not faster there at all). `little`: over LITTLE_FP32_SHARE of the FLOPs in FP32
    (`little_by` "flops") or under LITTLE_SPEEDUP_KEPT of the speed-up kept ("latency"); `all_fp32`: every
    candidate node in FP32; `better`: the trade-off point that keeps more in low precision, where there is one."""

    nodes: int
    candidates: int | None
    fp32_flop_share: float
    speedup_kept: float | None = None
    measured: bool = False
    no_gain: bool = False
    little_by: tuple[str, ...] = ()
    all_fp32: bool = False
    better: TradePoint | None = None

    @property
    def little(self) -> bool:
        return bool(self.little_by) or self.all_fp32


@dataclass(frozen=True)
class Basis:
    """What the answer rests on: the backend that had the last word (`how`: on the search samples, with the
    held-out ones, a confirmation, the knob search; `samples`: how many), whether it computes real low precision
    on a GPU, the emulator's `rules`, what of the answer's low-precision part it does not model on a GPU
    (`unmeasured`: op types, patterns, the format; `notes`: the report's emulation notes on them), why no GPU
    checked it (`not_on_gpu`) and, where ONNX Runtime CUDA had the last word, its own `spread` under cuDNN's
    algorithm choices (measure/spread.py)."""

    backend: str
    gpu: bool
    how: str | None = None
    samples: int | None = None
    rules: str | None = None
    unmeasured: tuple[str, ...] = ()
    notes: tuple[EmulationNote, ...] = ()
    not_on_gpu: str | None = None
    spread: float | None = None  # the GPU's own spread under its kernel choices, as a share of the tolerance


class NextKind(_Value):
    """The one next step."""

    RELAX_TOLERANCE = "relax_tolerance"  # the tolerance is below the format's rounding: run with a realistic one
    CONTINUE = "continue"  # the run stopped early: resume it
    MORE_DATA = "more_data"  # held-out samples failed: more data, more room to spare
    CHECK_REFERENCE = "check_reference"  # not even FP32 meets the tolerance
    LOOSEN = "loosen"  # no set meets the tolerance
    VALIDATE = "validate"  # a pass no held-out sample of the user's data checked
    CONFIRM_ON_GPU = "confirm_on_gpu"  # the emulator had the last word
    KEEP_MORE_LOWP = "keep_more_lowp"  # little benefit: a looser tolerance keeps more in low precision
    CHECK_ON_TARGET = "check_on_target"  # check fixed.onnx with TensorRT on the target GPU (polygraphy)


@dataclass(frozen=True)
class NextStep:
    """The one next step: its kind, and the settings a run of it changes (setting path, value)."""

    kind: NextKind
    changes: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Statement:
    """What a run means (see the module's docstring). `stopped`: the run's status where it ended early;
    `answered`: the run has an answer (so far); `precision`: "FP16" or "BF16"."""

    status: Status
    qualifiers: tuple[Qualifier, ...]
    claim: Claim | None
    benefit: Benefit | None
    basis: Basis
    next: NextStep
    precision: str = "FP16"
    stopped: RunStatus | None = None
    answered: bool = False

    @property
    def passed(self) -> bool:
        return self.status == Status.PASSED

    @property
    def held_out_failed(self) -> bool:
        """Whether held-out samples of the user's data failed the set reported (FAILED ON HELD-OUT SAMPLES, or a
        stopped run's set so far): no certificate, check or build step beside it."""
        c = self.claim
        return self.status == Status.FAILED_HELD_OUT or (c is not None and c.measured and c.failures > 0)

    @property
    def exit_code(self) -> int:
        """0 for a pass of any qualifier, 130 for an interrupted run, 1 otherwise."""
        return 0 if self.passed else 130 if self.stopped == RunStatus.INTERRUPTED else 1

    @property
    def label(self) -> str:
        return label_of(self.status, self.qualifiers, self.precision, self.stopped)

    def to_json(self) -> dict:
        """report.json's `verdict` (derived: a reader never needs it back)."""
        d = {"label": self.label, "passed": self.passed, "exit_code": self.exit_code, **asdict(self)}
        d["next"]["changes"] = dict(self.next.changes)
        return d


# -- the derivation ------------------------------------------------------------------------------------------------


def statement(report) -> Statement:
    """The statement of `report` (a results.report.Report)."""
    run = RunStatus(report.status or RunStatus.COMPLETE)
    answer = answered(report)
    status = _status(report, run, answer)
    claim = _claim(report, answer)
    benefit = _benefit(report) if answer else None
    basis = _basis(report)
    quals: list[Qualifier] = []
    if status == Status.PASSED:
        if claim is None or not claim.measured:
            quals.append(Qualifier.NOT_VALIDATED)
        if basis.unmeasured and not (benefit and benefit.all_fp32):
            quals.append(Qualifier.ON_THE_EMULATOR)
        if benefit is not None and benefit.all_fp32:
            quals.append(Qualifier.ALL_FP32)
        elif benefit is not None and benefit.little:
            quals.append(Qualifier.LITTLE_BENEFIT)
    quals_t = tuple(quals)
    return Statement(status, quals_t, claim, benefit, basis, _next(report, status, quals_t, claim, benefit, basis, run),
                     precision=str(report.search.precision or "low precision").upper(),
                     stopped=run if run.ended_early else None, answered=answer)


def answered(report) -> bool:
    """Whether the run has an answer (so far): a set that met the tolerance on the search samples it was checked
    on. A complete run has one unless it found none; a run that stopped early has one where it names a set, checked
    it on held-out samples or wrote fixed.onnx."""
    run = RunStatus(report.status or RunStatus.COMPLETE)
    if run in (RunStatus.NO_SOLUTION, RunStatus.STOPPED):
        return False
    if run == RunStatus.COMPLETE:
        return True
    answer = report.answer
    return bool(answer.fallback_nodes) or report.promise.validation is not None or "fixed_onnx" in (answer.artifacts or {})


def _status(report, run: RunStatus, answer: bool) -> Status:
    v = report.promise.validation
    if run == RunStatus.NO_SOLUTION or (run == RunStatus.COMPLETE and not answer):
        return Status.NO_SOLUTION
    if run.ended_early:  # the run's state first: its set so far, failing held-out samples or not, is not settled
        return Status.INCOMPLETE
    if v is not None and not v.passed and not v.passed_after_research:
        return Status.FAILED_HELD_OUT
    return Status.PASSED


def _repair_moved(report) -> bool:
    """Whether a repair that did not finish (stopped early) reports a set other than the one the held-out samples
    failed: its set so far, which passes them, is not settled (INCOMPLETE), not one that failed them."""
    v = report.promise.validation
    return (v is not None and v.research is not None and not v.passed_after_research and v.first_candidate is not None
            and sorted(v.first_candidate) != sorted(report.answer.fallback_nodes))


def _generated(report) -> bool:
    """Whether the held-out samples (or, with none, the search samples) were generated rather than the user's."""
    choice = report.promise.held_out_choice
    if choice is not None and choice.source != "none":
        return choice.source == "generated"
    return isinstance(report.search.inputs, dict) and "generated" in report.search.inputs


def _claim(report, answer: bool) -> Claim | None:
    v = report.promise.validation
    n_search = int(report.search.samples.search)
    if v is None:
        return Claim(False, n_search, unvalidated=_none_held_out(report), held_out=int(report.search.samples.validation)) \
            if answer else None
    if _generated(report):
        return Claim(False, n_search + v.samples, unvalidated=Unvalidated.GENERATED, held_out=v.samples)
    failures = len(v.failing_samples)
    grown = report.promise.answers
    # a repair that stopped before it found a set leaves the one they failed: they measured this very answer
    unrepaired = v.research is not None and not v.passed_after_research and not _repair_moved(report)
    if not unrepaired and (v.research is not None or (grown is not None and Growth.HELD_OUT in grown.grown_by)):
        # the first answer failed them, and a repair (before: a second search) used them
        size = len(v.first_candidate) if v.first_candidate is not None else grown.smaller.size if grown else 0
        by = "a repair by their attribution" if (v.research or "").startswith("repaired") else "a second search"
        first = Earlier(size, failures, v.samples, v.backend or report.search.backend, by)
        return Claim(False, n_search + v.samples, unvalidated=Unvalidated.REPAIRED, held_out=v.samples, earlier=first)
    bound = failure_rate_upper(failures, v.samples, CONFIDENCE)
    backend = v.backend or _held_out_backend(report)
    if not failures and bound > USEFUL_BOUND:  # they passed, and say nothing useful: not a validation
        return Claim(False, v.samples, 0, bound, backend=backend, unvalidated=Unvalidated.FEW_HELD_OUT,
                     held_out=v.samples)
    ties = len(set(v.ties) & set(v.failing_samples))  # an earlier version's report listed them apart, as passing
    return Claim(True, v.samples, failures, bound, backend=backend, ties=ties)


def _none_held_out(report) -> Unvalidated:
    """Why an answer has no held-out check at all."""
    if _generated(report):
        return Unvalidated.GENERATED
    choice, run = report.promise.held_out_choice, RunStatus(report.status or RunStatus.COMPLETE)
    if (choice is not None and choice.samples) or report.search.samples.validation:
        return Unvalidated.NOT_CHECKED if run.ended_early else Unvalidated.NONE_HELD_OUT
    spec = report.invocation.spec
    if spec is not None and spec.inputs.validation_split == 0:
        return Unvalidated.SPLIT_ZERO
    return Unvalidated.TOO_FEW if choice is not None else Unvalidated.NONE_HELD_OUT


def _held_out_backend(report) -> str:
    """Where the held-out samples last checked the answer, in reports that do not say (`validation.backend`): the
    confirm backend where it confirmed this very answer on them too (not a check-only one), else the search backend."""
    c = report.checks.confirm
    total = report.search.samples.search + report.search.samples.validation
    if c is not None and c.passed and not check_only(c.backend) and (c.samples or 0) >= total \
            and sorted(c.searched_answer) == sorted(report.answer.fallback_nodes):
        return c.backend
    return report.search.backend


def _benefit(report) -> Benefit:
    p = report.pricing
    cost = p.answer if p is not None else None
    share = float(cost.fp32_flop_share if cost is not None else report.answer.fp32_flop_share)
    lat = p.latency if p is not None else None
    kept = lat.latency_kept if lat is not None else cost.estimated_speedup_kept if cost is not None else None
    no_gain = lat is not None and kept is None  # measured: low precision is no faster there at all (not the answer's doing)
    little = (("flops",) if share > LITTLE_FP32_SHARE else ()) + (
        ("latency",) if kept is not None and kept < LITTLE_SPEEDUP_KEPT else ())
    cands = report.model.candidates if report.model is not None else None
    return Benefit(int(report.answer.fallback_size), cands, share, kept, lat is not None, no_gain, little,
                   bool(report.answer.everything_fp32), _better(p.tradeoff if p is not None else None, share))


def _better(t, share: float) -> TradePoint | None:
    """The trade-off's point at the least tolerance multiple above 1 whose answer keeps less in FP32."""
    if t is None:
        return None
    here = t.at(1.0)
    base = here.fp32_flop_share if here is not None and here.fp32_flop_share is not None else share
    points = sorted((pt for pt in t.points if pt.multiplier > 1 and pt.found and pt.fp32_flop_share is not None
                     and pt.fp32_flop_share < base - 1e-9), key=lambda pt: pt.multiplier)
    return TradePoint(points[0].multiplier, int(points[0].fallback_size or 0), points[0].fp32_flop_share) if points else None


def _basis(report) -> Basis:
    c, ks = report.checks.certified_by, report.checks.kernel_spread
    spread = ks.share if ks is not None else None
    if c is not None:
        unmeasured = () if c.gpu else tuple(c.unconfirmed)
        notes = tuple(n for n in report.checks.emulation_notes if n.unconfirmed) if unmeasured else ()
        return Basis(c.backend, c.gpu, c.how, c.samples, c.rules, unmeasured, notes, c.not_on_gpu, spread)
    rules = report.search.emulation_rules if report.search.backend == "emulate" else None
    return Basis(report.search.backend, on_gpu(report.search.backend), rules=rules)


def _next(report, status: Status, quals: tuple[Qualifier, ...], claim: Claim | None, benefit: Benefit | None,
          basis: Basis, run: RunStatus) -> NextStep:
    floor = report.analysis.rounding_floor
    realistic = floor.realistic(report.search.tolerance) if floor is not None and floor.below else None
    if run.ended_early:  # the run did not finish: continuing it comes first (a realistic tolerance second)
        return NextStep(NextKind.CONTINUE)
    if realistic is not None:
        return NextStep(NextKind.RELAX_TOLERANCE, tolerance_changes(realistic))
    if status == Status.FAILED_HELD_OUT:
        return NextStep(NextKind.MORE_DATA, (("search.margin", round(min(0.9, float(report.search.margin or 0.0) + 0.1), 2)),))
    if status == Status.NO_SOLUTION:
        base = report.analysis.baseline
        return NextStep(NextKind.CHECK_REFERENCE if base is not None and not base.passed else NextKind.LOOSEN)
    if Qualifier.NOT_VALIDATED in quals:
        split = claim is not None and claim.unvalidated == Unvalidated.SPLIT_ZERO
        return NextStep(NextKind.VALIDATE, (("inputs.validation_split", None),) if split else ())
    if Qualifier.ON_THE_EMULATOR in quals:
        return NextStep(NextKind.CONFIRM_ON_GPU, (("backends.confirm_backend", "ort-cuda"),))
    if benefit is not None and benefit.little and benefit.better is not None:
        return NextStep(NextKind.KEEP_MORE_LOWP, tolerance_changes(report.search.tolerance.scaled(benefit.better.multiple, 3)))
    if (report.answer.commands or {}).get("polygraphy"):
        return NextStep(NextKind.CHECK_ON_TARGET)
    return NextStep(NextKind.CONFIRM_ON_GPU, (("backends.confirm_backend", "ort-cuda"),)) if not basis.gpu \
        else NextStep(NextKind.CHECK_ON_TARGET)


def tolerance_changes(tol) -> tuple[tuple[str, Any], ...]:
    """The settings a run with tolerance `tol` changes (its atol, rtol and per-output ones)."""
    return (("tolerance.atol", tol.atol), ("tolerance.rtol", tol.rtol), ("tolerance.output_atol", list(tol.output_atol)),
            ("tolerance.output_rtol", list(tol.output_rtol)))
