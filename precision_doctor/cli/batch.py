"""`precision-doctor batch ZOO`: diagnose every model of a zoo; a summary table at the end."""

from __future__ import annotations

import contextlib
import shlex
from pathlib import Path

import typer
from rich.table import Table

from precision_doctor.cli.options import (
    BACKENDS,
    EMULATION,
    GENERATED,
    PRECISION,
    SEARCH,
    TARGET,
    TOLERANCE,
    Options,
    command_line,
    with_options,
)
from precision_doctor.cli.shared import app, console, err, error_text, heartbeat, plain_progress, progress_bar
from precision_doctor.control import StopToken, signals_stop
from precision_doctor.errors import UserError
from precision_doctor.outcome import RowStatus, SummaryRow
from precision_doctor.words import counted


@app.command()
@with_options(PRECISION, BACKENDS, TARGET, EMULATION, SEARCH, TOLERANCE, GENERATED)
def batch(
    zoo: Path = typer.Argument(..., help="A directory of .onnx files (recipes beside them) or a JSON/YAML manifest."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=0, help="Local worker processes (0: run in this process). Runs "
                             "that compute on a GPU take turns on it (sharing one fails); with several GPUs each worker "
                             "has its own."),
    executor_name: str = typer.Option("local", "--executor", help="local: worker processes here (--jobs); ray: one "
                                      "Ray task per model (pip install '.[ray]'; every node needs the files at "
                                      "the same paths)."),
    ray_address: str | None = typer.Option(None, "--ray-address", help="The Ray cluster to use (host:port or "
                                           "ray://host:port); without it a local Ray instance is started and "
                                           "shut down."),
    ray_cpus: float | None = typer.Option(None, "--ray-cpus", help="CPUs each model's Ray task asks for, and its "
                                          "ONNX Runtime threads (default 1); a model on ort-cuda or trt also asks "
                                          "for one GPU."),
    out: Path | None = typer.Option(None, "--out", help="Batch directory (default: reports/batch-TIME); "
                                    "an earlier batch directory is resumed."),
    only: list[str] | None = typer.Option(None, "--only", help="Run only this model (by name); repeatable."),
    rerun: bool = typer.Option(False, "--rerun", help="Diagnose finished models again."),
    force: bool = typer.Option(False, "--force", help="Write into a non-empty --out that holds no earlier batch."),
    options: Options = None,
) -> None:
    """Diagnose every model of a zoo; write OUT/MODEL/ run directories and a summary table.
    The options of the Precision and tolerance, Backends, Search and Inputs panels are defaults that a model's
    recipe overrides."""
    from precision_doctor.batch.executors import make_executor
    from precision_doctor.batch.orchestrate import BatchSettingsDiffer, default_batch_dir, recorded_defaults, run_batch
    from precision_doctor.pipeline.spec_check import validate_spec
    from precision_doctor.render.numbers import fmt_seconds
    from precision_doctor.render.wording import row_brief

    out_dir = out if out is not None else default_batch_dir()
    recorded = recorded_defaults(out_dir) if out is not None and Path(out).is_dir() else None
    # A batch directory continues with the settings it was started with; flags given go on top of them.
    defaults = validate_spec(recorded.with_settings(options.given_settings()) if recorded else options.spec(""))
    executor = make_executor(jobs, executor_name, ray_address, ray_cpus)
    where = "on Ray" if executor_name == "ray" else counted(jobs, "job")
    progress, plain = progress_bar("{task.description}"), plain_progress("reading the models and their recipes")
    token = StopToken()
    session = executor if hasattr(executor, "__enter__") else contextlib.nullcontext()
    if executor_name == "ray":
        err.print(f"connecting to the Ray cluster at {ray_address}" if ray_address else "starting a local Ray instance",
                  highlight=False)
    todo: list[str] = []
    finished = [0]
    with signals_stop(token), session, progress, heartbeat(plain):  # a model's diagnosis takes minutes: never silent
        task = progress.add_task("models", total=None)

        def on_start(names: list[str], skipped: list[str]) -> None:
            if skipped:
                err.print(f"{counted(len(skipped), 'model')} finished earlier, not redone: {', '.join(skipped)}")
            progress.update(task, total=len(names), description=f"diagnosing {counted(len(names), 'model')}, {where}")
            if plain is not None:  # the bar is off: say what runs (each model's line follows when it is done)
                plain.line(f"diagnosing {counted(len(names), 'model')}, {where}: {', '.join(names)}")
                plain.doing(f"diagnosing {counted(len(names), 'model')}, {where}: none done yet")
            todo.extend(names)

        def on_done(row: SummaryRow) -> None:
            progress.advance(task)
            detail = row.message if row.status == RowStatus.ERROR else row_brief(row)
            if plain is None:
                err.print(f"{row.model}: {row.verdict or row.status} {detail}")
                return
            plain.line(f"{row.model}: {row.verdict or row.status} {detail}")
            finished[0] += 1
            plain.doing(f"diagnosing {counted(len(todo), 'model')}, {where}: {finished[0]} done")

        try:
            result = run_batch(zoo, out_dir, defaults, executor=executor, only=list(only or []), rerun=rerun,
                               force=force, on_start=on_start, on_done=on_done, stop=token)
        except KeyboardInterrupt:
            err.print(f"interrupted; to continue where it stopped: {continue_command(out_dir, out is None)}")
            raise typer.Exit(130) from None
        except BatchSettingsDiffer as exc:
            again = command_line("batch", zoo, exc.recorded, "--out", str(out_dir))
            raise UserError(f"{error_text(exc)}; to continue it: {again}") from None
    print_summary(result.rows)
    console.print(
        f"{len(result.ran) - sum(r.model in result.ran for r in result.errors)} diagnosed, "
        f"{len(result.skipped)} skipped (finished earlier), {counted(len(result.errors), 'error')} "
        f"in {fmt_seconds(result.elapsed_s)}; summary: {result.out_dir}/summary.html (summary.csv, summary.json)",
        highlight=False,
    )
    raise typer.Exit(1 if result.errors else 0)


def continue_command(out_dir: Path, add_out: bool) -> str:
    """This very command again (every flag as given), with --out where it was not given."""
    from precision_doctor.results.runlock import this_command

    return this_command() + (f" --out {shlex.quote(str(out_dir))}" if add_out else "")


def print_summary(rows: list[SummaryRow]) -> None:
    from precision_doctor.render.numbers import fmt_seconds, fmt_share

    table = Table(title="Batch summary", title_justify="left")
    for col in ("model", "status", "FP32 nodes", "FP32 FLOPs", "evals", "time", "report / message"):
        table.add_column(col, justify="right" if col in ("FP32 nodes", "FP32 FLOPs", "evals", "time") else "left")
    for r in rows:
        share = fmt_share(r.fp32_flop_share)
        table.add_row(
            r.model, r.verdict or str(r.status), "" if r.fallback_size is None else str(r.fallback_size), share,
            "" if r.evaluations is None else str(r.evaluations),
            fmt_seconds(r.elapsed_s),
            r.message if r.status == RowStatus.ERROR else (r.report or ""),
        )
    console.print(table)
