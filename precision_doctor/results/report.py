"""The typed report of a diagnose run: what report.json holds, and what the renderers read.

`Report.to_json()` gives the keys and values report.json has always had (docs/guide.md's contract:
`fallback_nodes`, `passed`, `evaluations`, `elapsed_s`, `strategy`, `precision`, `backend`,
`tolerance`, ...), plus `schema_version` and `verdict`; non-finite numbers become "inf", "-inf", "nan". What the run
means (`passed`, `verdict`) is derived from the rest (`Report.statement`, results/verdict.py), never read back.
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
from precision_doctor.outcome import Decider, Growth, RunStatus
from precision_doctor.results.verdict import Statement, answered, statement
from precision_doctor.spec import RunSpec

# 2: `passed` is derived from the statement (the perturbed-copy prediction no longer decides it; a run that stopped
# early is no pass) and `verdict` holds the statement. Files of another version are refused (`_report`).
SCHEMA_VERSION = 2
REPORT = "report.json"
REQUIRED = ("status", "passed", "fallback_nodes", "evaluations", "elapsed_s", "strategy", "precision", "backend",
            "tolerance")


class ReportError(UserError):
    """A report.json that cannot be read; the message names the file and the key (`reason`: the message without
    the file, for a front end that does not show its paths)."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = reason or message


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
class Invocation:
    """How the run was started, so that the reports can print a command that runs it again: the settings with
    their paths relative to the run directory (absolute for files far from it), the run directory's name, and
    the front end that started it (`ORIGINS`: a service job's report prints a `submit` command)."""

    spec: RunSpec
    directory: str
    origin: str = "api"

    @classmethod
    def of(cls, spec: RunSpec, run_dir: str | Path, origin: str) -> Invocation:
        """The invocation of a run of `spec` (its relative paths: from the current directory) in `run_dir`."""
        run_dir = Path(run_dir).resolve()
        i = spec.inputs
        paths = {"model": near_path(spec.model, run_dir), "inputs.files": [near_path(f, run_dir) for f in i.files],
                 "inputs.validate_files": [near_path(f, run_dir) for f in i.validate_files],
                 "inputs.reference_outputs": near_path(i.reference_outputs, run_dir) if i.reference_outputs else None}
        return cls(spec.with_settings(paths), run_dir.name, origin)



@dataclass
class Checks:
    """Per-output checks of one fallback set (the baseline: everything in low precision)."""

    passed: bool
    outputs: dict[str, OutputCheck] = field(default_factory=dict)


@dataclass
class Validation:
    """The answer checked on held-out samples, on `backend` (the one with the last word). When it failed there and
    it was repaired with them (grown by what their error is attributed to), `first_candidate` is the set that
    failed and `research`/`passed_after_research` say how that went (the repaired answer is then not validated: no
    unseen sample is left); `ties`: those of `failing_samples` that fail under ONNX Runtime CUDA's default kernel
    choice but pass under another (measure/spread.py; reports before 2026-12-02 counted them apart from
    `failing_samples`, as passing); `of` is "searched answer" where
    something changed the answer after the check (reports before the check ran last)."""

    passed: bool
    samples: int
    failing_samples: list[int] = field(default_factory=list)
    outputs: dict[str, OutputCheck] = field(default_factory=dict)
    first_candidate: list[str] | None = None
    research: str | None = None
    passed_after_research: bool | None = None
    of: str | None = None
    backend: str | None = None  # where the held-out samples ran (None: reports before it was recorded)
    ties: list[int] = field(default_factory=list)  # of failing_samples: another cuDNN algorithm choice passes them

    @property
    def tol_used(self) -> float | None:
        """The largest share of the tolerance any output uses, when the answer passed (None otherwise)."""
        if not self.passed:
            return None
        vals = [o.tol_used for o in self.outputs.values() if o.tol_used is not None and not math.isnan(o.tol_used)]
        return max(vals) if vals else None


@dataclass
class ExpectedHeadroom:
    """The answer checked on samples the search did not see (pipeline/probe.py): `perturbed_copies` fresh
    perturbed copies of the `searched` samples and `held_out` held-out samples (`held_out_from_user`: of the
    user's data, not generated). `share_unseen`: the largest share of the tolerance among them; `headroom`
    = 1 - that (negative: the answer fails there). `failing_copies`/`failing_held_out` count the unseen
    samples the answer fails on; `predicted_share`: the share a new input exceeds with probability `risk`
    (a log-normal fitted to the unseen shares; None with fewer than two positive ones); `researched`: the
    answer was predicted not to hold and a second search ran (once) with the unseen samples it missed, at
    `research_margin`, and the figures are of its answer on fresh copies no search saw; `holds`: predicted
    to hold on new inputs (no unseen sample fails and `predicted_share` <= 1); `backend`: where the unseen
    shares were measured (None: the search backend; the confirm backend when it certified);
    `first_answer_size`/`first_predicted_share`: after a second search, the first answer's size and the share
    a new input was predicted to exceed with it (None when not predicted: a held-out sample failed it), so the
    price of the larger answer can be weighed."""

    searched: int
    search_copies: int
    perturbed_copies: int
    held_out: int
    held_out_from_user: bool
    share_searched: float | None
    share_unseen: float | None
    headroom: float | None
    failing_copies: int = 0
    failing_held_out: int = 0
    researched: bool = False
    holds: bool = True
    backend: str | None = None
    predicted_share: float | None = None
    risk: float | None = None
    research_margin: float | None = None
    first_answer_size: int | None = None
    first_predicted_share: float | None = None

    @property
    def unseen(self) -> int:
        return self.perturbed_copies + self.held_out


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
    is a new session; None where nothing was added)."""

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


# -- the report ----------------------------------------------------------------------------------------


@dataclass
class Report:
    """Everything a diagnose run found. `status`: complete, no_solution, budget_exhausted or interrupted. The
    fields are in report.json's order of keys."""

    schema_version: int = SCHEMA_VERSION
    tool: str = "precision-doctor"
    version: str = ""
    created: str = ""
    model: ModelInfo | None = None
    precision: str = ""
    backend: str = ""
    strategy: str = ""
    cost: str = ""
    tolerance: Tolerance = field(default_factory=Tolerance)
    margin: float = 0.0
    tolerance_used: ToleranceUsed | None = None
    confirm: Confirm | None = None
    certified_by: Certification | None = None
    # the runtime the answer is for (`backends.target`; None: a report from before targets, made for ort-cuda's rules)
    target: str | None = None
    other_runtime: OtherRuntime | None = None  # the answer checked for the other runtime, and that runtime's answer
    emulation_rules: str | None = None
    emulation_notes: list[EmulationNote] = field(default_factory=list)
    status: RunStatus = RunStatus.COMPLETE
    reason: str | None = None
    # report.json's `passed` and `verdict` come here, derived from the rest (`statement`)
    fallback_nodes: list[str] = field(default_factory=list)
    fallback_size: int = 0
    fp32_flop_share: float = 0.0
    # the answer keeps every node the search could keep in FP32: no low-precision benefit (wording: PASSED_ALL_FP32)
    everything_fp32: bool = False
    rounding_floor: RoundingFloor | None = None  # what rounding the reference outputs alone uses of the tolerance
    evaluations: int = 0
    memo_hits: int = 0
    one_minimal_checked: bool | None = None
    elapsed_s: float = 0.0
    timing: Timing | None = None  # elapsed_s in parts: before the search, the search (the time budget's), after it
    samples: SampleCounts = field(default_factory=SampleCounts)
    inputs: dict[str, Any] = field(default_factory=dict)
    baseline: Checks | None = None
    outputs: dict[str, OutputCheck] = field(default_factory=dict)
    validation: Validation | None = None
    expected_headroom: ExpectedHeadroom | None = None  # the perturbed-copy probe of reports before it was removed
    kernel_spread: KernelSpread | None = None  # the GPU's own spread under its kernel choices (measure/spread.py)
    first_divergence: str | None = None
    first_divergence_node: str | None = None
    ranking: list[str] = field(default_factory=list)
    trajectory: list[TrajectoryRow] = field(default_factory=list)
    layers: list[Layer] = field(default_factory=list)
    format_limits: FormatLimits = field(default_factory=FormatLimits)
    artifacts: dict[str, str] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)
    forced_fp32_nodes: dict[str, str] = field(default_factory=dict)  # node -> why fixed.onnx keeps it FP32 too
    trt_check: TrtCheckResult | None = None
    engine: EngineResult | None = None
    knobs: KnobsResult | None = None
    held_out_choice: HeldOutChoice | None = None
    held_out_bound: HeldOutBound | None = None
    decided_by: Decider | None = None
    search_rounds: SearchRounds | None = None
    answers: TwoAnswers | None = None
    pricing: Pricing | None = None
    input_shapes: list[InputShape] = field(default_factory=list)  # the model's inputs: declared, and as the samples ran
    invocation: Invocation | None = None
    service_job: ServiceJob | None = None
    shape_groups: list[ShapeGroupInfo] = field(default_factory=list)

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
                 "one_minimal_checked", "tolerance_used", "trajectory")
_VALIDATION_IF_SET = ("first_candidate", "research", "passed_after_research", "of", "backend")


def _report_out(r: Report, d: dict) -> dict:
    if r.confirm is None and d["tolerance_used"] is not None:  # the confirm share only where a confirmation ran
        del d["tolerance_used"]["confirm"]
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
    Confirm: Hook(out=lambda c, d: _pick(d, ("backend", "searched_answer", "passed", "skipped")
                                         if c.skipped is not None else _CONFIRM_KEYS)),
    Validation: Hook(out=lambda v, d: {k: x for k, x in d.items() if k not in _VALIDATION_IF_SET or x is not None}),
    TrtCheckResult: Hook(out=_trt_check_out),
    EngineResult: Hook(out=_engine_out),
    KnobsResult: Hook(out=lambda k, d: {**d, "changed_answer": k.changed_answer}),
    DeployLatency: Hook(out=lambda lat, d: {**d, "latency_kept": lat.latency_kept}),
    Tolerance: Hook(out=lambda t, d: {k: v for k, v in d.items() if k not in ("output_atol", "output_rtol") or v}),
    Invocation: Hook(out=lambda i, d: _pick(d, ("origin", "directory", "spec")), into=_invocation_in),
    RunSpec: Hook(encode=lambda s: s.to_json(), decode=_spec_in),
})


def _report(data: Any) -> Report:
    if not isinstance(data, dict):
        raise BadValue(f"not a report (expected a JSON object, got {type(data).__name__})")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise BadValue(f"not a report: missing key '{missing[0]}'")
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
    if not isinstance(data["passed"], bool):
        raise BadValue(f"bad key 'passed': expected true or false, got {data['passed']!r:.60}")
    return REPORT_JSON.from_json(Report, data)
