"""`precision-doctor diagnose`: the smallest FP32 fallback set, the fixed model, commands and report."""

from __future__ import annotations

from pathlib import Path

import typer

from precision_doctor.cli import announce_renamed, app, console, fail, progress_bar, stops_on_interrupt
from precision_doctor.cli.options import (
    ARTIFACTS,
    BACKENDS,
    CAPTURE,
    HELD_OUT,
    INPUTS,
    PRECISION,
    RUN_DIR,
    SEARCH,
    TOLERANCE,
    Options,
    with_options,
)
from precision_doctor.control import EvaluationEvent, LoadedEvent, PhaseEvent, ProgressEvent, StopToken, sigint_stops
from precision_doctor.results.report import Report


@app.command()
@with_options(INPUTS, HELD_OUT, PRECISION, TOLERANCE, SEARCH, BACKENDS, ARTIFACTS, RUN_DIR, CAPTURE)
def diagnose(
    model: Path = typer.Argument(..., help="ONNX model."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run in --out without repeating work."),
    options: Options = None,
) -> None:
    """Find the smallest set of nodes to keep in FP32; write the fixed model, commands and report."""
    from precision_doctor import api
    from precision_doctor.results.rundir import default_run_dir

    spec = options.spec(model).validate()
    if resume and options["out"] is None:
        fail("--resume needs --out DIR of the run to continue")
    out_dir = options["out"] or default_run_dir(model, "diagnose")
    token, started = StopToken(), [False]
    hint = f"to continue: the same command with --resume --out {out_dir}"
    with sigint_stops(token), stops_on_interrupt(out_dir, hint, started), progress_bar() as prog:
        task = prog.add_task("capture", total=None)

        def sink(ev: ProgressEvent) -> None:
            if isinstance(ev, LoadedEvent):
                announce_renamed(ev.renamed_nodes)
            elif isinstance(ev, PhaseEvent) and ev.phase != "load":
                started[0] = True  # the run directory is prepared
                prog.update(task, description=ev.phase)
            elif isinstance(ev, EvaluationEvent):
                prog.update(task, description=f"search ({ev.phase})", completed=ev.step)

        report = api.diagnose(spec, out_dir, progress=sink, stop=token, resume=resume, force=options["force"])
    print_outcome(report, out_dir)
    if report.interrupted:
        raise typer.Exit(130)
    raise typer.Exit(0 if report.passed else 1)


def print_outcome(report: Report, out_dir: Path) -> None:
    from rich.markup import escape

    from precision_doctor.render.markdown import confirm_sentence, headroom_sentence
    from precision_doctor.render.tensorrt import outcome_lines

    fb = report.fallback_nodes
    tol = report.tolerance
    head = (
        f"{report.precision} on {report.backend}, strategy {report.strategy}: "
        f"{report.evaluations} evaluations in {report.elapsed_s:.1f} s"
    )
    console.print(head, highlight=False)
    if report.first_divergence:
        console.print(f"first diverging tensor (all {report.precision}): {report.first_divergence}", highlight=False)
    if report.passed:
        share = 100 * report.fp32_flop_share
        if fb:
            console.print(
                f"[bold green]PASS[/] keeping {len(fb)} node(s) in FP32 ({share:.2f}% of FLOPs) meets "
                f"atol={tol.atol:g} rtol={tol.rtol:g} ({tol.check_error_stat}):", highlight=False,
            )
            for name in fb:
                console.print(f"  {name}", highlight=False)
        else:
            console.print(f"[bold green]PASS[/] the whole model in {report.precision} already meets the tolerance",
                          highlight=False)
        val = report.validation
        if val is not None:
            state = "holds" if val.passed else "FAILED first; searched again with them included"
            console.print(f"held-out samples ({val.samples}): {state}", highlight=False)
        for note in (confirm_sentence(report), headroom_sentence(report)):
            if note:
                console.print(note.replace("`", ""), highlight=False)
        for note, loud in outcome_lines(report):
            console.print(f"[bold red]{escape(note)}[/]" if loud else note, highlight=False, markup=loud, soft_wrap=True)
    else:
        console.print(f"[bold red]NO PASSING SET[/]: {report.reason or report.status}", highlight=False)
    if report.status not in ("complete", "no_solution"):
        console.print(f"status: {report.status}: {report.reason}", highlight=False)
    files = "report.json, report.md, fixed.onnx, trtexec.sh" + (", fixed.plan" if "engine" in report.artifacts else "")
    console.print(f"report: {out_dir}/report.html  ({files})", highlight=False)
