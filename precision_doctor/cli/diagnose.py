"""`precision-doctor diagnose`: the smallest FP32 fallback set, the fixed model, commands and report."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from precision_doctor.cli.options import DIAGNOSIS, RUN_DIR, Options, command_line, with_options
from precision_doctor.cli.shared import (
    announce_capture_size,
    announce_renamed,
    app,
    console,
    fail,
    heartbeat,
    plain_progress,
    progress_bar,
    stops_on_interrupt,
    styled,
    terminal_text,
    uses_run_dir,
    warn_floor,
)
from precision_doctor.control import (
    CaptureSizeEvent,
    EvaluationEvent,
    LoadedEvent,
    PhaseEvent,
    ProgressEvent,
    RoundingFloorEvent,
    StopToken,
    signals_stop,
)
from precision_doctor.errors import UserError
from precision_doctor.outcome import RunStatus
from precision_doctor.render.numbers import counted
from precision_doctor.results.report import Report

if TYPE_CHECKING:
    from precision_doctor.pipeline.spec_check import CheckedSpec
from precision_doctor.storage import DiskFull


@app.command()
@with_options(*DIAGNOSIS, RUN_DIR)
def diagnose(
    model: Path = typer.Argument(..., help="ONNX model."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run in --out without repeating "
                                "work (with the settings it was started with; flags given must agree with them)."),
    options: Options = None,
) -> None:
    """Find the smallest set of nodes to keep in FP32; write the fixed model, commands and report."""
    from precision_doctor import api
    from precision_doctor.pipeline.settings import SettingsDiffer
    from precision_doctor.pipeline.spec_check import validate_spec
    from precision_doctor.results.rundir import default_run_dir

    if resume and options["out"] is None:
        fail("--resume needs --out DIR of the run to continue")
    out_dir = options["out"] if options["out"] is not None else default_run_dir(model, "diagnose")
    spec = resumed_spec(model, out_dir, options) if resume else validate_spec(options.spec(model))
    uses_run_dir(out_dir)
    token, started = StopToken(), [False]
    hint = f"to continue: {resume_command(model, out_dir)}"
    plain = plain_progress()  # where the bar is off
    with signals_stop(token), stops_on_interrupt(out_dir, hint, started), progress_bar() as prog, heartbeat(plain):
        task = prog.add_task("capture", total=None)

        def sink(ev: ProgressEvent) -> None:
            if plain is not None:
                plain(ev)
            if isinstance(ev, LoadedEvent):
                announce_renamed(ev.renamed_nodes, ev.unsafe_names)
            elif isinstance(ev, RoundingFloorEvent):
                warn_floor(ev.floor, ev.tolerance)
            elif isinstance(ev, PhaseEvent) and ev.phase != "load":
                started[0] = True  # the run directory is prepared
                prog.update(task, description=ev.phase)
            elif isinstance(ev, EvaluationEvent):
                prog.update(task, description=f"search ({ev.phase})", completed=ev.step)
            elif isinstance(ev, CaptureSizeEvent):
                announce_capture_size(ev)

        try:
            report = api.diagnose(spec, out_dir, progress=sink, stop=token, resume=resume, force=options["force"],
                                  origin="cli")
        except SettingsDiffer as exc:
            raise UserError(settings_refusal(exc, model, out_dir)) from None
        except DiskFull as exc:
            from precision_doctor.results.rundir import resumable

            then = (f"continue with: {resume_command(model, out_dir)}" if resumable(out_dir)
                    else "run the command again")
            raise UserError(f"{exc}; {exc.advice}, then {then}") from None
    print_outcome(report, out_dir, model)
    raise typer.Exit(report.statement.exit_code)


SHOWN_NODES = 20  # the terminal lists this many FP32 nodes of an answer; the reports and files list them all


def resumed_spec(model: Path, out_dir: Path, options: Options) -> CheckedSpec:
    """The settings a resumed run continues with, checked: those it was started with, the flags given on top (a
    flag that changes a verdict setting is refused later, showing the command that continues the run). The budget
    is one of them: --max-evaluations counts the run's evaluations before the stop too, --time-budget the search's
    seconds of this invocation; a new --max-evaluations or --time-budget replaces it."""
    from precision_doctor.pipeline.settings import recorded_spec
    from precision_doctor.pipeline.spec_check import validate_spec

    recorded = recorded_spec(out_dir) if Path(out_dir).is_dir() else None
    if recorded is None:
        return validate_spec(options.spec(model))
    return validate_spec(recorded.with_settings({"model": str(model), **options.given_settings()}))


def resume_command(model: Path, out_dir: Path, more: Sequence[str] = ()) -> str:
    """The command that continues a run in `out_dir` (its settings are recorded there); `more`: flags on top (a
    larger budget: render.commands.raised_budget)."""
    return shlex.join(["precision-doctor", "diagnose", str(model), "--resume", "--out", str(out_dir), *more])


def settings_refusal(exc, model: Path, out_dir: Path) -> str:
    """The refusal of a resume with other settings, in the CLI's words, with the command that continues
    the run as it was started (or the way to start over)."""
    from precision_doctor.cli.shared import error_text

    text = error_text(exc)
    if exc.recorded is not None:
        its_model = exc.recorded.model if exc.other_model else model  # a run made on another model continues on it
        text += f"; to continue it: {command_line('diagnose', its_model, exc.recorded, '--resume', '--out', str(out_dir))}"
    new = f"on {model}" if exc.other_model else "with the new settings"
    return text + f"; to start over {new}: the same command with --force instead of --resume"


def print_outcome(report: Report, out_dir: Path, model: Path | str | None = None) -> None:
    """The run's outcome: the search in one line, the verdict (label and one sentence per field of the statement, as
    the reports say them), the FP32 nodes, the details, the next step and where the report is."""
    from precision_doctor.render.commands import first_step, raised_budget
    from precision_doctor.render.sections import Section, Step, Steps
    from precision_doctor.render.sections import checks as checks_section
    from precision_doctor.render.sections import verdict as verdict_section
    from precision_doctor.render.sections.terminal import lines as terminal_lines
    from precision_doctor.render.tensorrt import outcome_lines
    from precision_doctor.render.wording import (
        divergence_text,
        folded_host,
        search_line,
        shapes_warning,
        tolerance_text,
    )
    from precision_doctor.results.verdict import NextKind

    def say(text) -> None:
        console.print(text, soft_wrap=True)

    fb = report.answer.fallback_nodes
    st = report.statement
    say(search_line(report))
    if report.analysis.first_divergence:
        node = report.analysis.first_divergence_node
        say(f"first diverging tensor (all {report.search.precision}): "
            f"{divergence_text(report.analysis.first_divergence, node, folded_host(report.analysis.layers, node))}")
    for line in terminal_lines(verdict_section.build(report)):
        say(terminal_text(line))
    if (warning := shapes_warning(report)) is not None:
        say(styled(warning, "bold yellow"))
    if st.answered and fb:
        say(f"FP32 nodes ({tolerance_text(report.search.tolerance)}):")
        for name in fb[:SHOWN_NODES]:
            say(f"  {name}")
        if len(fb) > SHOWN_NODES:
            listed = [p for p in ("report.html", "layer_precisions.txt") if (Path(out_dir) / p).is_file()]
            say(f"  ... and {len(fb) - SHOWN_NODES} more: see {' / '.join(f'{out_dir}/{p}' for p in listed)}")
    forced = report.answer.forced_fp32_nodes
    if st.answered and forced:  # in FP32 whatever the answer (no kernel or no ONNX type in the format): fixed.onnx too
        say(f"Also in FP32, whatever the tolerance ({counted(len(forced), 'node')}; report.md says why):")
        for name in list(forced)[:SHOWN_NODES]:
            say(f"  {name}")
        if len(forced) > SHOWN_NODES:
            say(f"  ... and {len(forced) - SHOWN_NODES} more")
    if report.status == RunStatus.NO_SOLUTION and report.reason:
        say(report.reason)
    for line in terminal_lines(checks_section.build(report)):
        say(terminal_text(line))
    for note, loud in outcome_lines(report) if st.answered and not st.held_out_failed else ():
        say(styled(note, "bold red") if loud else note)
    if report.status not in (RunStatus.COMPLETE, RunStatus.NO_SOLUTION):
        say(f"status: {str(report.status).replace('_', ' ')}: {report.reason}")
    text, cmd = first_step(report)
    if st.next.kind == NextKind.CONTINUE:  # the command from here, not from the run directory
        path = model or (report.model.path if report.model is not None else "MODEL")
        cmd = f"to continue: {resume_command(Path(path), out_dir, raised_budget(report))}"
    elif cmd:
        cmd = f"(from {out_dir}) {cmd}"
    for line in terminal_lines(Section("next", None, (Steps((Step(text, cmd),)),))):
        say(terminal_text(line))
    written = [p for k, p in report.answer.artifacts.items() if k != "report_html" and (Path(out_dir) / p).is_file()]
    say(f"report: {out_dir}/report.html  ({', '.join(written)})")
    o = report.checks.other_runtime
    if o is not None and o.directory and o.files:
        say(f"the answer for {o.runtime}: {out_dir}/{o.directory}/  "
            f"({', '.join(Path(p).name for p in o.files.values() if (Path(out_dir) / p).is_file())})")
