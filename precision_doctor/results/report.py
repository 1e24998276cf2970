"""The typed report of a diagnose run: what report.json holds, and what the renderers read.

`Report.to_json()` gives the keys and values report.json has always had (docs/guide.md's contract:
`fallback_nodes`, `passed`, `evaluations`, `elapsed_s`, `strategy`, `precision`, `backend`,
`tolerance`, ...), plus `schema_version`; non-finite numbers become "inf", "-inf", "nan".
`Report.from_json()` reads those files, also ones written before `schema_version` existed (absent
optional keys take their defaults), and raises UserError naming the key for a malformed one.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from precision_doctor.costs import AnswerCost, DeployLatency, FrontierPoint, GroupUse, Tradeoff, TradeoffPoint
from precision_doctor.errors import UserError
from precision_doctor.graph.coverage import EmulationNote
from precision_doctor.graph.shapes import InputShape
from precision_doctor.graph.toolnames import near_path
from precision_doctor.jsonio import jsonable
from precision_doctor.measure.tolerance import OutputCheck, Tolerance
from precision_doctor.outcome import Decider, Growth, RunStatus
from precision_doctor.spec import RunSpec

SCHEMA_VERSION = 1
REPORT = "report.json"
REQUIRED = ("status", "passed", "fallback_nodes", "evaluations", "elapsed_s", "strategy", "precision", "backend",
            "tolerance")


class ReportError(UserError):
    """A report.json that cannot be read; the message names the file and the key."""


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

    def to_json(self) -> dict:
        return {"origin": self.origin, "directory": self.directory, "spec": self.spec.to_json()}


@dataclass
class Checks:
    """Per-output checks of one fallback set (the baseline: everything in low precision)."""

    passed: bool
    outputs: dict[str, OutputCheck] = field(default_factory=dict)


@dataclass
class Validation:
    """The answer checked on held-out samples. When it failed there and the search ran again with them,
    `first_candidate` is the set that failed and `research`/`passed_after_research` say how that went;
    `of` is "searched answer" when a confirmation on another backend changed the answer afterwards."""

    passed: bool
    samples: int
    failing_samples: list[int] = field(default_factory=list)
    outputs: dict[str, OutputCheck] = field(default_factory=dict)
    first_candidate: list[str] | None = None
    research: str | None = None
    passed_after_research: bool | None = None
    of: str | None = None

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
    not, `one_minimal_checked` is None (they were pruned on the search backend only)."""

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

    def to_json(self) -> dict:
        if self.skipped is not None:
            return {"backend": self.backend, "searched_answer": self.searched_answer, "passed": self.passed,
                    "skipped": self.skipped}
        return {
            "backend": self.backend, "samples": self.samples, "perturbed_copies": self.perturbed_copies,
            "searched_answer": self.searched_answer, "searched_answer_passed": self.searched_answer_passed,
            "pruned_searched": self.pruned_searched, "passed": self.passed, "status": self.status,
            "evaluations": self.evaluations, "memo_hits": self.memo_hits, "one_minimal_checked": self.one_minimal_checked,
            "tolerance_used": self.tolerance_used, "trajectory": [asdict(t) for t in self.trajectory],
        }


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

    def to_json(self) -> dict:
        if not self.ran:
            return {"ran": False, "reason": self.reason}
        return {"ran": True, "passed": self.passed, "library": self.library, "version": self.version, "onnx": self.onnx,
                "layers": self.layers, "checked_layers": self.checked_layers, "checked_nodes": self.checked_nodes,
                "mismatches": [asdict(m) for m in self.mismatches], "unmapped": self.unmapped}


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

    def to_json(self) -> dict:
        if not self.built:
            return {"built": False, "reason": self.reason}
        out = asdict(self)
        del out["reason"]
        return out


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

    def to_json(self) -> dict:
        out = asdict(self)
        out["changed_answer"] = self.changed_answer
        return out


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

    def to_json(self) -> dict:
        return {
            "objective": self.objective, "objective_means": self.objective_means,
            "answer": None if self.answer is None else asdict(self.answer),
            "first_answer": None if self.first_answer is None else asdict(self.first_answer),
            "groups": [asdict(g) for g in self.groups], "gaps_closed": self.gaps_closed,
            "refine_evaluations": self.refine_evaluations,
            "latency": None if self.latency is None else self.latency.to_json(),
            "latency_note": self.latency_note,
            "tradeoff": None if self.tradeoff is None else asdict(self.tradeoff),
        }


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
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, source: str = "service_job") -> ServiceJob:
        """A ServiceJob from its JSON; ReportError naming the key when malformed."""
        try:
            return _service_job(data, source)
        except _Bad as exc:
            raise ReportError(str(exc)) from None


# -- the report ----------------------------------------------------------------------------------------


@dataclass
class Report:
    """Everything a diagnose run found. `status`: complete, no_solution, budget_exhausted or interrupted."""

    status: RunStatus = RunStatus.COMPLETE
    passed: bool = False
    precision: str = ""
    backend: str = ""
    strategy: str = ""
    cost: str = ""
    tolerance: Tolerance = field(default_factory=Tolerance)
    margin: float = 0.0
    reason: str | None = None
    fallback_nodes: list[str] = field(default_factory=list)
    fallback_size: int = 0
    fp32_flop_share: float = 0.0
    evaluations: int = 0
    memo_hits: int = 0
    one_minimal_checked: bool | None = None
    elapsed_s: float = 0.0
    tool: str = "precision-doctor"
    version: str = ""
    created: str = ""
    model: ModelInfo | None = None
    tolerance_used: ToleranceUsed | None = None
    confirm: Confirm | None = None
    certified_by: Certification | None = None
    emulation_rules: str | None = None
    emulation_notes: list[EmulationNote] = field(default_factory=list)
    samples: SampleCounts = field(default_factory=SampleCounts)
    inputs: dict[str, Any] = field(default_factory=dict)
    baseline: Checks | None = None
    outputs: dict[str, OutputCheck] = field(default_factory=dict)
    validation: Validation | None = None
    expected_headroom: ExpectedHeadroom | None = None
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
    schema_version: int = SCHEMA_VERSION

    @property
    def interrupted(self) -> bool:
        return self.status == RunStatus.INTERRUPTED

    # -- JSON ------------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        """report.json's contents (non-finite numbers as "inf", "-inf", "nan")."""
        used = None
        if self.tolerance_used is not None:
            used = {"search": self.tolerance_used.search, "validation": self.tolerance_used.validation}
            if self.confirm is not None:
                used["confirm"] = self.tolerance_used.confirm
        return jsonable({
            "schema_version": self.schema_version,
            "tool": self.tool,
            "version": self.version,
            "created": self.created,
            "model": None if self.model is None else asdict(self.model),
            "precision": self.precision,
            "backend": self.backend,
            "strategy": self.strategy,
            "cost": self.cost,
            "tolerance": self.tolerance.to_dict(),
            "margin": self.margin,
            "tolerance_used": used,
            "confirm": None if self.confirm is None else self.confirm.to_json(),
            "certified_by": None if self.certified_by is None else asdict(self.certified_by),
            "emulation_rules": self.emulation_rules,
            "emulation_notes": [asdict(n) for n in self.emulation_notes],
            "status": self.status,
            "reason": self.reason,
            "passed": self.passed,
            "fallback_nodes": self.fallback_nodes,
            "fallback_size": self.fallback_size,
            "fp32_flop_share": self.fp32_flop_share,
            "evaluations": self.evaluations,
            "memo_hits": self.memo_hits,
            "one_minimal_checked": self.one_minimal_checked,
            "elapsed_s": self.elapsed_s,
            "samples": asdict(self.samples),
            "inputs": self.inputs,
            "baseline": None if self.baseline is None else {
                "passed": self.baseline.passed, "outputs": _checks_json(self.baseline.outputs)},
            "outputs": _checks_json(self.outputs),
            "validation": None if self.validation is None else _validation_json(self.validation),
            "expected_headroom": None if self.expected_headroom is None else asdict(self.expected_headroom),
            "first_divergence": self.first_divergence,
            "first_divergence_node": self.first_divergence_node,
            "ranking": self.ranking,
            "trajectory": [asdict(t) for t in self.trajectory],
            "layers": [asdict(lay) for lay in self.layers],
            "format_limits": asdict(self.format_limits),
            "artifacts": self.artifacts,
            "commands": self.commands,
            "forced_fp32_nodes": self.forced_fp32_nodes,
            "trt_check": None if self.trt_check is None else self.trt_check.to_json(),
            "engine": None if self.engine is None else self.engine.to_json(),
            "knobs": None if self.knobs is None else self.knobs.to_json(),
            "held_out_choice": None if self.held_out_choice is None else asdict(self.held_out_choice),
            "held_out_bound": None if self.held_out_bound is None else asdict(self.held_out_bound),
            "decided_by": self.decided_by,
            "search_rounds": None if self.search_rounds is None else asdict(self.search_rounds),
            "answers": None if self.answers is None else asdict(self.answers),
            "pricing": None if self.pricing is None else self.pricing.to_json(),
            "input_shapes": [s.to_json() for s in self.input_shapes],
            "invocation": None if self.invocation is None else self.invocation.to_json(),
            "service_job": None if self.service_job is None else self.service_job.to_json(),
            "shape_groups": [asdict(g) for g in self.shape_groups],
        })

    @classmethod
    def from_json(cls, data: Any, source: str = "report.json") -> Report:
        """A Report from report.json's contents; ReportError ("<source>: ...") names a missing or bad key."""
        try:
            return _report(data)
        except _Bad as exc:
            raise ReportError(f"{source}: {exc}") from None

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


def _checks_json(checks: dict[str, OutputCheck]) -> dict:
    return {k: v.to_dict() for k, v in checks.items()}


def _validation_json(v: Validation) -> dict:
    out: dict[str, Any] = {"passed": v.passed, "samples": v.samples, "failing_samples": v.failing_samples,
                           "outputs": _checks_json(v.outputs)}
    for key in ("first_candidate", "research", "passed_after_research", "of"):
        if getattr(v, key) is not None:
            out[key] = getattr(v, key)
    return out


# -- reading -------------------------------------------------------------------------------------------


class _Bad(Exception):
    """A malformed value; the message names its key path."""


def _get(d: dict, key: str, where: str, conv, default: Any = ..., optional: bool = False) -> Any:
    """`d[key]` converted by `conv`; missing: `default` (or _Bad when there is none); None allowed when `optional`."""
    path = f"{where}.{key}" if where else key
    if key not in d:
        if default is ...:
            raise _Bad(f"missing key '{path}'")
        return default
    value = d[key]
    if value is None and optional:
        return None
    return conv(value, path)


def _mapping(v: Any, path: str) -> dict:
    if not isinstance(v, dict):
        raise _Bad(f"bad key '{path}': expected an object, got {type(v).__name__}")
    return v


def _str(v: Any, path: str) -> str:
    if not isinstance(v, str):
        raise _Bad(f"bad key '{path}': expected a string, got {v!r:.60}")
    return v


def _status(v: Any, path: str) -> RunStatus:
    try:
        return RunStatus(_str(v, path))
    except ValueError:
        raise _Bad(f"bad key '{path}': expected one of {', '.join(s.value for s in RunStatus)}, got {v!r:.60}") from None


def _bool(v: Any, path: str) -> bool:
    if not isinstance(v, bool):
        raise _Bad(f"bad key '{path}': expected true or false, got {v!r:.60}")
    return v


def _int(v: Any, path: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _Bad(f"bad key '{path}': expected an integer, got {v!r:.60}")
    return v


def _num(v: Any, path: str) -> float:
    """A number as written (ints stay ints); "inf", "-inf", "nan" become floats."""
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return float(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _Bad(f"bad key '{path}': expected a number, got {v!r:.60}")
    return v


def _list(conv):
    def read(v: Any, path: str) -> list:
        if not isinstance(v, list):
            raise _Bad(f"bad key '{path}': expected a list, got {type(v).__name__}")
        return [conv(x, f"{path}[{i}]") for i, x in enumerate(v)]

    return read


def _str_map(v: Any, path: str) -> dict[str, str]:
    return {str(k): _str(x, f"{path}.{k}") for k, x in _mapping(v, path).items()}


def _output_check(v: Any, path: str) -> OutputCheck:
    d = _mapping(v, path)
    values = {}
    for f in fields(OutputCheck):
        if f.name == "passed":
            values[f.name] = _get(d, "passed", path, _bool)
        elif f.name in ("mismatches", "size"):
            values[f.name] = _get(d, f.name, path, _int)
        else:
            values[f.name] = _get(d, f.name, path, _num, default=math.nan)
    return OutputCheck(**values)


def _checks(v: Any, path: str) -> dict[str, OutputCheck]:
    return {str(k): _output_check(x, f"{path}.{k}") for k, x in _mapping(v, path).items()}


def _tolerance(v: Any, path: str) -> Tolerance:
    d = _mapping(v, path)
    try:
        return Tolerance(
            atol=_get(d, "atol", path, _num, default=Tolerance.atol),
            rtol=_get(d, "rtol", path, _num, default=Tolerance.rtol),
            check_error_stat=_get(d, "check_error_stat", path, _str, default=Tolerance.check_error_stat),
            cosine_floor=_get(d, "cosine_floor", path, _num, default=None, optional=True),
            output_atol=tuple(_get(d, "output_atol", path, _list(_str), default=[])),
            output_rtol=tuple(_get(d, "output_rtol", path, _list(_str), default=[])),
        )
    except UserError as exc:
        raise _Bad(f"bad key '{path}': {exc}") from None


def _model(v: Any, path: str) -> ModelInfo:
    d = _mapping(v, path)
    return ModelInfo(
        path=_get(d, "path", path, _str, default=""), hash=_get(d, "hash", path, _str, default=""),
        nodes=_get(d, "nodes", path, _int, default=0), candidates=_get(d, "candidates", path, _int, default=0),
        total_flops=_get(d, "total_flops", path, _int, default=0),
        renamed_nodes=_get(d, "renamed_nodes", path, _list(_str), default=[]),
        unsafe_names=_get(d, "unsafe_names", path, _str_map, default={}),
        link=_opt(d, "link", path, _str),
    )


def _trajectory_row(v: Any, path: str) -> TrajectoryRow:
    d = _mapping(v, path)
    return TrajectoryRow(
        step=_get(d, "step", path, _int), size=_get(d, "size", path, _int), cost=_get(d, "cost", path, _num),
        passed=_get(d, "passed", path, _bool), elapsed_s=_get(d, "elapsed_s", path, _num, default=0.0),
        at_s=_get(d, "at_s", path, _num, default=0.0), phase=_get(d, "phase", path, _str, default=""),
        fallback=_get(d, "fallback", path, _list(_str), default=[]),
        worst_output=_get(d, "worst_output", path, _str, default=None, optional=True),
        max_abs=_get(d, "max_abs", path, _num, default=None, optional=True),
        failed_sample=_get(d, "failed_sample", path, _int, default=None, optional=True),
        round=_get(d, "round", path, _int, default=0),
    )


_LAYER_NUMBERS = ("local_rel_l2", "rounding_rel_l2", "lowp_rel_l2", "fixed_rel_l2", "ref_absmax", "input_ref_absmax",
                  "frac_above_max", "frac_below_normal", "score")


def _layer(v: Any, path: str) -> Layer:
    d = _mapping(v, path)
    floats = {k: _get(d, k, path, _num, default=None, optional=True) for k in _LAYER_NUMBERS}
    return Layer(
        index=_get(d, "index", path, _int), name=_get(d, "name", path, _str),
        op_type=_get(d, "op_type", path, _str, default=""), flops=_get(d, "flops", path, _int, default=0),
        rank=_get(d, "rank", path, _int, default=None, optional=True),
        fallback=_get(d, "fallback", path, _bool, default=False),
        input_sensitive=_get(d, "input_sensitive", path, _bool, default=False),
        producers=_get(d, "producers", path, _list(_str), default=[]), **floats,
    )


def _validation(v: Any, path: str) -> Validation:
    d = _mapping(v, path)
    return Validation(
        passed=_get(d, "passed", path, _bool), samples=_get(d, "samples", path, _int),
        failing_samples=_get(d, "failing_samples", path, _list(_int), default=[]),
        outputs=_get(d, "outputs", path, _checks, default={}),
        first_candidate=_get(d, "first_candidate", path, _list(_str), default=None, optional=True),
        research=_get(d, "research", path, _str, default=None, optional=True),
        passed_after_research=_get(d, "passed_after_research", path, _bool, default=None, optional=True),
        of=_get(d, "of", path, _str, default=None, optional=True),
    )


def _expected_headroom(v: Any, path: str) -> ExpectedHeadroom:
    d = _mapping(v, path)
    counts = {k: _get(d, k, path, _int, default=0) for k in
              ("searched", "search_copies", "perturbed_copies", "held_out", "failing_copies", "failing_held_out")}
    shares = {k: _opt(d, k, path, _num) for k in
              ("share_searched", "share_unseen", "headroom", "predicted_share", "risk", "research_margin",
               "first_predicted_share")}
    flags = {k: _get(d, k, path, _bool, default=default) for k, default in
             (("held_out_from_user", False), ("researched", False), ("holds", True))}
    return ExpectedHeadroom(**counts, **shares, **flags, backend=_get(d, "backend", path, _str, default=None, optional=True),
                            first_answer_size=_get(d, "first_answer_size", path, _int, default=None, optional=True))


def _confirm(v: Any, path: str) -> Confirm:
    d = _mapping(v, path)
    return Confirm(
        backend=_get(d, "backend", path, _str), searched_answer=_get(d, "searched_answer", path, _list(_str)),
        passed=_get(d, "passed", path, _bool, optional=True),
        skipped=_get(d, "skipped", path, _str, default=None, optional=True),
        samples=_get(d, "samples", path, _int, default=None, optional=True),
        searched_answer_passed=_get(d, "searched_answer_passed", path, _bool, default=None, optional=True),
        status=_get(d, "status", path, _status, default=None, optional=True),
        evaluations=_get(d, "evaluations", path, _int, default=None, optional=True),
        memo_hits=_get(d, "memo_hits", path, _int, default=None, optional=True),
        one_minimal_checked=_get(d, "one_minimal_checked", path, _bool, default=None, optional=True),
        tolerance_used=_get(d, "tolerance_used", path, _num, default=None, optional=True),
        trajectory=_get(d, "trajectory", path, _list(_trajectory_row), default=[]),
        perturbed_copies=_get(d, "perturbed_copies", path, _int, default=None, optional=True),
        pruned_searched=_get(d, "pruned_searched", path, _bool, default=None, optional=True),
    )


def _certification(v: Any, path: str) -> Certification:
    d = _mapping(v, path)
    return Certification(
        backend=_get(d, "backend", path, _str), how=_get(d, "how", path, _str), samples=_get(d, "samples", path, _int),
        gpu=_get(d, "gpu", path, _bool, default=False),
        rules=_get(d, "rules", path, _str, default=None, optional=True),
        not_on_gpu=_get(d, "not_on_gpu", path, _str, default=None, optional=True),
        unconfirmed=_get(d, "unconfirmed", path, _list(_str), default=[]),
    )


def _shape_group(v: Any, path: str) -> ShapeGroupInfo:
    d = _mapping(v, path)
    shapes = {str(k): _list(_int)(x, f"{path}.shapes.{k}") for k, x in _get(d, "shapes", path, _mapping).items()}
    return ShapeGroupInfo(shapes, *(_get(d, k, path, _int, default=0) for k in ("samples", "held_out", "captured")))


def _emulation_note(v: Any, path: str) -> EmulationNote:
    d = _mapping(v, path)
    return EmulationNote(
        kind=_get(d, "kind", path, _str), op_type=_get(d, "op_type", path, _str), count=_get(d, "count", path, _int),
        nodes=_get(d, "nodes", path, _list(_str), default=[]), detail=_get(d, "detail", path, _str, default=""),
        factor=_get(d, "factor", path, _num, default=None, optional=True),
    )


def _tolerance_used(v: Any, path: str) -> ToleranceUsed:
    d = _mapping(v, path)
    return ToleranceUsed(**{k: _get(d, k, path, _num, default=None, optional=True)
                            for k in ("search", "validation", "confirm")})


def _mismatch(v: Any, path: str) -> TrtLayerMismatch:
    d = _mapping(v, path)
    return TrtLayerMismatch(**{k: _get(d, k, path, _str) for k in ("node", "layer", "layer_type", "role", "expected")},
                            found=_get(d, "found", path, _list(_str), default=[]))


def _opt(d: dict, key: str, path: str, conv) -> Any:
    return _get(d, key, path, conv, default=None, optional=True)


def _trt_check(v: Any, path: str) -> TrtCheckResult:
    d = _mapping(v, path)
    return TrtCheckResult(
        ran=_get(d, "ran", path, _bool), reason=_opt(d, "reason", path, _str), library=_opt(d, "library", path, _str),
        version=_opt(d, "version", path, _str), onnx=_opt(d, "onnx", path, _str), layers=_opt(d, "layers", path, _int),
        checked_layers=_opt(d, "checked_layers", path, _int), checked_nodes=_opt(d, "checked_nodes", path, _int),
        mismatches=_get(d, "mismatches", path, _list(_mismatch), default=[]),
        unmapped=_get(d, "unmapped", path, _list(_str), default=[]),
    )


def _shapes(v: Any, path: str) -> dict[str, list[int]]:
    return {str(k): _list(_int)(x, f"{path}.{k}") for k, x in _mapping(v, path).items()}


def _engine(v: Any, path: str) -> EngineResult:
    d = _mapping(v, path)
    return EngineResult(
        built=_get(d, "built", path, _bool), reason=_opt(d, "reason", path, _str), plan=_opt(d, "plan", path, _str),
        library=_opt(d, "library", path, _str), version=_opt(d, "version", path, _str),
        targets=_get(d, "targets", path, _list(_str), default=[]), seconds=_opt(d, "seconds", path, _num),
        size_bytes=_opt(d, "size_bytes", path, _int), tf32=_get(d, "tf32", path, _bool, default=False),
        tactic_sources=_opt(d, "tactic_sources", path, _list(_str)), cache=_opt(d, "cache", path, _str),
        input_shapes=_get(d, "input_shapes", path, _shapes, default={}),
    )


def _knob_trial(v: Any, path: str) -> KnobTrial:
    d = _mapping(v, path)
    return KnobTrial(knobs=_get(d, "knobs", path, _str), fallback_size=_get(d, "fallback_size", path, _int),
                     why=_get(d, "why", path, _str, default=""), passed=_opt(d, "passed", path, _bool),
                     tolerance_used=_opt(d, "tolerance_used", path, _num))


def _knobs(v: Any, path: str) -> KnobsResult:
    d = _mapping(v, path)
    return KnobsResult(
        backend=_get(d, "backend", path, _str), configurations=_get(d, "configurations", path, _list(_str), default=[]),
        searched_answer=_get(d, "searched_answer", path, _list(_str), default=[]),
        status=_get(d, "status", path, _status, default=RunStatus.COMPLETE), note=_opt(d, "note", path, _str),
        samples=_get(d, "samples", path, _int, default=0), evaluations=_get(d, "evaluations", path, _int, default=0),
        memo_hits=_get(d, "memo_hits", path, _int, default=0),
        trials=_get(d, "trials", path, _list(_knob_trial), default=[]), best=_opt(d, "best", path, _str),
        best_settings=_get(d, "best_settings", path, _str_map, default={}),
        answer=_get(d, "answer", path, _list(_str), default=[]), tolerance_used=_opt(d, "tolerance_used", path, _num),
    )


def _enum(kind):
    def read(v: Any, path: str):
        try:
            return kind(_str(v, path))
        except ValueError:
            raise _Bad(f"bad key '{path}': expected one of {', '.join(s.value for s in kind)}, got {v!r:.60}") from None

    return read


def _held_out_bound(v: Any, path: str) -> HeldOutBound:
    d = _mapping(v, path)
    return HeldOutBound(
        samples=_get(d, "samples", path, _int), failures=_get(d, "failures", path, _int),
        confidence=_get(d, "confidence", path, _num), failure_rate=_get(d, "failure_rate", path, _num),
        method=_get(d, "method", path, _str), useful_rate=_get(d, "useful_rate", path, _num),
        samples_for_useful=_get(d, "samples_for_useful", path, _int),
        inputs_for_useful=_get(d, "inputs_for_useful", path, _int, default=0),
        of=_get(d, "of", path, _str, default="final answer"),
    )


def _held_out_choice(v: Any, path: str) -> HeldOutChoice:
    d = _mapping(v, path)
    return HeldOutChoice(source=_get(d, "source", path, _str), samples=_get(d, "samples", path, _int),
                         reason=_get(d, "reason", path, _str, default=""))


def _search_round(v: Any, path: str) -> SearchRound:
    d = _mapping(v, path)
    return SearchRound(
        round=_get(d, "round", path, _int), working=_get(d, "working", path, _list(_int)),
        answer=_get(d, "answer", path, _list(_str), optional=True), evaluations=_get(d, "evaluations", path, _int),
        checked=_get(d, "checked", path, _int), counterexamples=_get(d, "counterexamples", path, _list(_int)),
        seconds=_get(d, "seconds", path, _num, default=0.0), search=_get(d, "search", path, _str, default="first"),
    )


def _search_rounds(v: Any, path: str) -> SearchRounds:
    d = _mapping(v, path)
    return SearchRounds(
        search_samples=_get(d, "search_samples", path, _int), start=_get(d, "start", path, _int),
        rounds=_get(d, "rounds", path, _list(_search_round), default=[]),
        verified=_get(d, "verified", path, _bool, default=False), failing=_get(d, "failing", path, _int, default=0),
        stopped=_opt(d, "stopped", path, _str), checked=_get(d, "checked", path, _int, default=0),
        captured=_get(d, "captured", path, _list(_int), default=[]),
    )


def _answer_summary(v: Any, path: str) -> AnswerSummary:
    d = _mapping(v, path)
    return AnswerSummary(
        nodes=_get(d, "nodes", path, _list(_str)), size=_get(d, "size", path, _int),
        fp32_flop_share=_get(d, "fp32_flop_share", path, _num), held_out=_opt(d, "held_out", path, _held_out_bound),
        search_failures=_get(d, "search_failures", path, _int, default=0),
    )


def _two_answers(v: Any, path: str) -> TwoAnswers:
    d = _mapping(v, path)
    return TwoAnswers(grown_by=_get(d, "grown_by", path, _list(_enum(Growth)), default=[]),
                      smaller=_get(d, "smaller", path, _answer_summary), safer=_get(d, "safer", path, _answer_summary))


def _answer_cost(v: Any, path: str) -> AnswerCost:
    d = _mapping(v, path)
    ints = {k: _get(d, k, path, _int) for k in ("fp32_flops", "total_flops", "casts", "casts_added", "cast_bytes",
                                                  "bytes_fixed", "bytes_fp32", "bytes_lowp", "batch")}
    return AnswerCost(fp32_flop_share=_get(d, "fp32_flop_share", path, _num), deploy_us=_get(d, "deploy_us", path, _num),
                      estimated_speedup_kept=_opt(d, "estimated_speedup_kept", path, _num),
                      shapes_from=_get(d, "shapes_from", path, _str), profile=_get(d, "profile", path, _str), **ints)


def _latency(v: Any, path: str) -> DeployLatency:
    d = _mapping(v, path)
    return DeployLatency(batch=_get(d, "batch", path, _int), device=_get(d, "device", path, _str),
                         runs=_get(d, "runs", path, _int),
                         **{k: _get(d, k, path, _num) for k in ("fp32_ms", "lowp_ms", "fixed_ms", "fp32_p90_ms",
                                                                 "lowp_p90_ms", "fixed_p90_ms")})


def _tradeoff_point(v: Any, path: str) -> TradeoffPoint:
    d = _mapping(v, path)
    return TradeoffPoint(
        multiplier=_get(d, "multiplier", path, _num), found=_get(d, "found", path, _bool),
        fallback_size=_opt(d, "fallback_size", path, _int), fp32_flop_share=_opt(d, "fp32_flop_share", path, _num),
        deploy_us=_opt(d, "deploy_us", path, _num), complete=_get(d, "complete", path, _bool, default=True),
        evaluations=_get(d, "evaluations", path, _int, default=0),
        fallback=_get(d, "fallback", path, _list(_str), default=[]),
    )


def _frontier_point(v: Any, path: str) -> FrontierPoint:
    d = _mapping(v, path)
    return FrontierPoint(share=_get(d, "share", path, _num), fallback_size=_get(d, "fallback_size", path, _int),
                         fp32_flop_share=_opt(d, "fp32_flop_share", path, _num), deploy_us=_opt(d, "deploy_us", path, _num))


def _tradeoff(v: Any, path: str) -> Tradeoff:
    d = _mapping(v, path)
    return Tradeoff(points=_get(d, "points", path, _list(_tradeoff_point), default=[]),
                    frontier=_get(d, "frontier", path, _list(_frontier_point), default=[]),
                    evaluations=_get(d, "evaluations", path, _int, default=0))


def _group_use(v: Any, path: str) -> GroupUse:
    d = _mapping(v, path)
    return GroupUse(kind=_get(d, "kind", path, _str), kept=_get(d, "kept", path, _list(_str)),
                    released=_get(d, "released", path, _list(_str), default=[]))


def _pricing(v: Any, path: str) -> Pricing:
    d = _mapping(v, path)
    return Pricing(
        objective=_get(d, "objective", path, _str), objective_means=_get(d, "objective_means", path, _str, default=""),
        answer=_opt(d, "answer", path, _answer_cost), first_answer=_opt(d, "first_answer", path, _answer_cost),
        groups=_get(d, "groups", path, _list(_group_use), default=[]),
        gaps_closed=_get(d, "gaps_closed", path, _list(_list(_str)), default=[]),
        refine_evaluations=_get(d, "refine_evaluations", path, _int, default=0),
        latency=_opt(d, "latency", path, _latency), latency_note=_opt(d, "latency_note", path, _str),
        tradeoff=_opt(d, "tradeoff", path, _tradeoff),
    )


def _dims(v: Any, path: str) -> tuple[int | None, ...]:
    return tuple(None if x is None else _int(x, f"{path}[{i}]") for i, x in enumerate(_list(lambda y, p: y)(v, path)))


def _input_shape(v: Any, path: str) -> InputShape:
    d = _mapping(v, path)
    ints = {k: tuple(_get(d, k, path, _list(_int))) for k in ("min", "opt", "max")}
    return InputShape(name=_get(d, "name", path, _str), declared=_get(d, "declared", path, _dims), **ints)


def _invocation(v: Any, path: str) -> Invocation:
    d = _mapping(v, path)
    origin = _get(d, "origin", path, _str, default="api")
    if origin not in ORIGINS:
        raise _Bad(f"bad key '{path}.origin': expected one of {', '.join(ORIGINS)}, got {origin!r:.60}")
    try:
        spec = RunSpec.from_json(_get(d, "spec", path, _mapping))
    except UserError as exc:
        raise _Bad(f"bad key '{path}.spec': {exc}") from None
    return Invocation(spec=spec, directory=_get(d, "directory", path, _str), origin=origin)


def _service_job(v: Any, path: str) -> ServiceJob:
    d = _mapping(v, path)
    return ServiceJob(
        id=_get(d, "id", path, _str), server=_opt(d, "server", path, _str), model=_get(d, "model", path, _str, default=""),
        inputs=_get(d, "inputs", path, _list(_str), default=[]),
        validate_inputs=_get(d, "validate_inputs", path, _list(_str), default=[]),
        reference_outputs=_opt(d, "reference_outputs", path, _str), remote=_get(d, "remote", path, _bool, default=False),
    )


def _report(data: Any) -> Report:
    if not isinstance(data, dict):
        raise _Bad(f"not a report (expected a JSON object, got {type(data).__name__})")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise _Bad(f"not a report: missing key '{missing[0]}'")
    d = data
    return Report(
        schema_version=_get(d, "schema_version", "", _int, default=SCHEMA_VERSION),
        tool=_get(d, "tool", "", _str, default="precision-doctor"),
        version=_get(d, "version", "", _str, default=""),
        created=_get(d, "created", "", _str, default=""),
        model=_get(d, "model", "", _model, default=None, optional=True),
        precision=_get(d, "precision", "", _str),
        backend=_get(d, "backend", "", _str),
        strategy=_get(d, "strategy", "", _str),
        cost=_get(d, "cost", "", _str, default=""),
        tolerance=_get(d, "tolerance", "", _tolerance),
        margin=_get(d, "margin", "", _num, default=0.0, optional=True) or 0.0,
        tolerance_used=_get(d, "tolerance_used", "", _tolerance_used, default=None, optional=True),
        confirm=_get(d, "confirm", "", _confirm, default=None, optional=True),
        certified_by=_get(d, "certified_by", "", _certification, default=None, optional=True),
        emulation_rules=_get(d, "emulation_rules", "", _str, default=None, optional=True),
        emulation_notes=_get(d, "emulation_notes", "", _list(_emulation_note), default=[]),
        status=_get(d, "status", "", _status),
        reason=_get(d, "reason", "", _str, default=None, optional=True),
        passed=_get(d, "passed", "", _bool),
        fallback_nodes=_get(d, "fallback_nodes", "", _list(_str)),
        fallback_size=_get(d, "fallback_size", "", _int, default=len(d["fallback_nodes"] or [])),
        fp32_flop_share=_get(d, "fp32_flop_share", "", _num, default=0.0),
        evaluations=_get(d, "evaluations", "", _int),
        memo_hits=_get(d, "memo_hits", "", _int, default=0),
        one_minimal_checked=_get(d, "one_minimal_checked", "", _bool, default=None, optional=True),
        elapsed_s=_get(d, "elapsed_s", "", _num),
        samples=SampleCounts(**{k: _get(_get(d, "samples", "", _mapping, default={}), k, "samples", _int, default=0)
                                for k in ("search", "validation")}),
        inputs=_get(d, "inputs", "", _mapping, default={}),
        baseline=_get(d, "baseline", "", lambda v, p: Checks(
            _get(_mapping(v, p), "passed", p, _bool), _get(v, "outputs", p, _checks, default={})),
            default=None, optional=True),
        outputs=_get(d, "outputs", "", _checks, default={}),
        validation=_get(d, "validation", "", _validation, default=None, optional=True),
        expected_headroom=_opt(d, "expected_headroom", "", _expected_headroom),
        first_divergence=_get(d, "first_divergence", "", _str, default=None, optional=True),
        first_divergence_node=_get(d, "first_divergence_node", "", _str, default=None, optional=True),
        ranking=_get(d, "ranking", "", _list(_str), default=[]),
        trajectory=_get(d, "trajectory", "", _list(_trajectory_row), default=[]),
        layers=_get(d, "layers", "", _list(_layer), default=[]),
        format_limits=FormatLimits(**{k: _get(_get(d, "format_limits", "", _mapping, default={}), k, "format_limits",
                                              _num, default=None, optional=True) for k in ("max", "smallest_normal")}),
        artifacts=_get(d, "artifacts", "", _str_map, default={}),
        commands=_get(d, "commands", "", _str_map, default={}),
        forced_fp32_nodes=_get(d, "forced_fp32_nodes", "", _str_map, default={}),
        trt_check=_opt(d, "trt_check", "", _trt_check),
        engine=_opt(d, "engine", "", _engine),
        knobs=_opt(d, "knobs", "", _knobs),
        held_out_choice=_opt(d, "held_out_choice", "", _held_out_choice),
        held_out_bound=_opt(d, "held_out_bound", "", _held_out_bound),
        decided_by=_opt(d, "decided_by", "", _enum(Decider)),
        search_rounds=_opt(d, "search_rounds", "", _search_rounds),
        answers=_opt(d, "answers", "", _two_answers),
        pricing=_opt(d, "pricing", "", _pricing),
        input_shapes=_get(d, "input_shapes", "", _list(_input_shape), default=[]),
        invocation=_opt(d, "invocation", "", _invocation),
        service_job=_opt(d, "service_job", "", _service_job),
        shape_groups=_get(d, "shape_groups", "", _list(_shape_group), default=[]),
    )
