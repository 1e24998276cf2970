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
    if (other := _other_answer(run_dir)) is not None:
        _emit_other(run_dir, *other, format)
        return
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
        target = rep.search.target
        label = _label(target)
        print(f"# The answer of {run_dir} is for {label} (--target {target}); report.md says how it fares on the other "
              "runtime.")
    o = rep.checks.other_runtime
    if o is not None and o.passed is False and o.answer is not None and o.directory:
        from precision_doctor.graph.targets import of_tolerance

        there = _label(o.runtime)
        print(f"# WARNING: it FAILS on {there} ({of_tolerance(o.tolerance_used)}); {there}'s own answer is in "
              f"{o.directory}/: `precision-doctor emit {run_dir / o.directory}` says how to use it.")
    for i, k in enumerate(shown):
        print(f"# {LABELS.get(k, k)}")
        print(cmds[k] + ("\n" if i < len(shown) - 1 else ""))


def _label(target: str) -> str:
    """A target runtime in words ("TensorRT"); an unknown name as it is."""
    from precision_doctor.graph.targets import RUNTIMES

    return RUNTIMES[target].label if target in RUNTIMES else target


def _other_answer(folder: Path):
    """(the run's Report, its OtherRuntime) where `folder` is the folder of the other runtime's own answer in a run
    directory (RUN/tensorrt, RUN/ort-cuda: no report.json of its own); else None."""
    from precision_doctor.results.report import Report

    folder = Path(folder).resolve()
    if (folder / "report.json").is_file() or not (folder.parent / "report.json").is_file():
        return None
    rep = Report.load(folder.parent)
    o = rep.checks.other_runtime
    if o is None or o.answer is None or o.directory != folder.name:
        return None
    return rep, o


def _emit_other(folder: Path, rep, o, format: str) -> None:
    """What the folder of the other runtime's own answer holds and how to use it (its scripts read the run's inputs)."""
    from precision_doctor.graph.targets import of_tolerance

    label = _label(o.runtime)
    folder = Path(folder).resolve()
    run, name = folder.parent, folder.name
    if format not in ("all", "json"):
        how = f"./{name}/trtexec.sh or ./{name}/tensorrt_rtx.sh from {run}" if o.runtime == "tensorrt" else \
            f"{name}/fixed.onnx"
        fail(f"--format for {folder} (the answer for {label}): all or json; its commands are in its scripts ({how})")
    if format == "json":
        console.print_json(json.dumps({"fallback_nodes": o.answer, "precision": rep.search.precision,
                                       "target": o.runtime, "files": o.files}))
        return
    print(f"# {folder} holds the answer for {label} (--target {o.runtime}) of the run in {run}: "
          f"{len(o.answer)} nodes in FP32 ({len(o.added)} more than the run's own), "
          f"{of_tolerance(o.answer_tolerance_used)} there; its files, each made for {label}:")
    for path in sorted(o.files.values()):
        print(f"#   {path}")
    scripts = [p for p in ("trtexec.sh", "tensorrt_rtx.sh") if (folder / p).is_file()]
    if scripts:
        print(f"# run from {run} (the scripts read its inputs and reference outputs):")
    for script in scripts:
        print(f"./{name}/{script}")


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
