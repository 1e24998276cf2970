"""report.json: built from what the pipeline found."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from precision_doctor import __version__
from precision_doctor.data.workload import Workload
from precision_doctor.errors import UserError
from precision_doctor.graph.formats import Format
from precision_doctor.measure.analysis import Analysis
from precision_doctor.pipeline.artifacts import FILES
from precision_doctor.pipeline.compare import ACTIVATIONS
from precision_doctor.pipeline.strategy import user_share
from precision_doctor.results.jsonio import jsonable, read_json, write_json
from precision_doctor.search import Oracle
from precision_doctor.search.oracle import Evaluation
from precision_doctor.search.space import SearchSpace
from precision_doctor.spec import RunSpec

CHECKPOINT = "search.jsonl"


def build_report(
    *, work: Workload, analysis: Analysis, space: SearchSpace, oracle: Oracle, spec: RunSpec, fmt: Format,
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
        "precision": spec.precision,
        "backend": backend_name,
        "strategy": spec.search.strategy,
        "cost": spec.search.cost,
        "tolerance": spec.tolerance.to_dict(),
        "margin": spec.search.margin,
        "tolerance_used": {
            # shares of the user's tolerance (the oracle checked against the tolerance scaled by 1 - margin)
            # (search and validation: of the searched answer, None when the confirmation changed it)
            "search": user_share(spec, searched) if same_as_searched else None,
            "validation": validation_used(validation) if same_as_searched else None,
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
        "baseline": verdict_dict(baseline),
        "outputs": {k: v.to_dict() for k, v in final_verdict.outputs.items()} if final_verdict else {},
        "validation": validation if same_as_searched or not validation else {**validation, "of": "searched answer"},
        "first_divergence": analysis.first_divergence,
        "first_divergence_node": analysis.first_divergence_node,
        "ranking": analysis.ranking[:50],
        "trajectory": [trajectory_row(e) for e in oracle.trajectory],
        "layers": layers,
        "format_limits": {"max": fmt.max, "smallest_normal": fmt.smallest_normal},
        "artifacts": {
            "activations": ACTIVATIONS, "layers_csv": "layers.csv", "layers_json": "layers.json", "checkpoint": CHECKPOINT,
            **(FILES if artifacts else {}),
            "report_md": "report.md", "report_html": "report.html",
        },
        "commands": artifacts,
    }


def validation_used(validation: dict | None) -> float | None:
    if not validation or not validation.get("passed"):
        return None
    vals = [v for o in validation["outputs"].values() if (v := o.get("tol_used")) is not None and v == v]
    return max(vals) if vals else None


def verdict_dict(v) -> dict | None:
    return {"passed": v.passed, "outputs": {k: c.to_dict() for k, c in v.outputs.items()}} if v else None


def trajectory_row(e: Evaluation) -> dict:
    d = e.to_dict()
    d.pop("outputs", None)
    return d


def write_report(out_dir: Path, report: dict) -> None:
    """report.json, report.md and report.html, each written atomically."""
    from precision_doctor.render import write_reports

    write_json(out_dir / "report.json", report)
    write_reports(jsonable(report), out_dir)


def load_report(run_dir: Path) -> dict:
    """The report.json of a run directory; UserError when there is none."""
    path = Path(run_dir) / "report.json"
    if not path.exists():
        raise UserError(f"{run_dir} holds no report.json (is it a diagnose run directory?)")
    return read_json(path)
