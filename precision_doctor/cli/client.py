"""The daemon's clients: `submit` (the options of `diagnose`), `resubmit`, `jobs`, `status`, `wait`, `cancel`, each
against `--server URL` (default $PRECISION_DOCTOR_SERVER or the local daemon) with `--token` (default
$PRECISION_DOCTOR_TOKEN)."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from precision_doctor.cli.options import CHANGES, DIAGNOSIS, Options, flag, with_options
from precision_doctor.cli.serve import needs_service_extra
from precision_doctor.cli.shared import PlainProgress, app, console, err, fail, plain_progress, styled
from precision_doctor.outcome import JobState
from precision_doctor.words import counted

ServerOpt = typer.Option(None, "--server", help="The daemon's URL (default: $PRECISION_DOCTOR_SERVER or http://127.0.0.1:8765).")
TokenOpt = typer.Option(None, "--token", help="The daemon's token (default: $PRECISION_DOCTOR_TOKEN).")
EXIT_PASSED, EXIT_NO_SET, EXIT_FAILED, EXIT_TIMEOUT = 0, 1, 3, 4
REACH_S = 30.0  # `wait`: how long a daemon that cannot be reached at first may take to come (back) up


def _client(server: str | None, token: str | None):
    needs_service_extra()
    from precision_doctor.service.client import Client

    return Client(server, token)


@app.command()
@with_options(*DIAGNOSIS)
def submit(
    model: Path = typer.Argument(..., help="ONNX model (uploaded; with --remote, a path on the server)."),
    name: str | None = typer.Option(None, "--name", help="The job's name (default: the model's file name)."),
    remote: bool = typer.Option(False, "--remote", help="MODEL, --inputs and --validate-inputs (files, directories, "
                                "globs) and --data-loader-script are paths on the server (within its --allow-root "
                                "directories), not uploaded."),
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
    options: Options = None,
) -> None:
    """Queue a diagnosis on the daemon (the options of `diagnose`); prints the job id as the last line."""
    spec = options.spec(model)
    settings = spec.to_json()
    del settings["model"]
    files, held = [Path(f) for f in spec.inputs.files], [Path(f) for f in spec.inputs.validate_files]
    if not remote:  # uploaded, not named: directories and globs are expanded here, each file uploaded
        from precision_doctor.data.sources import expand_inputs

        if spec.inputs.data_loader_script:
            fail(f"{flag('inputs.data_loader_script')} is not uploaded (a script runs code on the daemon): name one on "
                 "the server with --remote (the daemon runs scripts under its --allow-root with --allow-loader-scripts)")
        settings["inputs"].update(files=[], validate_files=[])
        if not model.is_file():
            fail(f"MODEL {model}: no such file")
        files, held = expand_inputs(files), expand_inputs(held, "inputs.validate_files")
    with _client(server, token) as client, _flags_named():
        if remote:
            job = client.submit(settings, model_path=str(model), name=name)
        else:
            job = client.submit(settings, model=model, inputs=files, validate_inputs=held, name=name)
    err.print(f"queued job {job.id} ({job.name}) on {client.server}; follow it: precision-doctor wait {job.id}",
              highlight=False, soft_wrap=True)
    console.print(job.id, highlight=False)


@app.command()
@with_options(*CHANGES)
def resubmit(
    job_id: str = typer.Argument(..., help="The finished job's id."),
    name: str | None = typer.Option(None, "--name", help="The new job's name (default: the job's)."),
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
    options: Options = None,
) -> None:
    """Run a finished job again on the daemon's copies of its model and samples, with the options given changed.

    The options are those of `diagnose`, but the files; prints the new job's id as the last line. Where only the budget
    changes (--max-evaluations, --time-budget, or nothing), it resumes the job's search where it stopped, without the
    old budget unless one is given."""
    changes: dict = {}
    for path, value in options.given_settings().items():
        section, _, key = path.partition(".")
        if key:
            changes.setdefault(section, {})[key] = list(value) if isinstance(value, tuple) else value
        else:
            changes[section] = value
    with _client(server, token) as client, _flags_named():
        job, continues = client.resubmit(job_id, changes, name)
    how = "resuming its search where it stopped" if continues else "from the start, with the changes"
    err.print(f"queued job {job.id} ({job.name}) on {client.server}: job {job_id} again, {how}; follow it: "
              f"precision-doctor wait {job.id}", highlight=False, soft_wrap=True)
    console.print(job.id, highlight=False)


@contextmanager
def _flags_named():
    """The daemon's refusal of a setting, in the CLI's words (its flag)."""
    from precision_doctor.service.client import ClientError

    try:
        yield
    except ClientError as exc:
        if exc.setting:
            raise ClientError(str(exc).replace(exc.setting, flag(exc.setting)), exc.status) from None
        raise


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
        console.print_json(json.dumps([j.to_json() for j in rows]))
        return
    table = Table(title=counted(len(rows), "job"), title_justify="left")
    for col in ("id", "name", "state", "phase", "evals", "FP32 nodes", "passed", "submitted", "message"):
        table.add_column(col, justify="right" if col in ("evals", "FP32 nodes") else "left")
    for j in rows:
        r = j.result
        table.add_row(
            j.id, j.name, j.state, j.progress.phase if j.state == JobState.RUNNING else "", str(j.progress.evaluations),
            "" if r is None or r.fallback_size is None else str(r.fallback_size),
            "" if r is None else ("yes" if r.passed else "no"), (j.created or "")[:19],
            j.error or (r.reason if r else None) or "",
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
            out = job.to_json()
            out["report"] = client.report(job_id) if job.state in (JobState.DONE, JobState.CANCELLED) else None
            console.print_json(json.dumps(out))
            return
    console.print(describe(job, client.server), highlight=False, soft_wrap=True)


def _best(p) -> str:
    """A running job's smallest passing set so far, in its counterexample-guided round (a `service.schema.Progress`)."""
    if p.best_size is None:
        return ""
    return f", smallest passing set so far {p.best_size}" + (f" (round {p.search_round + 1})" if p.search_round else "")


def describe(job, server: str) -> str:
    """One line about a job (a `service.schema.JobView`)."""
    p, r = job.progress, job.result
    head = f"job {job.id} ({job.name}): {job.state}"
    if job.state == JobState.RUNNING:
        return f"{head}, {p.phase}, {counted(p.evaluations, 'evaluation')}{_best(p)}"
    if job.state == JobState.DONE and r is not None:
        kept = f"passed keeping {counted(r.fallback_size or 0, 'node')} in FP32"
        what = r.headline.rstrip(".") if r.headline else (kept if r.passed else f"no passing set ({r.reason or r.status})")
        return f"{head}: {what}, {counted(r.evaluations or 0, 'evaluation')}; report: {server}/jobs/{job.id}/report"
    return head + (f": {job.error}" if job.error else "")


@app.command()
def wait(
    job_id: str = typer.Argument(..., help="The job's id."),
    timeout: float | None = typer.Option(None, "--timeout", help="Give up after this many seconds (exit 4)."),
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
) -> None:
    """Follow a job to its end with a progress bar. Exit 0: done and passed; 1: done without a passing set;
    3: failed or cancelled; 4: --timeout.

    Rides out a restart of the daemon. A job that ended before it was followed gets the same lines as one followed to
    its end: its warnings, its final state line (without a terminal) and its outcome."""
    from precision_doctor.service.client import ClientError

    deadline = None if timeout is None else time.monotonic() + timeout
    plain, said = plain_progress(), [("", ""), 0]  # where the bar is off: a line per state or phase, and every EVERY_S
    warned = 0  # the job's warnings printed so far
    bar = Progress(TextColumn("{task.description:<28}"), BarColumn(), TextColumn("{task.completed:>5.0f} evaluations"),
                   TimeElapsedColumn(), console=err, transient=True, disable=not err.is_terminal)
    with _client(server, token) as client, bar:
        task = bar.add_task("waiting", total=None)
        job = _fetch(client, job_id, patience_s=REACH_S)
        while job is None or not job.terminal:
            if deadline is not None and time.monotonic() > deadline:
                err.print(f"job {job_id} is still {job.state if job else 'unknown'} after {timeout:g} s", highlight=False)
                raise typer.Exit(EXIT_TIMEOUT)
            if job is not None:
                try:
                    for event, seen in client.events(job_id):
                        job = seen
                        bar.update(task, description=f"{seen.state} {seen.progress.phase}"[:28],
                                   completed=seen.progress.evaluations)
                        warned = _warn(seen, warned)
                        if plain is not None:
                            _plain_line(plain, said, seen)
                        if event == "end" or (deadline is not None and time.monotonic() > deadline):
                            break
                except ClientError as exc:
                    if exc.status:  # the daemon answered: no such job, wrong token, ...
                        raise
            latest = _fetch(client, job_id)
            if latest is None:
                time.sleep(1.0)  # the daemon is (re)starting: try again
            job = latest or job
    _warn(job, warned)  # a job that ended before it was followed: its warnings, once
    if plain is not None and said[0] != (job.state, job.progress.phase):  # ... and its final state line
        _plain_line(plain, said, job)
    console.print(describe(job, client.server), highlight=False, soft_wrap=True)
    if job.state != JobState.DONE:
        raise typer.Exit(EXIT_FAILED)
    raise typer.Exit(EXIT_PASSED if job.result is not None and job.result.passed else EXIT_NO_SET)


def _warn(job, warned: int) -> int:
    """Print the job's warnings after the first `warned` (each once, as its run gave them); how many are printed."""
    for said in job.progress.warnings[warned:]:
        err.print(styled("warning:", "bold yellow", f" job {job.id}: {said}"))
    return max(warned, len(job.progress.warnings))


def _plain_line(plain: PlainProgress, said: list, job) -> None:
    """`wait`'s progress where the bar is off: a line when the job's state or phase changes, else every EVERY_S
    seconds (`said`: the last line's (state, phase) and time)."""
    now, p = time.monotonic(), job.progress
    if said[0] == (job.state, p.phase) and now - said[1] < plain.EVERY_S:
        return
    said[:] = [(job.state, p.phase), now]
    # once the job ended its answer is in its result (the cost ranking may pick another passing set than the smallest)
    best = "" if job.terminal else _best(p)
    for_s = "" if p.phase_for_s is None or job.terminal else f" ({p.phase_for_s:.0f} s)"
    phase = "" if p.phase == str(job.state) else f" {p.phase}"  # "done", not "done done"
    plain.line(f"job {job.id}: {job.state}{phase}{for_s}, {counted(p.evaluations, 'evaluation')}{best}")


def _fetch(client, job_id: str, patience_s: float = 0.0):
    """The job (a JobView), or None while the daemon cannot be reached (it may be restarting); with
    `patience_s`, tried that long before the daemon's absence is an error."""
    from precision_doctor.service.client import ClientError

    deadline = time.monotonic() + patience_s
    while True:
        try:
            return client.job(job_id)
        except ClientError as exc:
            if exc.status:
                raise
            if not patience_s:
                return None
            if time.monotonic() > deadline:
                raise
        time.sleep(1.0)


@app.command()
def cancel(
    job_id: str = typer.Argument(..., help="The job's id."),
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
) -> None:
    """Cancel a job: a queued one at once, a running one at its next safe point (its partial report stays)."""
    with _client(server, token) as client:
        job = client.cancel(job_id)
    what = "cancelled" if job.state == JobState.CANCELLED else "asked to stop (it ends at its next safe point)"
    console.print(f"job {job_id}: {what}", highlight=False)
