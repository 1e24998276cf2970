"""`diagnose`: capture, rank, search, confirm on held-out samples, and write every artifact.

Data flows one way: workload -> capture + analysis -> search space -> oracle + strategy ->
validation -> "fixed" capture -> artifacts and report.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from precision_doctor import __version__, interrupt
from precision_doctor.activations import ActivationStore
from precision_doctor.analysis import Analysis, tensor_error
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.capture import CaptureSettings, capture_run
from precision_doctor.compare import ACTIVATIONS, capture_and_analyse, write_layer_tables
from precision_doctor.errors import UserError
from precision_doctor.inputs import Sample
from precision_doctor.jsonio import jsonable, read_json, write_json, write_text_atomic
from precision_doctor.model import Model
from precision_doctor.precision.emulate import MASK_INPUT, gated_graph
from precision_doctor.precision.formats import Format, get_format
from precision_doctor.search import STRATEGIES, Oracle
from precision_doctor.search.oracle import Budget, BudgetExhausted, Evaluation
from precision_doctor.search.space import SearchSpace, build_space
from precision_doctor.tolerance import Tolerance, check_all, merge
from precision_doctor.workload import Workload

FIXED_RUN = "fixed"
CHECKPOINT = "search.jsonl"
CONFIRM_CHECKPOINT = "confirm.jsonl"
RUN_SETTINGS = "run_settings.json"


@dataclass
class DiagnoseOptions:
    precision: str = "fp16"
    backend: str = "emulate"
    strategy: str = "auto"
    cost: str = "nodes"
    tolerance: Tolerance = field(default_factory=Tolerance)
    margin: float = 0.0  # the search asks for at most 1 - margin of the tolerance; validation for all of it
    confirm_backend: str | None = None  # carry the answer over to this backend (repair + prune there)
    budget: Budget = field(default_factory=Budget)
    resume: bool = False
    keep_io_types: bool = True
    capture: CaptureSettings = field(default_factory=CaptureSettings)

    def check(self) -> None:
        get_format(self.precision)
        if self.strategy not in STRATEGIES:
            raise UserError(f"unknown strategy '{self.strategy}'; choose one of: {', '.join(STRATEGIES)}")
        if self.cost not in ("nodes", "flops"):
            raise UserError("--cost must be 'nodes' or 'flops'")
        if not 0.0 <= self.margin < 1.0:
            raise UserError(f"--margin must lie in [0, 1), got {self.margin}")
        from precision_doctor.backends.ort import search_refusal

        if why := search_refusal(self.backend):
            raise UserError(why)
        if self.confirm_backend is not None and self.confirm_backend == self.backend:
            raise UserError("--confirm-backend must differ from --backend")

    @property
    def search_tolerance(self) -> Tolerance:
        return self.tolerance.scaled(1.0 - self.margin) if self.margin else self.tolerance

    def user_share(self, verdict) -> float | None:
        """A search-oracle verdict's share of the tolerance, as a share of the user's (unscaled) one."""
        return verdict.tol_used * (1.0 - self.margin) if verdict else None


def make_backend(name: str, model: Model, precision: str, outputs: list[str]):
    """The backend called `name`; `auto` picks the best one available here."""
    from precision_doctor.environment import available_backends

    if name == "auto":
        name = available_backends()[0]
    if name == "emulate":
        from precision_doctor.backends.emulate import EmulateBackend

        return EmulateBackend(model, precision, outputs)
    if name in ("ort", "ort-cuda", "ort-cpu"):
        from precision_doctor.backends.ort import OrtBackend

        providers = {"ort-cpu": ["CPUExecutionProvider"], "ort-cuda": ["CUDAExecutionProvider"]}.get(name)
        return OrtBackend(model, precision, providers=providers, outputs=outputs)
    if name in ("trt", "tensorrt"):
        from precision_doctor.backends.tensorrt import TrtBackend

        return TrtBackend(model, precision=precision)
    raise UserError(f"unknown backend '{name}'; choose emulate, ort-cuda, ort-cpu, trt or auto")


def split_validation(samples: list[Sample], fraction: float) -> tuple[list[Sample], list[Sample]]:
    """Hold out the last `fraction` of the samples (at least one sample stays for the search)."""
    if not 0 <= fraction < 1:
        raise UserError("--validation-split must lie in [0, 1)")
    k = int(round(len(samples) * fraction))
    k = min(k, len(samples) - 1)
    return (samples[: len(samples) - k], samples[len(samples) - k :]) if k > 0 else (samples, [])


def held_out_samples(work: Workload, validate_files: list, split: float | None) -> list[Sample]:
    """Held-out samples: from files, split off the --inputs files (0.25 by default), or generated
    with another seed (half as many as the search samples by default). `work.samples` may shrink."""
    from precision_doctor.inputs import generate_samples, load_samples, parse_val_ranges, validate_samples

    if validate_files:
        held = load_samples(validate_files)
        validate_samples(work.model, held, work.inputs.allow_nonfinite)
        return held
    if work.inputs.files:
        work.samples, held = split_validation(work.samples, 0.25 if split is None else split)
        return held
    if split == 0:
        return []
    n = max(1, int(round(len(work.samples) * (split or 0.5))))
    return generate_samples(work.model, n, work.inputs.seed + 7919, parse_val_ranges(work.inputs.val_ranges))


@dataclass
class Outcome:
    """What the run found; `report` is what report.json holds."""

    report: dict
    out_dir: Path

    @property
    def passed(self) -> bool:
        return bool(self.report["passed"])

    @property
    def interrupted(self) -> bool:
        return self.report["status"] == "interrupted"


def run_diagnose(
    work: Workload,
    validation: list[Sample],
    opts: DiagnoseOptions,
    out_dir: Path,
    on_stage: Callable[[str], None] | None = None,
    on_evaluation: Callable[[Evaluation], None] | None = None,
) -> Outcome:
    opts.check()
    t0 = time.monotonic()
    fmt = get_format(opts.precision)
    model = work.model
    stage = on_stage or (lambda s: None)

    backend = make_backend(opts.backend, model, opts.precision, model.outputs)  # fail fast on a bad backend
    confirm_backend = (
        make_backend(opts.confirm_backend, model, opts.precision, model.outputs) if opts.confirm_backend else None
    )
    _check_run_settings(out_dir, _run_settings(work, opts, validation), opts.resume)
    stage("capture")
    if opts.resume and (out_dir / ACTIVATIONS).exists():
        from precision_doctor.compare import reanalyse

        analysis = reanalyse(out_dir / ACTIVATIONS, opts.tolerance)
    else:
        analysis = capture_and_analyse(work, opts.precision, opts.tolerance, out_dir, settings=opts.capture)
    write_layer_tables(out_dir, analysis)
    space = build_space(model, analysis, fmt, opts.cost)

    stage("reference")
    ref = ReferenceRunner(model)
    refs = [ref.run(s) for s in work.samples]
    val_refs = [ref.run(s) for s in validation]

    oracle = Oracle(
        backend, work.samples, refs, opts.search_tolerance, cost_of=space.cost, budget=opts.budget,
        checkpoint=out_dir / CHECKPOINT, on_evaluation=on_evaluation,
    )
    if opts.resume:
        oracle.load_checkpoint()
    elif (out_dir / CHECKPOINT).exists():
        (out_dir / CHECKPOINT).unlink()  # our own file from an earlier --force run

    stage("search")
    status, reason, found = _search(oracle, space, opts.strategy)
    validation_report = None
    if found is not None and validation:
        stage("validate")
        validation_report = check_on_samples(backend, found, validation, val_refs, opts.tolerance)
        if not validation_report["passed"] and status == "complete":
            # Not presented as the answer: search again with the failing held-out samples included.
            validation_report["first_candidate"] = sorted(found)
            oracle.samples = work.samples + validation
            oracle.references = refs + val_refs
            oracle.order = list(range(len(oracle.samples)))
            oracle.memo = {k: v for k, v in oracle.memo.items() if not v.passed}
            status, reason, found = _search(oracle, space, opts.strategy)
            validation_report["research"] = "searched again with the held-out samples included"
            validation_report["passed_after_research"] = found is not None
    confirm = confirm_verdict = None
    if confirm_backend is not None and found is not None:
        if status == "complete":
            stage("confirm")
            status, reason, found, confirm, confirm_verdict = _confirm(
                confirm_backend, found, work.samples + validation, refs + val_refs, space, opts, out_dir,
                on_evaluation, _remaining(opts.budget, oracle),
            )
        else:
            confirm = {"backend": confirm_backend.name, "searched_answer": sorted(found), "passed": None,
                       "skipped": f"the search ended early ({status}); the answer is the searched one, not confirmed"}
    passed = found is not None
    if status == "complete" and not passed:
        status = "no_solution"
        reason = reason or _no_solution_reason(oracle, space)

    stage("artifacts")
    final = found if found is not None else frozenset()
    fixed_rel = _capture_fixed(out_dir / ACTIVATIONS, model, fmt, work.samples, final, opts.capture) if passed else {}
    artifacts = _write_artifacts(out_dir, work, refs, final, opts) if passed else {}
    report = build_report(
        work=work, analysis=analysis, space=space, oracle=oracle, opts=opts, fmt=fmt,
        backend_name=backend.name, status=status, reason=reason, fallback=found,
        validation=validation_report, n_validation=len(validation), fixed_rel=fixed_rel,
        artifacts=artifacts, elapsed=time.monotonic() - t0, confirm=confirm, confirm_verdict=confirm_verdict,
    )
    write_report(out_dir, report)
    return Outcome(report, out_dir)


def _search(oracle: Oracle, space: SearchSpace, strategy) -> tuple[str, str | None, frozenset[str] | None]:
    """Run a strategy (a name in STRATEGIES, or the strategy itself); budgets and Ctrl-C end it early."""
    try:
        found = (STRATEGIES[strategy] if isinstance(strategy, str) else strategy)(oracle, space)
        return "complete", None, found
    except BudgetExhausted as exc:
        best = oracle.best()
        return "budget_exhausted", f"{exc}; the best passing set found so far is reported", best
    except KeyboardInterrupt:
        interrupt.clear()
        best = oracle.best()
        return "interrupted", "interrupted by the user; the best passing set found so far is reported", best


def _confirm(
    backend, found: frozenset[str], samples: list, refs: list, space: SearchSpace, opts: DiagnoseOptions, out_dir: Path,
    on_evaluation: Callable[[Evaluation], None] | None, budget: Budget,
):
    """Carry the searched answer over to `backend` on every sample (search and held-out): keep it if it
    passes there, else grow it until it does; then prune it to 1-minimal there (`search.auto.repair`).
    Returns (status, reason, final set, the report's `confirm` section, the verdict on the final set there).
    If it stops early (budget, Ctrl-C) before any set passed there, the searched answer stays, unconfirmed."""
    from precision_doctor.search.auto import repair

    oracle = Oracle(
        backend, samples, refs, opts.search_tolerance, cost_of=space.cost, budget=budget,
        checkpoint=out_dir / CONFIRM_CHECKPOINT, on_evaluation=on_evaluation,
    )
    if opts.resume:
        oracle.load_checkpoint()
    elif (out_dir / CONFIRM_CHECKPOINT).exists():
        (out_dir / CONFIRM_CHECKPOINT).unlink()
    status, reason, confirmed = _search(oracle, space, lambda o, sp: repair(o, sp, found))
    as_is = oracle.known(found)
    passed: bool | None = confirmed is not None
    if status == "complete" and confirmed is None:
        reason = f"no set passes on {backend.name}, not even with every candidate in FP32 added to the searched answer"
    elif status != "complete" and confirmed is None:
        passed, confirmed = None, found
        reason = f"confirmation on {backend.name} stopped early ({reason}); the answer is the searched one, not confirmed"
    final = oracle.known(confirmed) if passed else None
    report = {
        "backend": backend.name,
        "samples": len(samples),
        "searched_answer": sorted(found),
        "searched_answer_passed": None if as_is is None else as_is.passed,
        "passed": passed,
        "status": status,
        "evaluations": oracle.evaluations,
        "memo_hits": oracle.memo_hits,
        "one_minimal_checked": oracle.one_minimal_checked(confirmed) if passed else None,
        "tolerance_used": opts.user_share(final),
        "trajectory": [_trajectory_row(e) for e in oracle.trajectory],
    }
    return status, reason, confirmed, report, final


def _remaining(budget: Budget, oracle: Oracle) -> Budget:
    """What the search left of the evaluation and time budget (the confirmation spends the rest)."""
    return Budget(
        None if budget.max_evaluations is None else max(budget.max_evaluations - oracle.evaluations, 0),
        None if budget.time_s is None else max(budget.time_s - (time.monotonic() - oracle.started), 0.0),
    )


def _run_settings(work: Workload, opts: DiagnoseOptions, validation: list[Sample]) -> dict:
    """What decides the verdicts in the checkpoints: a resumed run must have the same."""
    return jsonable({
        "model_hash": work.model.model_hash, "precision": opts.precision, "backend": opts.backend,
        "tolerance": opts.tolerance.to_dict(), "margin": opts.margin, "confirm_backend": opts.confirm_backend,
        "samples": len(work.samples), "validation_samples": len(validation),
        "samples_hash": _samples_hash(work.samples + validation),
    })


def _samples_hash(samples: list[Sample]) -> str:
    h = hashlib.sha256()
    for s in samples:
        for name in sorted(s):
            a = np.ascontiguousarray(s[name])
            h.update(f"{name}:{a.dtype}:{a.shape};".encode())
            h.update(a.tobytes())
    return h.hexdigest()[:16]


def _check_run_settings(out_dir: Path, settings: dict, resume: bool) -> None:
    """Record the settings of a run; refuse to resume one made with other settings (its checkpointed
    verdicts would not hold). Runs from before this file existed resume unchecked."""
    path = out_dir / RUN_SETTINGS
    if resume and path.exists():
        old = read_json(path)
        diff = [k for k in settings if old.get(k) != settings[k]]
        if diff:
            shown = ", ".join(f"{k} {old.get(k)!r} then, {settings[k]!r} now" for k in diff)
            raise UserError(f"--resume: {out_dir} was run with other settings ({shown}); use another --out")
    write_json(path, settings)


def _no_solution_reason(oracle: Oracle, space: SearchSpace) -> str:
    everything = oracle.known(space.universe)
    if everything is not None and not everything.passed:
        name, err = everything.worst
        return (
            f"even with every node in FP32 the output '{name}' differs from the reference (max abs err {err:.3g}): "
            "the tolerance is tighter than the backend's FP32 agreement, or the model is nondeterministic"
        )
    return "no evaluated set met the tolerance"


def check_on_samples(backend, fallback: frozenset[str], samples, refs, tol: Tolerance) -> dict:
    runner = backend.prepare(fallback)
    per: dict[str, list] = {}
    failing = []
    for i, (s, r) in enumerate(zip(samples, refs)):
        checks = check_all(runner.run(s, list(r)), r, tol)
        for k, c in checks.items():
            per.setdefault(k, []).append(c)
        if not all(c.passed for c in checks.values()):
            failing.append(i)
    outs = {k: merge(v) for k, v in per.items()}
    return {
        "passed": not failing,
        "samples": len(samples),
        "failing_samples": failing,
        "outputs": {k: v.to_dict() for k, v in outs.items()},
    }


def _capture_fixed(path: Path, model: Model, fmt: Format, samples, fallback, settings: CaptureSettings) -> dict:
    """Capture the emulated run with the fallback set, for per-layer errors after the fix."""
    gated = gated_graph(model, fmt)
    names = [t for n in model.nodes for t in n.float_outputs]
    with ActivationStore(path, "a") as store:
        if FIXED_RUN in store.file:
            del store.file[FIXED_RUN]
        budget = int(settings.group_mb * (1 << 20))
        capture_run(store, FIXED_RUN, gated.proto, model, names, samples, {MASK_INPUT: gated.mask(fallback)}, budget, None)
        store.file[FIXED_RUN].attrs["fallback"] = ",".join(sorted(fallback))
        out = {}
        for n in model.candidates:
            errs = [tensor_error(store, FIXED_RUN, t, fmt).rel_l2 for t in n.float_outputs]
            out[n.name] = max(errs) if errs else 0.0
    return out


def _write_artifacts(out_dir: Path, work: Workload, refs: list[dict], fallback: frozenset[str], opts: DiagnoseOptions) -> dict:
    from precision_doctor import emit
    from precision_doctor.precision.mixed import build_mixed, forced_fp32_nodes
    from precision_doctor.toolnames import model_for_tools

    model = work.model
    fixed = build_mixed(model, fallback, opts.precision, keep_io_types=opts.keep_io_types)
    onnx.save(fixed, str(out_dir / ".fixed.onnx.partial"), save_as_external_data=fixed.ByteSize() >= 2**31 - 2**20)
    (out_dir / ".fixed.onnx.partial").replace(out_dir / "fixed.onnx")
    _save_polygraphy_io(out_dir, work.samples, refs)
    order = [n.name for n in model.nodes if n.name in fallback]
    forced = forced_fp32_nodes(model, fallback)
    tools_model = model_for_tools(model, out_dir)  # named.onnx where we named nodes: the tools see our names
    texts = emit.emit_all(
        tools_model.name if tools_model.parent == out_dir else str(tools_model.resolve()),
        "fixed.onnx",
        order,
        opts.precision,
        atol=opts.tolerance.atol,
        rtol=opts.tolerance.rtol,
        check_error_stat=opts.tolerance.check_error_stat,
        inputs="inputs.json",
        forced_fp32=forced,
    )
    scripts = {"layer_precisions_txt": "layer_precisions.txt", "trtexec_sh": "trtexec.sh", "tensorrt_rtx_sh": "tensorrt_rtx.sh"}
    for key, name in scripts.items():
        write_text_atomic(out_dir / name, texts[key])
        if name.endswith(".sh"):
            (out_dir / name).chmod(0o755)
    excluded = [*order, *forced]
    write_text_atomic(out_dir / "autocast_nodes_to_exclude.txt", "\n".join(excluded) + ("\n" if excluded else ""))
    return {k: v for k, v in texts.items() if k not in scripts}


def _save_polygraphy_io(out_dir: Path, samples: list[Sample], refs: list[dict]) -> None:
    """inputs.json and reference_outputs.json in polygraphy's formats (--load-inputs, --load-outputs)."""
    from polygraphy.comparator import IterationResult, RunResults
    from polygraphy.json import save_json
    from polygraphy.logger import G_LOGGER

    G_LOGGER.module_severity = G_LOGGER.ERROR  # polygraphy's own progress lines are noise here

    save_json([dict(s) for s in samples], str(out_dir / "inputs.json"))
    results = RunResults()
    name = "onnxrt-fp32-reference"
    results.append((name, [IterationResult(dict(r), runner_name=name) for r in refs]))
    results.save(str(out_dir / "reference_outputs.json"))


def build_report(
    *, work: Workload, analysis: Analysis, space: SearchSpace, oracle: Oracle, opts: DiagnoseOptions, fmt: Format,
    backend_name: str, status: str, reason: str | None, fallback: frozenset[str] | None, validation: dict | None,
    n_validation: int, fixed_rel: dict[str, float], artifacts: dict, elapsed: float, confirm: dict | None = None,
    confirm_verdict=None,
) -> dict:
    model = work.model
    final = fallback or frozenset()
    total = max(model.total_flops, 1)
    flops = {n.name: n.flops for n in model.nodes}
    baseline = oracle.known(())
    searched = oracle.known(final) if fallback is not None else None
    same_as_searched = confirm is None or confirm["searched_answer"] == sorted(final)
    final_verdict = confirm_verdict or (searched if same_as_searched else None)
    held_out_ok = validation is None or validation["passed"] or validation.get("passed_after_research", False)
    passed = fallback is not None and held_out_ok
    layers = []
    for r in sorted(analysis.layers, key=lambda r: r.index):
        layers.append({
            "index": r.index, "name": r.name, "op_type": r.op_type, "flops": r.flops,
            "local_rel_l2": r.local_rel_l2, "rounding_rel_l2": r.rounding_rel_l2, "lowp_rel_l2": r.lowp_rel_l2,
            "fixed_rel_l2": fixed_rel.get(r.name), "ref_absmax": r.ref_absmax, "input_ref_absmax": r.input_ref_absmax,
            "frac_above_max": r.frac_above_max, "frac_below_normal": r.frac_below_normal, "score": r.score,
            "rank": r.rank, "fallback": r.name in final, "input_sensitive": r.input_sensitive,
        })
    return {
        "tool": "precision-doctor",
        "version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": {
            "path": str(model.path or ""), "hash": model.model_hash, "nodes": len(model.nodes),
            "candidates": len(space.universe), "total_flops": model.total_flops, "renamed_nodes": model.renamed_nodes,
        },
        "precision": opts.precision,
        "backend": backend_name,
        "strategy": opts.strategy,
        "cost": opts.cost,
        "tolerance": opts.tolerance.to_dict(),
        "margin": opts.margin,
        "tolerance_used": {
            # shares of the user's tolerance (the oracle checked against the tolerance scaled by 1 - margin)
            # (search and validation: of the searched answer, None when the confirmation changed it)
            "search": opts.user_share(searched) if same_as_searched else None,
            "validation": _validation_used(validation) if same_as_searched else None,
            **({"confirm": confirm.get("tolerance_used")} if confirm else {}),
        },
        "confirm": confirm,
        "status": status,
        "reason": reason,
        "passed": bool(passed),
        "fallback_nodes": [n.name for n in model.nodes if n.name in final],
        "fallback_size": len(final),
        "fp32_flop_share": sum(flops.get(n, 0) for n in final) / total,
        "evaluations": oracle.evaluations,
        "memo_hits": oracle.memo_hits,
        "one_minimal_checked": confirm["one_minimal_checked"] if confirm and confirm.get("passed")
        else oracle.one_minimal_checked(fallback),
        "elapsed_s": elapsed,
        "samples": {"search": len(work.samples), "validation": n_validation},
        "inputs": work.inputs.describe(),
        "baseline": _verdict_dict(baseline),
        "outputs": {k: v.to_dict() for k, v in final_verdict.outputs.items()} if final_verdict else {},
        "validation": validation if same_as_searched or not validation else {**validation, "of": "searched answer"},
        "first_divergence": analysis.first_divergence,
        "first_divergence_node": analysis.first_divergence_node,
        "ranking": analysis.ranking[:50],
        "trajectory": [_trajectory_row(e) for e in oracle.trajectory],
        "layers": layers,
        "format_limits": {"max": fmt.max, "smallest_normal": fmt.smallest_normal},
        "artifacts": {
            "activations": ACTIVATIONS, "layers_csv": "layers.csv", "layers_json": "layers.json", "checkpoint": CHECKPOINT,
            **({"fixed_onnx": "fixed.onnx", "layer_precisions": "layer_precisions.txt", "trtexec": "trtexec.sh",
                "inputs": "inputs.json", "reference_outputs": "reference_outputs.json",
                "autocast_nodes": "autocast_nodes_to_exclude.txt"} if artifacts else {}),
            "report_md": "report.md", "report_html": "report.html",
        },
        "commands": artifacts,
    }


def _validation_used(validation: dict | None) -> float | None:
    if not validation or not validation.get("passed"):
        return None
    vals = [v for o in validation["outputs"].values() if (v := o.get("tol_used")) is not None and v == v]
    return max(vals) if vals else None


def _verdict_dict(v) -> dict | None:
    return {"passed": v.passed, "outputs": {k: c.to_dict() for k, c in v.outputs.items()}} if v else None


def _trajectory_row(e: Evaluation) -> dict:
    d = e.to_dict()
    d.pop("outputs", None)
    return d


def write_report(out_dir: Path, report: dict) -> None:
    """report.json, report.md and report.html, each written atomically."""
    from precision_doctor.jsonio import jsonable
    from precision_doctor.report.html import render_html
    from precision_doctor.report.markdown import render_markdown

    write_json(out_dir / "report.json", report)
    clean = jsonable(report)
    write_text_atomic(out_dir / "report.md", render_markdown(clean))
    write_text_atomic(out_dir / "report.html", render_html(clean))


def rerender(out_dir: Path) -> dict:
    """Render report.md and report.html again from a stored report.json."""
    from precision_doctor.jsonio import read_json

    path = Path(out_dir) / "report.json"
    if not path.exists():
        raise UserError(f"{out_dir} holds no report.json (is it a diagnose run directory?)")
    report = read_json(path)
    write_report(Path(out_dir), report)
    return report

