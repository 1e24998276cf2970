"""`precision-doctor emit DIR`: print the commands of a run (trtexec, polygraphy, AutoCast, JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from precision_doctor.cli.options import ENGINE_TARGETS
from precision_doctor.cli.shared import app, console, fail

FORMATS = {
    "all": ["trtexec_trt10", "trtexec_trt11", "trtexec_trt11_check", "polygraphy", "polygraphy_trt10",
            "polygraphy_ort_cuda", "autocast", "ort_node_block_list", "ort_cuda_providers"],
    "trtexec": ["trtexec_trt10", "trtexec_trt11", "trtexec_trt11_check"], "trtexec10": ["trtexec_trt10"],
    "trtexec11": ["trtexec_trt11", "trtexec_trt11_check"],
    "polygraphy": ["polygraphy", "polygraphy_trt10", "polygraphy_ort_cuda"],
    "autocast": ["autocast"], "ort": ["ort_node_block_list"], "ort-cuda": ["polygraphy_ort_cuda", "ort_cuda_providers"],
}


@app.command()
def emit(
    run_dir: Path = typer.Argument(..., help="A diagnose run directory."),
    format: str = typer.Option("all", "--format",
                               help="all (every command the run has, each under its label), trtexec (TensorRT 10 and "
                                    "11), trtexec10, trtexec11, polygraphy, autocast, ort "
                                    "(onnxconverter-common's node_block_list), ort-cuda (polygraphy's check on ONNX Runtime "
                                    "CUDA, and the provider options --knobs found), json, or engine (builds "
                                    "RUN_DIR/fixed.plan with TensorRT-RTX or TensorRT and records it in report.json)."),
    engine_targets: list[str] | None = typer.Option(None, "--engine-targets", help=ENGINE_TARGETS.info.help),
) -> None:
    """Print what to paste, each command under a comment line naming the release it is for (run them from RUN_DIR:
    they use paths relative to it): by default all of them (trtexec for TensorRT 10 and 11 and its check, polygraphy's
    checks, AutoCast, ONNX Runtime's node_block_list); or one family, or JSON; or build the engine."""
    from precision_doctor.results.report import Report

    if engine_targets and format != "engine":
        fail("--engine-targets goes with --format engine")
    if format == "engine":
        build_engine(run_dir, engine_targets)
        return
    rep = Report.load(run_dir)
    cmds = rep.answer.commands
    if format == "json":
        from precision_doctor.results.emit import LABELS

        labels = {k: LABELS[k] for k in cmds if k in LABELS}
        console.print_json(json.dumps({"fallback_nodes": rep.answer.fallback_nodes, "precision": rep.search.precision,
                                       "target": rep.search.target, **cmds, "labels": labels}))
        return
    if format not in FORMATS:
        fail(f"--format must be one of: {', '.join([*FORMATS, 'json', 'engine'])}")
    if not cmds:
        fail(f"{run_dir}: the run found no passing set, so there is nothing to emit")
    if format == "ort-cuda" and not any(k in cmds for k in FORMATS["ort-cuda"]):
        fail(f"{run_dir}: no ONNX Runtime CUDA command was written for this run (a run of an earlier version)")
    from precision_doctor.results.emit import LABELS

    shown = [k for k in FORMATS[format] if k in cmds]
    if rep.search.target:
        from precision_doctor.graph.targets import RUNTIMES

        target = rep.search.target
        label = RUNTIMES[target].label if target in RUNTIMES else target
        print(f"# The answer of {run_dir} is for {label} (--target {target}); report.md says how it fares on the other "
              "runtime.")
    for i, k in enumerate(shown):
        print(f"# {LABELS.get(k, k)}")
        print(cmds[k] + ("\n" if i < len(shown) - 1 else ""))


def build_engine(run_dir: Path, engine_targets: list[str] | None) -> None:
    """`--format engine`: build fixed.plan in the run directory; one line either way (exit 1: not built)."""
    from precision_doctor.pipeline.trt import engine_for_run
    from precision_doctor.spec import ArtifactSpec

    targets = ArtifactSpec(engine=True, engine_targets=tuple(engine_targets or ())).targets
    result = engine_for_run(run_dir, targets)
    if not result.built:
        fail(f"{run_dir}: engine not built: {result.reason}", code=1)
    console.print(f"{run_dir / (result.plan or '')}: built with {result.library} {result.version} for "
                  f"{' '.join(result.targets)} in {result.seconds:.2f} s", highlight=False, soft_wrap=True)
