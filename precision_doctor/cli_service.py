"""CLI commands of the daemon: `serve`, and its clients `submit`, `jobs`, `status`, `wait`, `cancel`,
registered on the app of precision_doctor.cli when this module is imported (cli.main imports it)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from precision_doctor.cli import (
    AtolOpt,
    ConfirmOpt,
    CosineOpt,
    InputsOpt,
    MarginOpt,
    NonfiniteOpt,
    PrecisionOpt,
    RtolOpt,
    SamplesOpt,
    SeedOpt,
    ShapesOpt,
    StatOpt,
    ValRangeOpt,
    app,
    console,
    err,
)

ServerOpt = typer.Option(None, "--server", help="The daemon's URL (default: $PRECISION_DOCTOR_SERVER or http://127.0.0.1:8765).")
TokenOpt = typer.Option(None, "--token", help="The daemon's token (default: $PRECISION_DOCTOR_TOKEN).")
EXIT_PASSED, EXIT_NO_SET, EXIT_FAILED = 0, 1, 3
# A setting named in the daemon's answer -> the flag of `submit` that sets it.
SETTING_FLAGS = {
    "precision": "--precision", "inputs.files": "--inputs", "inputs.samples": "--samples", "inputs.seed": "--seed",
    "inputs.val_ranges": "--val-range", "inputs.input_shapes": "--input-shapes",
    "inputs.allow_nonfinite": "--allow-nonfinite-inputs", "inputs.validate_files": "--validate-inputs",
    "inputs.validation_split": "--validation-split", "tolerance.atol": "--atol", "tolerance.rtol": "--rtol",
    "tolerance.check_error_stat": "--check-error-stat", "tolerance.cosine_floor": "--cosine-floor",
    "search.strategy": "--strategy", "search.cost": "--cost", "search.margin": "--margin",
    "search.max_evaluations": "--max-evaluations", "search.time_budget": "--time-budget",
    "search.keep_io_types": "--keep-io-types", "capture.group_mb": "--group-mb", "backends.backend": "--backend",
    "backends.confirm_backend": "--confirm-backend",
}


def _needs_service_extra() -> None:
    """One line instead of an ImportError when the `service` extra is not installed."""
    from precision_doctor.errors import UserError

    try:
        import fastapi  # noqa: F401
        import httpx  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise UserError(f"the service commands need the 'service' extra ({exc.name} is missing): "
                        "pip install 'precision-doctor[service]'") from None


def _client(server: str | None, token: str | None):
    _needs_service_extra()
    from precision_doctor.client import Client

    return Client(server, token)


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (other than loopback: needs --token)."),
    port: int = typer.Option(8765, "--port", help="Port."),
    state_dir: Path | None = typer.Option(None, "--state-dir", help="Job store, run directories and capture cache "
                                          "(default: $PRECISION_DOCTOR_STATE or ~/.local/state/precision-doctor)."),
    workers: int | None = typer.Option(None, "--workers", help="Worker processes (default: one per GPU, one without)."),
    token: str | None = typer.Option(None, "--token", envvar="PRECISION_DOCTOR_TOKEN",
                                     help="Require this token of every request (Authorization: Bearer ...)."),
    allow_root: list[Path] | None = typer.Option(None, "--allow-root", help="A directory whose models and sample files "
                                                 "jobs may name by server path; repeatable (default: none, uploads only)."),
    max_upload_mb: float = typer.Option(512.0, "--max-upload-mb", help="Largest request (uploads) in MiB; larger: 413."),
    cache_mb: float = typer.Option(4096.0, "--cache-mb", help="Disk for captures shared across jobs, MiB (0: no cache)."),
) -> None:
    """Run the diagnosis daemon: HTTP API, job queue, workers and pages (Ctrl-C stops it; running jobs resume later)."""
    _needs_service_extra()
    from precision_doctor.service.config import ServiceConfig, default_state_dir
    from precision_doctor.service.daemon import serve as run
    from precision_doctor.service.engine import gpu_count

    run(ServiceConfig(
        state_dir=state_dir or default_state_dir(), host=host, port=port,
        workers=workers if workers is not None else max(1, gpu_count()), token=token or None,
        allow_roots=list(allow_root or []), max_upload_mb=max_upload_mb, cache_mb=cache_mb,
    ))


@app.command()
def submit(
    model: Path = typer.Argument(..., help="ONNX model (uploaded; with --remote, a path on the server)."),
    inputs: list[Path] | None = InputsOpt,
    samples: int = SamplesOpt,
    seed: int = SeedOpt,
    val_range: list[str] | None = ValRangeOpt,
    input_shapes: list[str] | None = ShapesOpt,
    allow_nonfinite_inputs: bool = NonfiniteOpt,
    validate_inputs: list[Path] | None = typer.Option(None, "--validate-inputs", help="Held-out sample file; repeatable."),
    validation_split: float | None = typer.Option(None, "--validation-split", help="Held-out fraction (as diagnose)."),
    precision: str = PrecisionOpt,
    atol: float = AtolOpt,
    rtol: float = RtolOpt,
    check_error_stat: str = StatOpt,
    cosine_floor: float | None = CosineOpt,
    margin: float = MarginOpt,
    strategy: str = typer.Option("auto", "--strategy", help="auto, bisect, bisect-reverse, linear, ddmin, segment."),
    backend: str = typer.Option("emulate", "--backend", help="emulate, ort-cuda, ort-cpu, trt, or auto (on the server)."),
    confirm_backend: str | None = ConfirmOpt,
    cost: str = typer.Option("nodes", "--cost", help="nodes or flops (as diagnose)."),
    max_evaluations: int | None = typer.Option(None, "--max-evaluations", help="Stop after this many evaluations."),
    time_budget: float | None = typer.Option(None, "--time-budget", help="Stop the search after this many seconds."),
    keep_io_types: bool = typer.Option(True, "--keep-io-types/--no-keep-io-types", help="fixed.onnx keeps FP32 I/O."),
    group_mb: float = typer.Option(256.0, "--group-mb", help="Memory budget of one capture group (MiB)."),
    name: str | None = typer.Option(None, "--name", help="The job's name (default: the model's file name)."),
    remote: bool = typer.Option(False, "--remote", help="MODEL, --inputs and --validate-inputs are paths on the server "
                                "(within its --allow-root directories), not uploaded."),
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
) -> None:
    """Queue a diagnosis on the daemon (the options of `diagnose`); prints the job id as the last line."""
    from precision_doctor.client import ClientError

    settings = {
        "precision": precision,
        "inputs": {"samples": samples, "seed": seed, "val_ranges": list(val_range or []),
                   "input_shapes": list(input_shapes or []), "allow_nonfinite": allow_nonfinite_inputs,
                   "validation_split": validation_split},
        "tolerance": {"atol": atol, "rtol": rtol, "check_error_stat": check_error_stat, "cosine_floor": cosine_floor},
        "search": {"strategy": strategy, "cost": cost, "margin": margin, "max_evaluations": max_evaluations,
                   "time_budget": time_budget, "keep_io_types": keep_io_types},
        "capture": {"group_mb": group_mb},
        "backends": {"backend": backend, "confirm_backend": confirm_backend},
    }
    files, held = list(inputs or []), list(validate_inputs or [])
    if remote:
        settings["inputs"].update(files=[str(p) for p in files], validate_files=[str(p) for p in held])
    else:
        for flag, paths in (("MODEL", [model]), ("--inputs", files), ("--validate-inputs", held)):
            for p in paths:
                if not p.is_file():
                    raise typer.BadParameter(f"{p} is not a file", param_hint=flag)
    with _client(server, token) as client:
        try:
            if remote:
                job = client.submit(settings, model_path=str(model), name=name)
            else:
                job = client.submit(settings, model=model, inputs=files, validate_inputs=held, name=name)
        except ClientError as exc:
            flag = SETTING_FLAGS.get(exc.setting or "")
            if flag:
                raise ClientError(f"{flag}: {exc}", exc.status) from None
            raise
    err.print(f"queued job {job['id']} ({job['name']}) on {client.server}; follow it: precision-doctor wait {job['id']}",
              highlight=False, soft_wrap=True)
    console.print(job["id"], highlight=False)


@app.command()
def jobs(
    state: str | None = typer.Option(None, "--state", help="Only jobs in this state (queued, running, done, failed, cancelled)."),
    as_json: bool = typer.Option(False, "--json", help="Print the jobs as JSON."),
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
) -> None:
    """The daemon's jobs, newest first."""
    with _client(server, token) as client:
        rows = client.jobs(state)
    if as_json:
        console.print_json(json.dumps(rows))
        return
    table = Table(title=f"{len(rows)} job(s)", title_justify="left")
    for col in ("id", "name", "state", "phase", "evals", "FP32 nodes", "passed", "submitted", "message"):
        table.add_column(col, justify="right" if col in ("evals", "FP32 nodes") else "left")
    for j in rows:
        p, r = j.get("progress") or {}, j.get("result") or {}
        table.add_row(
            j["id"], j["name"], j["state"], p.get("phase", "") if j["state"] == "running" else "",
            str(p.get("evaluations", "")), "" if r.get("fallback_size") is None else str(r["fallback_size"]),
            "" if not j.get("result") else ("yes" if r.get("passed") else "no"), (j.get("created") or "")[:19],
            j.get("error") or r.get("reason") or "",
        )
    console.print(table)


@app.command()
def status(
    job_id: str = typer.Argument(..., help="The job's id."),
    as_json: bool = typer.Option(False, "--json", help="The job as JSON: state, progress and, when done, the report."),
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
) -> None:
    """One job's state and progress (and its report's contents with --json)."""
    with _client(server, token) as client:
        job = client.job(job_id)
        if as_json:
            job["report"] = client.report(job_id) if job["state"] in ("done", "cancelled") else None
            console.print_json(json.dumps(job))
            return
    console.print(_describe(job, client.server), highlight=False, soft_wrap=True)


def _describe(job: dict, server: str) -> str:
    p, r = job.get("progress") or {}, job.get("result") or {}
    head = f"job {job['id']} ({job['name']}): {job['state']}"
    if job["state"] == "running":
        best = "" if p.get("best_size") is None else f", smallest passing set so far {p['best_size']}"
        return f"{head}, {p.get('phase', '')}, {p.get('evaluations', 0)} evaluations{best}"
    if job["state"] == "done":
        what = (f"passed keeping {r.get('fallback_size')} node(s) in FP32" if r.get("passed")
                else f"no passing set ({r.get('reason') or r.get('status')})")
        return f"{head}: {what}, {r.get('evaluations')} evaluations; report: {server}/jobs/{job['id']}/report"
    return head + (f": {job['error']}" if job.get("error") else "")


@app.command()
def wait(
    job_id: str = typer.Argument(..., help="The job's id."),
    timeout: float | None = typer.Option(None, "--timeout", help="Give up after this many seconds (exit 4)."),
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
) -> None:
    """Follow a job to its end with a progress bar. Exit 0: done and passed; 1: done without a passing set;
    3: failed or cancelled; 4: --timeout. Rides out a restart of the daemon."""
    from precision_doctor.client import ClientError

    deadline = None if timeout is None else time.monotonic() + timeout
    progress = Progress(TextColumn("{task.description:<28}"), BarColumn(), TextColumn("{task.completed:>5.0f} evaluations"),
                        TimeElapsedColumn(), console=err, transient=True, disable=not err.is_terminal)
    with _client(server, token) as client, progress:
        task = progress.add_task("waiting", total=None)
        job = client.job(job_id)
        while job["state"] not in ("done", "failed", "cancelled"):
            if deadline is not None and time.monotonic() > deadline:
                err.print(f"job {job_id} is still {job['state']} after {timeout:g} s", highlight=False)
                raise typer.Exit(4)
            try:
                for event, data in client.events(job_id):
                    job = data
                    p = data.get("progress") or {}
                    progress.update(task, description=f"{data['state']} {p.get('phase', '')}"[:28],
                                    completed=p.get("evaluations") or 0)
                    if event == "end" or (deadline is not None and time.monotonic() > deadline):
                        break
                job = client.job(job_id)
            except ClientError as exc:
                if exc.status:  # the daemon answered: no such job, wrong token, ...
                    raise
                time.sleep(1.0)  # the daemon is restarting: try again
                try:
                    job = client.job(job_id)
                except ClientError as again:
                    if again.status:
                        raise
    console.print(_describe(job, client.server), highlight=False, soft_wrap=True)
    if job["state"] != "done":
        raise typer.Exit(EXIT_FAILED)
    raise typer.Exit(EXIT_PASSED if (job.get("result") or {}).get("passed") else EXIT_NO_SET)


@app.command()
def cancel(
    job_id: str = typer.Argument(..., help="The job's id."),
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
) -> None:
    """Cancel a job: a queued one at once, a running one at its next safe point (its partial report stays)."""
    with _client(server, token) as client:
        job = client.cancel(job_id)
    what = "cancelled" if job["state"] == "cancelled" else "asked to stop (it ends at its next safe point)"
    console.print(f"job {job_id}: {what}", highlight=False)
