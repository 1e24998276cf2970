"""The typed report of a diagnose run: what report.json holds, and what the renderers read.

A `Report` is its `status` and `reason` and a record per part (docs/guide.md lists report.json's keys): `model`
(`ModelInfo`), `search` (the search and the settings it ran at), `answer` (the FP32 nodes and the files written for
them), `checks` (how the answer was checked after the search), `promise` (the held-out samples, the bound they give
and what decided the answer: what the verdict may claim), `analysis` (the model in low precision before the search:
the layer table), `pricing`, `tensorrt` (the parser check and the engine) and `invocation` (how the run was started).
`Report.to_json()` writes each part as an object under its name, plus `schema_version` and, after `reason`, `passed`
and `verdict`; non-finite numbers become "inf", "-inf", "nan". What the run means (`passed`, `verdict`) is derived
from the rest (`Report.statement`, results/verdict.py), never read back.
`Report.from_json()` reads files of this `SCHEMA_VERSION` only: one of another version (or none: written before versions)
is refused in one line saying what to do (no migration: the tool is unreleased), and a malformed one names the key.
Both go through `REPORT_JSON` (codec.py): each class is its fields, except where a hook at the end of this module says
how it is written (or checks a value).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precision_doctor.codec import BadValue, Codec, Hook, mapping
from precision_doctor.costs import AnswerCost, DeployLatency, GroupUse, Tradeoff
from precision_doctor.errors import UserError
from precision_doctor.graph.coverage import EmulationNote
from precision_doctor.graph.shapes import InputShape
from precision_doctor.graph.toolnames import near_path
from precision_doctor.measure.floor import RoundingFloor
from precision_doctor.measure.spread import KernelSpread
from precision_doctor.measure.tolerance import OutputCheck, Tolerance
from precision_doctor.measure.trial_cost import TrialCost
from precision_doctor.outcome import Decider, Growth, RunStatus
from precision_doctor.results.verdict import Statement, answered, statement
from precision_doctor.spec import RunSpec

# 3: the keys are grouped by part (`search.evaluations`, `answer.fallback_nodes`, ...); 2: `passed` is derived from
# the statement and `verdict` holds it. Files of another version are refused (`_report`).
SCHEMA_VERSION = 3
REPORT = "report.json"
REQUIRED = ("status", "passed", "search", "answer")  # every version's first two (the version is checked after them)
REQUIRED_IN = {"search": ("evaluations", "elapsed_s", "strategy", "precision", "backend", "tolerance"),
               "answer": ("fallback_nodes",)}  # what every report has always held (docs/guide.md's contract)


class ReportError(UserError):
    """A report.json that cannot be read; the message names the file and the key (`reason`: the message without
    the file, for a front end that does not show its paths)."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = reason or message


def run_dir_of(path: str | Path) -> Path:
    """The run directory `path` names: itself, or the one holding it where it is a report.json."""
    path = Path(path)
    if path.is_file():
        if path.name != REPORT:
            raise ReportError(f"{path}: not a run directory (give the directory that holds its report.json)")
        return path.parent
    return path


# -- pieces ------------------------------------------------------------------------------------------


@dataclass
class ModelInfo:
    path: str = ""
    hash: str = ""
    nodes: int = 0
    candidates: int = 0
    total_flops: int = 0
    renamed_nodes: list[str] = field(default_factory=list)
    unsafe_names: dict[str, str] = field(default_factory=dict)  # renamed node -> its name in the file, escaped
    # how `model.onnx` in the run directory stands for the model the commands read: "symlink" (a relative link),
    # "copy", or None (no model.onnx: the commands read named.onnx, or the model by its absolute path)
    link: str | None = None


ORIGINS = ("cli", "batch", "service", "api")


@dataclass
class OutputChecks:
    """Per-output checks of one fallback set (the baseline: everything in low precision)."""

    passed: bool
    outputs: dict[str, OutputCheck] = field(default_factory=dict)


@dataclass
class Validation:
    """The answer checked on held-out samples, on `backend` (the one with the last word). When it failed there and
    it was repaired with them (grown by what their error is attributed to), `first_candidate` is the set that
    failed and `research`/`passed_after_research` say how that went (the repaired answer is then not validated: no
    unseen sample is left); `ties`: those of `failing_samples` that fail under ONNX Runtime CUDA's default kernel
    choice but pass under another (measure/spread.py)."""

    passed: bool
    samples: int
    failing_samples: list[int] = field(default_factory=list)
    outputs: dict[str, OutputCheck] = field(default_factory=dict)
    first_candidate: list[str] | None = None
    research: str | None = None
    passed_after_research: bool | None = None
    backend: str | None = None  # where the held-out samples ran
    ties: list[int] = field(default_factory=list)  # of failing_samples: another cuDNN algorithm choice passes them

    @property
    def tol_used(self) -> float | None:
        """The largest share of the tolerance any output uses, when the answer passed (None otherwise)."""
        if not self.passed:
            return None
        vals = [o.tol_used for o in self.outputs.values() if o.tol_used is not None and not math.isnan(o.tol_used)]
        return max(vals) if vals else None


@dataclass
class HeldOutBound:
    """What held-out samples of the user's data, which no search saw, measure about an answer (`of`): `failures`
    of `samples` failed, so on data like theirs it fails on at most `failure_rate` of inputs at `confidence`
    (`method`: one-sided Clopper-Pearson, measure/bound.py); `samples_for_useful` passing samples would bound
    it at `useful_rate`, as many as the default split holds out of `inputs_for_useful` `--inputs` samples."""

    samples: int
    failures: int
    confidence: float
    failure_rate: float
    method: str
    useful_rate: float
    samples_for_useful: int
    inputs_for_useful: int = 0
    of: str = "final answer"

    @property
    def useful(self) -> bool:
        """Whether the bound is at most `useful_rate`."""
        return self.failure_rate <= self.useful_rate


@dataclass
class HeldOutChoice:
    """Which samples were held out and why (pipeline/heldout_policy.py): `source` (split, validate-inputs,
    generated, none), how many, and the reason in words."""

    source: str
    samples: int
    reason: str


@dataclass
class SearchRound:
    """One round of the counterexample-guided search (search/cegis.py): the search samples in the working set
    (`working`, indices of the search samples), the answer the strategy found on them (None: none), the
    evaluations it took, how many other search samples the answer was then checked on (hardest first) and
    those it failed (`counterexamples`, which join the next round), and the round's seconds. `search`: the
    first search, or the probe's second one."""

    round: int
    working: list[int]
    answer: list[str] | None
    evaluations: int
    checked: int
    counterexamples: list[int]
    seconds: float
    search: str = "first"


@dataclass
class SearchRounds:
    """The counterexample-guided search: `search_samples` samples, each scored once by the all-low-precision
    share of the search tolerance; the working set started with the `start` hardest (spread over shape groups
    and worst outputs) and their perturbed copies; `rounds`; `verified`: the final answer passed every search
    sample; `failing`: search samples the final answer is known to fail (the loop ended first: `stopped` says
    why)."""

    search_samples: int
    start: int
    rounds: list[SearchRound] = field(default_factory=list)
    verified: bool = False
    failing: int = 0
    stopped: str | None = None
    checked: int = 0  # sample runs spent checking answers outside the working set
    captured: list[int] = field(default_factory=list)  # the search samples the capture and its ranking ran on

    @property
    def working(self) -> int:
        """How many search samples the last round's working set held."""
        return len(self.rounds[-1].working) if self.rounds else self.start


@dataclass
class AnswerSummary:
    """One answer of the run: its nodes, FP32 FLOP share, what the held-out samples measured of it, and the
    search samples it was seen to fail (at least: the search stops looking after a few). The cost model's
    record (issue 23, `graph/cost.py`) belongs beside `fp32_flop_share`."""

    nodes: list[str]
    size: int
    fp32_flop_share: float
    held_out: HeldOutBound | None = None
    search_failures: int = 0


@dataclass
class TwoAnswers:
    """The smaller answer the run found first and the safer one it grew into (`grown_by`, in order): both stay
    in the report, never a silent switch. `safer` is the final answer (report.json's `fallback_nodes`)."""

    grown_by: list[Growth]
    smaller: AnswerSummary
    safer: AnswerSummary


@dataclass
class TrajectoryRow:
    """One evaluation of a search."""

    step: int
    size: int
    cost: float
    passed: bool
    elapsed_s: float = 0.0
    at_s: float = 0.0
    phase: str = ""
    fallback: list[str] = field(default_factory=list)
    worst_output: str | None = None
    max_abs: float | None = None
    failed_sample: int | None = None
    round: int = 0  # the oracle's round (search/oracle.py: samples added or the check made stricter)


@dataclass
class Confirm:
    """The searched answer carried over to `backend` (`backends.confirm_backend`). `skipped` says why it
    did not run (the search ended early); then only backend, searched_answer and passed (None) are set.
    `samples`: the user's (search and held-out) samples it ran on; `perturbed_copies`: the search's
    perturbed copies it ran on besides them; `pruned_searched`: whether it may remove the searched answer's
    own members (not above pipeline.confirmation.PRUNE_MAX of them, nor on a check-only backend); when it may
    not, `one_minimal_checked` is None (they were pruned on the search backend only); `pruned_added`: whether what
    a failing answer needed added there was pruned there (False for an answer searched on the GPU: each removal
    is a new session; None where nothing was added); `every_sample`: whether every search sample was in its oracle
    from the start (False: the search's working set, each answer that passed it checked on the others, in rounds;
    None: no rounds); `others_checked`: with the working set, whether its answer passed every other search sample
    (False: a budget, a stop or the rounds' limit ended it first); `trial_cost`: what a trial of the searched answer
    cost there, measured to make that choice (None: not measured, e.g. a resumed run keeps its earlier choice)."""

    backend: str
    searched_answer: list[str]
    passed: bool | None
    skipped: str | None = None
    samples: int | None = None
    searched_answer_passed: bool | None = None
    status: RunStatus | None = None
    evaluations: int | None = None
    memo_hits: int | None = None
    one_minimal_checked: bool | None = None
    tolerance_used: float | None = None
    trajectory: list[TrajectoryRow] = field(default_factory=list)
    perturbed_copies: int | None = None
    pruned_searched: bool | None = None
    pruned_added: bool | None = None
    trial_cost: TrialCost | None = None
    every_sample: bool | None = None
    others_checked: bool | None = None

    def to_json(self) -> dict:
        """report.json's `confirm`."""
        return REPORT_JSON.to_json(self)


@dataclass
class Certification:
    """Which backend last checked the final answer on every sample, and how: `search` (on the search
    samples, no held-out ones), `validation` (search and held-out samples) or `confirmation` (on the
    confirm backend). `gpu`: real low precision on a GPU; `rules`: the emulator's rules when the
    emulator certified; `not_on_gpu`: why the answer was not checked on a GPU, where `auto` had none;
    `unconfirmed`: where the emulator certified, the op types, patterns or format of the answer's low-precision
    part whose GPU behaviour it does not model (`emulation_notes`): the certificate does not cover them."""

    backend: str
    how: str
    samples: int
    gpu: bool = False
    rules: str | None = None
    not_on_gpu: str | None = None
    unconfirmed: list[str] = field(default_factory=list)


@dataclass
class ToleranceUsed:
    """Shares of the user's tolerance the answer uses (min(abs/atol, rel/rtol) of the worst element):
    on the search samples and the held-out ones (of the searched answer; None when a confirmation changed
    it), and on the confirm backend."""

    search: float | None = None
    validation: float | None = None
    confirm: float | None = None


@dataclass
class Timing:
    """Where the run's wall time (`Report.elapsed_s`: from the command's start, loading included, to the report) went,
    in seconds. `search_s` is what `--time-budget` (`time_budget_s`, None: none given) bounds: its clock starts as
    the search starts and runs through the searches, the checks of each answer on the other search samples, the
    held-out and perturbed-copy checks and a second search, and the confirmation and knob search, which spend what
    is left; a step ends at its next evaluation after the budget is spent. `before_search_s`: loading the model
    and samples, the FP32 references, the samples' scores, the capture and its analysis; `after_search_s`: the
    smaller answer's held-out check, the fixed capture, the trade-off, the artifacts, the TensorRT check and engine,
    the report."""

    before_search_s: float
    search_s: float
    after_search_s: float
    time_budget_s: float | None = None


@dataclass
class TrtLayerMismatch:
    """A layer of fixed.onnx's TensorRT network that does not compute in the precision its node's role asks."""

    node: str
    layer: str
    layer_type: str
    role: str  # "fallback", "forced FP32" or "low precision"
    expected: str
    found: list[str] = field(default_factory=list)

    def describe(self) -> str:
        found = "/".join(self.found)
        return f"{self.node} ({self.role}): layer '{self.layer}' [{self.layer_type}] computes {found}, not {self.expected}"


@dataclass
class TrtCheckResult:
    """`trt_check` of fixed.onnx after a diagnosis: a real TensorRT-family parser's type for every layer,
    against the answer. `ran` False: `reason` says why it did not run (no library, a parser refusal)."""

    ran: bool
    reason: str | None = None
    library: str | None = None
    version: str | None = None
    onnx: str | None = None
    layers: int | None = None
    checked_layers: int | None = None
    checked_nodes: int | None = None
    mismatches: list[TrtLayerMismatch] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool | None:
        return None if not self.ran else not self.mismatches



@dataclass
class EngineResult:
    """The fixed engine (`artifacts.engine`): built, or why not. `cache` is the file TensorRT keeps its timing
    cache in (written by the build), or where TensorRT-RTX keeps its runtime cache when the engine runs."""

    built: bool
    reason: str | None = None
    plan: str | None = None
    library: str | None = None
    version: str | None = None
    targets: list[str] = field(default_factory=list)
    seconds: float | None = None
    size_bytes: int | None = None
    tf32: bool = False
    tactic_sources: list[str] | None = None
    cache: str | None = None
    input_shapes: dict[str, list[int]] = field(default_factory=dict)



@dataclass
class OtherRuntime:
    """The answer checked for the runtime it is not for (`runtime`: `tensorrt` or `ort-cuda`, pipeline/target.py): on
    which backend (`backend`, in words) and whether on a GPU (`measured`; else emulated with that runtime's rules),
    on how many of the user's samples; whether it passed there (None: not checked, `reason` says why) and its share
    of the tolerance there. Where it failed: that runtime's own answer grown from this one (`answer`, None where none
    was found; `added`: the nodes it adds), its FP32 share of FLOPs, the folder of its fixed.onnx and commands
    (`directory`; `files`: key -> path in the run directory) and, for TensorRT, its parser check (`trt_check`)."""

    runtime: str
    backend: str = ""
    measured: bool = False
    samples: int = 0
    passed: bool | None = None
    tolerance_used: float | None = None
    evaluations: int = 0
    answer: list[str] | None = None
    added: list[str] = field(default_factory=list)
    answer_tolerance_used: float | None = None
    fp32_flop_share: float | None = None
    directory: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    trt_check: TrtCheckResult | None = None
    reason: str | None = None


@dataclass
class KnobTrial:
    """One knob configuration tried with one fallback set (`knobs.knob_plan`); `passed` None: not evaluated
    (a smaller passing set was already found)."""

    knobs: str
    fallback_size: int
    why: str
    passed: bool | None
    tolerance_used: float | None = None


@dataclass
class KnobsResult:
    """`search.knobs`: the answer's backend tried under each knob configuration, alone and with the answer less
    one node. `best` is the cheapest passing configuration (the default when no knob does better); when it
    needs fewer FP32 nodes, `answer` replaces the searched one and the commands carry its settings."""

    backend: str
    configurations: list[str]
    searched_answer: list[str]
    status: RunStatus = RunStatus.COMPLETE
    note: str | None = None
    samples: int = 0
    evaluations: int = 0
    memo_hits: int = 0
    trials: list[KnobTrial] = field(default_factory=list)
    best: str | None = None
    best_settings: dict[str, str] = field(default_factory=dict)
    answer: list[str] = field(default_factory=list)
    tolerance_used: float | None = None

    @property
    def changed_answer(self) -> bool:
        return sorted(self.answer) != sorted(self.searched_answer)



@dataclass
class Pricing:
    """What the answer costs where it is deployed: the search objective (`search.cost`) and what it means, the
    answer's cost, the first answer's where a second search replaced it, the fusion groups it keeps, the FP16
    gaps closed, the measured latency (None without a CUDA GPU) and the trade-off against the tolerance."""

    objective: str
    objective_means: str
    answer: AnswerCost | None = None
    first_answer: AnswerCost | None = None
    groups: list[GroupUse] = field(default_factory=list)
    gaps_closed: list[list[str]] = field(default_factory=list)
    refine_evaluations: int = 0
    latency: DeployLatency | None = None
    latency_note: str | None = None  # how the latency was measured, or why not
    tradeoff: Tradeoff | None = None



@dataclass
class Layer:
    """One candidate node's line of the layer table (errors are relative L2 against FP32)."""

    index: int
    name: str
    op_type: str = ""
    flops: int = 0
    local_rel_l2: float | None = None
    rounding_rel_l2: float | None = None
    lowp_rel_l2: float | None = None
    fixed_rel_l2: float | None = None
    ref_absmax: float | None = None
    input_ref_absmax: float | None = None
    frac_above_max: float | None = None
    frac_below_normal: float | None = None
    score: float | None = None
    rank: int | None = None
    fallback: bool = False
    input_sensitive: bool = False
    producers: list[str] = field(default_factory=list)  # the nodes that compute its floating inputs
    folded_into: str | None = None  # where both are low precision, the node that computes it (its Conv: conv-bn-fold)


@dataclass
class SampleCounts:
    search: int = 0
    validation: int = 0


@dataclass(frozen=True)
class ShapeGroupInfo:
    """One shape group of the samples (every input's shape): how many samples of it searched, were held out,
    and were captured layer by layer."""

    shapes: dict[str, list[int]]
    samples: int = 0
    held_out: int = 0
    captured: int = 0


@dataclass
class FormatLimits:
    max: float | None = None
    smallest_normal: float | None = None


@dataclass
class ServiceJob:
    """The daemon's job a run was (report.json's `service_job`; None for other runs): its id, the daemon's URL
    as the submitter reached it, and the files as the submitter named them (uploads: their file names;
    `remote`: paths on the server), so that a report can give the `submit` that runs it again rather than
    the daemon's own paths."""

    id: str
    server: str | None = None
    model: str = ""
    inputs: list[str] = field(default_factory=list)
    validate_inputs: list[str] = field(default_factory=list)
    reference_outputs: str | None = None
    remote: bool = False

    def to_json(self) -> dict:
        return REPORT_JSON.to_json(self)

    @classmethod
    def from_json(cls, data: Any, source: str = "service_job") -> ServiceJob:
        """A ServiceJob from its JSON; ReportError naming the key when malformed."""
        try:
            return REPORT_JSON.from_json(cls, data, source)
        except BadValue as exc:
            raise ReportError(str(exc)) from None


# -- the report's parts ------------------------------------------------------------------------------------


@dataclass
class Invocation:
    """How and by what the run was started, so that the reports can print a command that runs it again: the tool,
    its version and when (`created`); the front end that started it (`ORIGINS`: a service job's report prints a
    `submit` command); the run directory's name; the settings with their paths relative to the run directory
    (absolute for files far from it; None: not recorded, the commands then name the model as given); and the
    daemon's job the run was (`service_job`; None for other runs)."""

    tool: str = "precision-doctor"
    version: str = ""
    created: str = ""
    origin: str = "api"
    directory: str = ""
    spec: RunSpec | None = None
    service_job: ServiceJob | None = None

    @classmethod
    def of(cls, spec: RunSpec, run_dir: str | Path, origin: str) -> Invocation:
        """The invocation of a run of `spec` (its relative paths: from the current directory) in `run_dir`."""
        run_dir = Path(run_dir).resolve()
        i = spec.inputs
        paths = {"model": near_path(spec.model, run_dir), "inputs.files": [near_path(f, run_dir) for f in i.files],
                 "inputs.validate_files": [near_path(f, run_dir) for f in i.validate_files],
                 "inputs.reference_outputs": near_path(i.reference_outputs, run_dir) if i.reference_outputs else None}
        return cls(origin=origin, directory=run_dir.name, spec=spec.with_settings(paths))


@dataclass
class SearchRecord:
    """The search and the settings it ran at: the format, the search backend, strategy and cost, the user's
    tolerance and the search's margin below it, the runtime the answer is for (`target`, `backends.target`) and the
    emulator's rules; the samples it had (`samples`: search and held-out counts, `inputs`: where they came from,
    `shape_groups`, and each model input's declared and run shapes); its evaluations (one = one configuration
    tried, memo hits apart), whether every member of the answer was checked to be needed (`one_minimal_checked`),
    the whole run's seconds (`elapsed_s`, loading included) and their parts (`timing`), the counterexample-guided
    rounds and the trajectory of evaluations."""

    precision: str = ""
    backend: str = ""
    strategy: str = ""
    cost: str = ""
    tolerance: Tolerance = field(default_factory=Tolerance)
    margin: float = 0.0
    target: str | None = None
    emulation_rules: str | None = None
    samples: SampleCounts = field(default_factory=SampleCounts)
    inputs: dict[str, Any] = field(default_factory=dict)
    shape_groups: list[ShapeGroupInfo] = field(default_factory=list)
    input_shapes: list[InputShape] = field(default_factory=list)  # the model's inputs: declared, and as the samples ran
    evaluations: int = 0
    memo_hits: int = 0
    one_minimal_checked: bool | None = None
    elapsed_s: float = 0.0
    timing: Timing | None = None  # elapsed_s in parts: before the search, the search (the time budget's), after it
    rounds: SearchRounds | None = None
    trajectory: list[TrajectoryRow] = field(default_factory=list)


@dataclass
class AnswerRecord:
    """The answer: the nodes kept in FP32 (ONNX node names, in graph order), how many, their share of the FLOPs (at
    the shapes that ran, the forced FP32 nodes included), whether it keeps every node the search could keep in FP32
    (no low-precision benefit), the nodes fixed.onnx keeps in FP32 beyond it (each with its reason), and the files
    and commands written for it."""

    fallback_nodes: list[str] = field(default_factory=list)
    fallback_size: int = 0
    fp32_flop_share: float = 0.0
    everything_fp32: bool = False
    forced_fp32_nodes: dict[str, str] = field(default_factory=dict)  # node -> why fixed.onnx keeps it FP32 too
    artifacts: dict[str, str] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)


@dataclass
class ChecksRecord:
    """How the answer was checked after the search: per output on the backend that decided it (`outputs`), the
    shares of the tolerance it uses, the confirmation on another backend, the knob search, the GPU's own spread under
    its kernel choices, who certified it and what of it the emulator does not model, and the answer checked for the
    runtime it is not for (`other_runtime`)."""

    outputs: dict[str, OutputCheck] = field(default_factory=dict)
    tolerance_used: ToleranceUsed | None = None
    confirm: Confirm | None = None
    knobs: KnobsResult | None = None
    kernel_spread: KernelSpread | None = None  # the GPU's own spread under its kernel choices (measure/spread.py)
    certified_by: Certification | None = None
    emulation_notes: list[EmulationNote] = field(default_factory=list)
    other_runtime: OtherRuntime | None = None


@dataclass
class PromiseRecord:
    """What the verdict may claim and on what: which samples were held out and why, the answer checked on them
    (`validation`), the failure-rate bound they give, which check decided the answer, and both answers where the run
    grew the one it found first."""

    held_out_choice: HeldOutChoice | None = None
    validation: Validation | None = None
    held_out_bound: HeldOutBound | None = None
    decided_by: Decider | None = None
    answers: TwoAnswers | None = None


@dataclass
class AnalysisRecord:
    """What the run measured of the model in low precision before the search: everything in low precision checked
    (`baseline`), what rounding the reference outputs alone uses of the tolerance, where the error first diverges,
    the nodes ranked by it (the first 50), the layer table and the format's limits."""

    baseline: OutputChecks | None = None
    rounding_floor: RoundingFloor | None = None
    first_divergence: str | None = None
    first_divergence_node: str | None = None
    ranking: list[str] = field(default_factory=list)
    layers: list[Layer] = field(default_factory=list)
    format_limits: FormatLimits = field(default_factory=FormatLimits)


@dataclass
class TensorRTRecord:
    """fixed.onnx under TensorRT: its parser check (`check`) and, with `--engine`, the engine built (`engine`)."""

    check: TrtCheckResult | None = None
    engine: EngineResult | None = None


# -- the report ----------------------------------------------------------------------------------------


@dataclass
class Report:
    """Everything a diagnose run found, in parts. `status`: complete, no_solution, budget_exhausted or interrupted,
    and `reason` why it is not complete; what the run means (`passed`, `statement`) is derived from the rest. The
    fields are in report.json's order of keys (`passed` and `verdict` come after `reason`)."""

    schema_version: int = SCHEMA_VERSION
    status: RunStatus = RunStatus.COMPLETE
    reason: str | None = None
    model: ModelInfo | None = None
    search: SearchRecord = field(default_factory=SearchRecord)
    answer: AnswerRecord = field(default_factory=AnswerRecord)
    checks: ChecksRecord = field(default_factory=ChecksRecord)
    promise: PromiseRecord = field(default_factory=PromiseRecord)
    analysis: AnalysisRecord = field(default_factory=AnalysisRecord)
    pricing: Pricing | None = None
    tensorrt: TensorRTRecord = field(default_factory=TensorRTRecord)
    invocation: Invocation = field(default_factory=Invocation)

    @property
    def interrupted(self) -> bool:
        return self.status == RunStatus.INTERRUPTED

    @property
    def statement(self) -> Statement:
        """What the run means, derived from this report only (results/verdict.py)."""
        return statement(self)

    @property
    def passed(self) -> bool:
        """Whether the run passed (of any qualifier): the statement's."""
        return statement(self).passed

    @property
    def answered(self) -> bool:
        """Whether the run has an answer (so far), passed or not (results/verdict.py)."""
        return answered(self)

    # -- JSON ------------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        """report.json's contents (non-finite numbers as "inf", "-inf", "nan")."""
        return REPORT_JSON.to_json(self)

    @classmethod
    def from_json(cls, data: Any, source: str = "report.json") -> Report:
        """A Report from report.json's contents; ReportError ("<source>: ...") names a missing or bad key."""
        try:
            return _report(data)
        except BadValue as exc:
            raise ReportError(f"{source}: {exc}", str(exc)) from None

    @classmethod
    def load(cls, path: str | Path) -> Report:
        """Read a report.json (or the one in a run directory); ReportError says what is wrong with it."""
        path = Path(path)
        if not path.exists():
            raise ReportError(f"{path}: no such file or directory")
        if path.is_dir() or not path.suffix:
            if not (path / REPORT).is_file():
                raise ReportError(f"{path} holds no report.json (is it a diagnose run directory?)")
            path = path / REPORT
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ReportError(f"{path}: cannot read: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise ReportError(f"{path}: not valid JSON ({str(exc).splitlines()[0][:150]})") from None
        except RecursionError:
            raise ReportError(f"{path}: not a report (JSON nested too deeply)") from None
        try:
            return cls.from_json(data, str(path))
        except RecursionError:
            raise ReportError(f"{path}: not a report (values nested too deeply)") from None


# -- report.json's exceptions to the plain field mapping -----------------------------------------------------


def _pick(d: dict, keys: tuple[str, ...]) -> dict:
    return {k: d[k] for k in keys}


_CONFIRM_KEYS = ("backend", "samples", "perturbed_copies", "searched_answer", "searched_answer_passed",
                 "pruned_searched", "pruned_added", "passed", "status", "evaluations", "memo_hits",
                 "one_minimal_checked", "tolerance_used", "every_sample", "others_checked", "trial_cost",
                 "trajectory")
_VALIDATION_IF_SET = ("first_candidate", "research", "passed_after_research", "backend")


def _checks_out(c: ChecksRecord, d: dict) -> dict:
    if c.confirm is None and d["tolerance_used"] is not None:  # the confirm share only where a confirmation ran
        del d["tolerance_used"]["confirm"]
    return d


def _report_out(r: Report, d: dict) -> dict:
    st = r.statement
    out = {}
    for k, v in d.items():  # `passed` and the statement after `reason`, where `passed` has always been
        out[k] = v
        if k == "reason":
            out.update(passed=st.passed, verdict=REPORT_JSON.to_json(st.to_json()))
    return out


def _trt_check_out(t: TrtCheckResult, d: dict) -> dict:
    if not t.ran:
        return _pick(d, ("ran", "reason"))
    return {"ran": True, "passed": t.passed, **{k: v for k, v in d.items() if k not in ("ran", "reason")}}


def _engine_out(e: EngineResult, d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "reason"} if e.built else _pick(d, ("built", "reason"))


def _invocation_in(d: dict, path: str) -> dict:
    origin = d.get("origin", "api")
    if isinstance(origin, str) and origin not in ORIGINS:
        raise BadValue(f"bad key '{path}.origin': expected one of {', '.join(ORIGINS)}, got {origin!r:.60}")
    return d


def _spec_in(v: Any, path: str) -> RunSpec:
    try:
        return RunSpec.from_json(mapping(v, path))
    except UserError as exc:
        raise BadValue(f"bad key '{path}': {exc}") from None


REPORT_JSON = Codec({
    Report: Hook(out=_report_out),
    ChecksRecord: Hook(out=_checks_out),
    Confirm: Hook(out=lambda c, d: _pick(d, ("backend", "searched_answer", "passed", "skipped")
                                         if c.skipped is not None else _CONFIRM_KEYS)),
    Validation: Hook(out=lambda v, d: {k: x for k, x in d.items() if k not in _VALIDATION_IF_SET or x is not None}),
    TrtCheckResult: Hook(out=_trt_check_out),
    EngineResult: Hook(out=_engine_out),
    KnobsResult: Hook(out=lambda k, d: {**d, "changed_answer": k.changed_answer}),
    DeployLatency: Hook(out=lambda lat, d: {**d, "latency_kept": lat.latency_kept}),
    Tolerance: Hook(out=lambda t, d: {k: v for k, v in d.items() if k not in ("output_atol", "output_rtol") or v}),
    Invocation: Hook(into=_invocation_in),
    RunSpec: Hook(encode=lambda s: s.to_json(), decode=_spec_in),
})


def _report(data: Any) -> Report:
    if not isinstance(data, dict):
        raise BadValue(f"not a report (expected a JSON object, got {type(data).__name__})")
    _require(data, REQUIRED[:2])
    version = data.get("schema_version")
    if version != SCHEMA_VERSION or type(version) is not int:
        found = "no schema_version" if version is None else f"schema_version {version!r:.20}"
        if type(version) is int and version > SCHEMA_VERSION:
            raise BadValue(f"written by a newer precision-doctor ({found}; this one reads {SCHEMA_VERSION}): read it "
                           "with that one")
        if version is not None and type(version) is not int:
            raise BadValue(f"bad key 'schema_version': expected {SCHEMA_VERSION}, got {version!r:.20}")
        raise BadValue(f"written by an earlier precision-doctor ({found}; this one reads {SCHEMA_VERSION} only): run "
                       "the diagnosis again to write a current report")
    _require(data, REQUIRED[2:])
    for part, keys in REQUIRED_IN.items():
        if isinstance(data[part], dict):  # (not an object: the codec names it)
            _require(data[part], keys, f"{part}.")
    if not isinstance(data["passed"], bool):
        raise BadValue(f"bad key 'passed': expected true or false, got {data['passed']!r:.60}")
    return REPORT_JSON.from_json(Report, data)


def _require(data: dict, keys: tuple[str, ...], prefix: str = "") -> None:
    missing = [k for k in keys if k not in data]
    if missing:
        raise BadValue(f"not a report: missing key '{prefix}{missing[0]}'")
