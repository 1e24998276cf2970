"""The report of a diagnose run, assembled from the typed pieces the pipeline produced, and written."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field, replace

from precision_doctor import __version__
from precision_doctor.backends.registry import check_only
from precision_doctor.data.workload import Workload
from precision_doctor.graph.coverage import EmulationNote
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.model import Model
from precision_doctor.graph.shapes import InputShape
from precision_doctor.jsonio import write_json
from precision_doctor.measure.analysis import Analysis
from precision_doctor.measure.floor import RoundingFloor
from precision_doctor.measure.spread import KernelSpread
from precision_doctor.outcome import Decider, Outcome
from precision_doctor.pipeline.answers import flop_share, held_out_measure
from precision_doctor.pipeline.artifacts import Written
from precision_doctor.pipeline.keep import capture_artifact
from precision_doctor.pipeline.knob_search import KNOBS_DIR
from precision_doctor.pipeline.strategy import trajectory_row, user_share
from precision_doctor.results.report import (
    REPORT,
    AnalysisRecord,
    AnswerRecord,
    Certification,
    ChecksRecord,
    Confirm,
    EngineResult,
    FormatLimits,
    HeldOutChoice,
    Invocation,
    KnobsResult,
    Layer,
    ModelInfo,
    OutputChecks,
    Pricing,
    PromiseRecord,
    Report,
    SampleCounts,
    SearchRecord,
    SearchRounds,
    ShapeGroupInfo,
    TensorRTRecord,
    Timing,
    ToleranceUsed,
    TrtCheckResult,
    TwoAnswers,
    Validation,
)
from precision_doctor.runfiles import RunDir
from precision_doctor.search import Oracle
from precision_doctor.search.oracle import Verdict
from precision_doctor.search.space import SearchSpace
from precision_doctor.spec import RunSpec

CHECKPOINT = "search.jsonl"


@dataclass(frozen=True)
class Searched:
    """What the search leaves the report: the analysis, the search space, the oracle (its evaluations and
    trajectory), the search backend's name, the counterexample-guided search's rounds and what rounding the
    reference outputs to the format alone uses of the tolerance (`floor`)."""

    analysis: Analysis
    space: SearchSpace
    oracle: Oracle
    backend: str
    rounds: SearchRounds | None = None
    floor: RoundingFloor | None = None


@dataclass(frozen=True)
class Promise:
    """What the verdict promises and on what: which samples were held out and why, which check decided, and the
    two answers when the run grew its answer."""

    held_out_choice: HeldOutChoice | None = None
    decided_by: Decider | None = None
    answers: TwoAnswers | None = None


@dataclass(frozen=True)
class AnswerChecks:
    """How the answer was checked after the search: on the confirm backend (`confirm`, with the verdict on the final
    set there, and the GPU's own `spread` under its kernel choices), by the knob search (with its verdict), on the
    held-out samples (`validation`), who certified it and what the emulator does not model in it."""

    validation: Validation | None = None
    confirm: Confirm | None = None
    spread: KernelSpread | None = None
    confirm_verdict: Verdict | None = None
    knobs: KnobsResult | None = None
    knob_verdict: Verdict | None = None
    certified_by: Certification | None = None
    emulation_notes: list[EmulationNote] = field(default_factory=list)


@dataclass(frozen=True)
class Produced:
    """What the run wrote for the answer: the fixed capture's per-layer errors, the artifacts and commands, the
    TensorRT check of fixed.onnx and the engine (all empty without an answer)."""

    fixed_rel: dict[str, float] = field(default_factory=dict)
    written: Written | None = None
    trt_check: TrtCheckResult | None = None
    engine: EngineResult | None = None


def build_report(outcome: Outcome, *, work: Workload, spec: RunSpec, n_validation: int, elapsed: float,
                 searched: Searched, checks: AnswerChecks, produced: Produced, promise: Promise = Promise(),
                 shapes: list[InputShape] | None = None, invocation: Invocation | None = None,
                 pricing: Pricing | None = None, timing: Timing | None = None) -> Report:
    """The report of a run that ended in `outcome`, at the settings `spec` (the second search's margin, if any).
    What it means (`passed`, the verdict) is derived from the report itself (`Report.statement`).
    `shapes`: the inputs' shapes as the samples ran; `invocation`: how the run was started; `pricing`: what the
    answer costs (pipeline/pricing.py); `timing`: `elapsed` in parts. FLOPs are the search space's cost model's (the
    shapes that ran) where it has one, else the declared shapes'."""
    model, oracle, fallback = work.model, searched.oracle, outcome.found
    final = fallback or frozenset()
    v = _Verdicts.of(fallback, oracle, checks)
    cm = searched.space.cost_model
    flops = cm.flops if cm is not None else {n.name: n.flops for n in model.nodes}
    inv = invocation or Invocation()
    return Report(
        status=outcome.status, reason=outcome.reason,  # `passed` is derived from these (Report.statement)
        model=_model_info(model, produced, sum(flops.values())),
        search=_search(spec, work, searched, v, checks, n_validation, elapsed, timing, shapes),
        answer=AnswerRecord(
            fallback_nodes=[n.name for n in model.nodes if n.name in final], fallback_size=len(final),
            fp32_flop_share=flop_share(model, final, searched.space.cost_model),
            everything_fp32=bool(final) and final >= searched.space.expand(searched.space.universe),
            forced_fp32_nodes=dict(produced.written.forced) if produced.written is not None else {},
            artifacts=_artifacts(produced, checks.knobs, capture_artifact(spec.capture.keep, outcome.status)),
            commands=produced.written.commands if produced.written is not None else {}),
        checks=ChecksRecord(
            outputs=dict(v.final.outputs) if v.final else {}, tolerance_used=_tolerance_used(spec, checks, v),
            confirm=checks.confirm, knobs=checks.knobs, kernel_spread=checks.spread, certified_by=checks.certified_by,
            emulation_notes=list(checks.emulation_notes)),
        promise=PromiseRecord(
            held_out_choice=promise.held_out_choice, validation=checks.validation,
            held_out_bound=held_out_measure(checks.validation, work.inputs.from_user)
            if fallback is not None and outcome.complete else None,
            decided_by=promise.decided_by, answers=promise.answers),
        analysis=_analysis(searched, spec, oracle, produced, final, work, flops),
        pricing=pricing,
        tensorrt=TensorRTRecord(check=produced.trt_check, engine=produced.engine),
        invocation=replace(inv, tool="precision-doctor", version=__version__,
                           created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")),
    )


def _search(spec: RunSpec, work: Workload, searched: Searched, v: _Verdicts, checks: AnswerChecks, n_validation: int,
            elapsed: float, timing: Timing | None, shapes: list[InputShape] | None) -> SearchRecord:
    oracle = searched.oracle
    return SearchRecord(
        precision=spec.precision, backend=searched.backend, strategy=spec.search.strategy, cost=spec.search.cost,
        tolerance=spec.tolerance, margin=spec.search.margin, target=spec.backends.target,
        emulation_rules=spec.backends.emulation_rules,
        samples=SampleCounts(search=len(work.samples), validation=n_validation), inputs=work.describe(),
        shape_groups=[ShapeGroupInfo(g.as_dict(), n, held, captured) for g, n, held, captured in work.shape_groups()],
        input_shapes=list(shapes or []),
        evaluations=oracle.evaluations, memo_hits=oracle.memo_hits,
        one_minimal_checked=_one_minimal_checked(oracle, v.fallback, checks.confirm, v.by_knobs),
        elapsed_s=elapsed, timing=timing, rounds=searched.rounds,
        trajectory=[trajectory_row(e) for e in oracle.trajectory],
    )


def _analysis(searched: Searched, spec: RunSpec, oracle: Oracle, produced: Produced, final: frozenset[str],
              work: Workload, flops: dict[str, int]) -> AnalysisRecord:
    fmt, analysis = get_format(spec.precision), searched.analysis
    return AnalysisRecord(
        baseline=_checks(oracle.known(())), rounding_floor=searched.floor,
        first_divergence=analysis.first_divergence, first_divergence_node=analysis.first_divergence_node,
        ranking=analysis.ranking[:50], layers=_layers(analysis, produced.fixed_rel, final, _producers(work), flops),
        format_limits=FormatLimits(max=fmt.max, smallest_normal=fmt.smallest_normal),
    )


@dataclass(frozen=True)
class _Verdicts:
    """Which verdict a report's figures are of: whether a knob configuration made the answer smaller (`by_knobs`), the
    search oracle's verdict on the answer (`searched`), whether the final answer is the searched one
    (`same_as_searched`), and the verdict on the final answer on the backend that decided it (`final`); `fallback`:
    the answer (None: none)."""

    fallback: frozenset[str] | None
    by_knobs: bool
    searched: Verdict | None
    same_as_searched: bool
    final: Verdict | None

    @classmethod
    def of(cls, fallback: frozenset[str] | None, oracle: Oracle, checks: AnswerChecks) -> _Verdicts:
        confirm, knobs, final = checks.confirm, checks.knobs, fallback or frozenset()
        by_knobs = knobs is not None and knobs.changed_answer
        searched = oracle.known(final) if fallback is not None else None
        same = (confirm is None or confirm.searched_answer == sorted(final)) and not by_knobs
        return cls(fallback, by_knobs, searched, same,
                   checks.knob_verdict if by_knobs else checks.confirm_verdict or (searched if same else None))


def _model_info(model: Model, produced: Produced, total_flops: int) -> ModelInfo:
    return ModelInfo(
        path=str(model.path or ""), hash=model.model_hash, nodes=len(model.nodes),
        candidates=len(model.candidates), total_flops=total_flops,
        renamed_nodes=list(model.renamed_nodes),
        unsafe_names=dict(model.unsafe_names),
        link=produced.written.link if produced.written is not None else None,
    )


def _tolerance_used(spec: RunSpec, checks: AnswerChecks, v: _Verdicts) -> ToleranceUsed:
    """Shares of the user's tolerance (the oracle checked against the tolerance scaled by 1 - margin); search and
    validation: of the searched answer, None when the confirmation changed it."""
    validation, confirm = checks.validation, checks.confirm
    return ToleranceUsed(
        search=user_share(spec, v.searched) if v.same_as_searched else None,
        validation=validation.tol_used if validation is not None else None,  # the held-out check is of the final answer
        confirm=confirm.tolerance_used if confirm is not None and not v.by_knobs else None,
    )


def _one_minimal_checked(oracle: Oracle, fallback: frozenset[str] | None, confirm: Confirm | None,
                         by_knobs: bool) -> bool | None:
    """Whether removing any one member was evaluated and fails: on the backend that last changed the answer
    (a knob search's answer: not checked; a confirmation that passed on a backend that decides: its own)."""
    if by_knobs:
        return False
    if confirm is not None and confirm.passed and not check_only(confirm.backend):
        return confirm.one_minimal_checked
    return oracle.one_minimal_checked(fallback)


def _artifacts(produced: Produced, knobs: KnobsResult | None, capture: dict[str, str]) -> dict[str, str]:
    """report.json's `artifacts`: what the run directory holds, by key (`capture`: what is kept of the capture)."""
    engine = produced.engine
    return {
        **capture, "layers_csv": "layers.csv", "layers_json": "layers.json", "checkpoint": CHECKPOINT,
        **(produced.written.files if produced.written is not None else {}),
        **({"engine": engine.plan} if engine is not None and engine.built and engine.plan else {}),
        **({"knob_checkpoints": KNOBS_DIR} if knobs is not None and knobs.configurations else {}),
        "report_md": "report.md", "report_html": "report.html",
    }


def _checks(v: Verdict | None) -> OutputChecks | None:
    return OutputChecks(v.passed, dict(v.outputs)) if v else None


def _producers(work: Workload) -> dict[str, list[str]]:
    """Node name -> the nodes that compute its floating inputs (in the model's order)."""
    made_by = {t: n.name for n in work.model.nodes for t in n.outputs if t}
    return {n.name: list(dict.fromkeys(made_by[t] for t in n.float_inputs if t in made_by)) for n in work.model.nodes}


def _layers(analysis: Analysis, fixed_rel: dict[str, float], final: frozenset[str], producers: dict[str, list[str]],
            flops: dict[str, int]) -> list[Layer]:
    return [
        Layer(
            index=r.index, name=r.name, op_type=r.op_type, flops=flops.get(r.name, r.flops), local_rel_l2=r.local_rel_l2,
            rounding_rel_l2=r.rounding_rel_l2, lowp_rel_l2=r.lowp_rel_l2, fixed_rel_l2=fixed_rel.get(r.name),
            ref_absmax=r.ref_absmax, input_ref_absmax=r.input_ref_absmax, frac_above_max=r.frac_above_max,
            frac_below_normal=r.frac_below_normal, score=r.score, rank=r.rank, fallback=r.name in final,
            input_sensitive=r.input_sensitive, producers=producers.get(r.name, []), folded_into=r.folded_into,
        )
        for r in sorted(analysis.layers, key=lambda r: r.index)
    ]


def write_report(run: RunDir, report: Report) -> Report:
    """report.json, report.md and report.html, each written atomically into `run`. The renderers get the report
    as read back from its JSON (plain Python numbers), exactly what a later `rerender` gives them."""
    from precision_doctor.render import write_reports

    data = report.to_json()
    write_json(run.root / REPORT, data, writer=run)
    stored = Report.from_json(data, str(run.root / REPORT))
    write_reports(stored, run)
    return stored
