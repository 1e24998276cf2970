"""`precision-doctor serve`: the diagnosis daemon (HTTP API, job queue, workers, pages)."""

from __future__ import annotations

from pathlib import Path

import typer

from precision_doctor.cli.shared import app
from precision_doctor.errors import UserError


def needs_service_extra() -> None:
    """One line instead of an ImportError when the `service` extra is not installed."""
    try:
        import fastapi  # noqa: F401
        import httpx  # noqa: F401
        import multipart  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise UserError(f"the service commands need the 'service' extra ({exc.name} is missing): "
                        "pip install 'precision-doctor[service]'") from None


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (other than loopback: needs --token)."),
    port: int = typer.Option(8765, "--port", help="Port."),
    state_dir: Path | None = typer.Option(None, "--state-dir", help="Job store, run directories and capture cache "
                                          "(default: $PRECISION_DOCTOR_STATE or ~/.local/state/precision-doctor)."),
    workers: int | None = typer.Option(None, "--workers", help="Worker processes (default: one per GPU, one without); "
                                       "with --executor ray, jobs run at once (default: the cluster's GPUs, else "
                                       "its CPUs / --ray-cpus)."),
    token: str | None = typer.Option(None, "--token", envvar="PRECISION_DOCTOR_TOKEN",
                                     help="Require this token of every request (Authorization: Bearer ...)."),
    allow_root: list[Path] | None = typer.Option(None, "--allow-root", help="A directory whose models and sample files "
                                                 "jobs may name by server path; repeatable (default: none, uploads only)."),
    allow_loader_scripts: bool = typer.Option(False, "--allow-loader-scripts", help="Let jobs name a data loader "
                                              "script under an --allow-root (inputs.data_loader_script): it runs as "
                                              "the daemon's user, so only where whoever writes there is trusted."),
    max_upload_mb: float = typer.Option(512.0, "--max-upload-mb", help="Largest request (uploads) in MiB; larger: 413."),
    cache_mb: float = typer.Option(4096.0, "--cache-mb", help="Disk for captures shared across jobs, MiB (0: no cache)."),
    lease_s: float = typer.Option(20.0, "--lease-s", help="A running job's lease, seconds: a worker that does not renew "
                                  "it for this long (while the job store takes writes) counts as hung and is replaced."),
    executor: str = typer.Option("local", "--executor", help="local: worker processes here; ray: each job runs as a "
                                 "Ray task (pip install '.[ray]'; every node needs --state-dir at the same path)."),
    ray_address: str | None = typer.Option(None, "--ray-address", help="The Ray cluster (host:port or ray://host:port); "
                                           "without it a local Ray instance is started and shut down with the daemon."),
    ray_cpus: float | None = typer.Option(None, "--ray-cpus", help="CPUs each job's Ray task asks for, and its ONNX "
                                          "Runtime threads (default 1); a job on ort-cuda or trt also asks for a GPU."),
    keep_jobs: int | None = typer.Option(None, "--keep-jobs", help="Keep the files (run directory, report, uploads) of "
                                         "the newest N finished jobs; older ones' are removed, their rows stay with a "
                                         "note (default: keep all)."),
    keep_days: float | None = typer.Option(None, "--keep-days", help="Remove the files of jobs finished more than D "
                                           "days ago (default: keep all)."),
) -> None:
    """Run the diagnosis daemon: HTTP API, job queue, workers and pages (Ctrl-C stops it; running jobs resume later)."""
    needs_service_extra()
    from precision_doctor.batch.executors import check_executor
    from precision_doctor.service.config import ServiceConfig, default_state_dir
    from precision_doctor.service.daemon import WORKERS_FROM_CLUSTER
    from precision_doctor.service.daemon import serve as run
    from precision_doctor.service.supervisor import gpu_count

    check_executor(executor, ray_address, ray_cpus)  # the rest of --executor ray is checked before the server starts
    if workers is not None and workers < 1:
        raise UserError("--workers must be at least 1")
    if keep_jobs is not None and keep_jobs < 0:
        raise UserError(f"--keep-jobs must be 0 or more, got {keep_jobs}")
    if keep_days is not None and not (keep_days >= 0 and keep_days != float("inf")):
        raise UserError(f"--keep-days must be a number of days, 0 or more, got {keep_days}")
    default_workers = WORKERS_FROM_CLUSTER if executor == "ray" else max(1, gpu_count())
    run(ServiceConfig(
        state_dir=state_dir or default_state_dir(), host=host, port=port,
        workers=workers if workers is not None else default_workers, token=token or None,
        allow_roots=list(allow_root or []), loader_scripts=allow_loader_scripts, max_upload_mb=max_upload_mb,
        cache_mb=cache_mb, lease_s=lease_s,
        executor=executor, ray_address=ray_address, ray_cpus=1.0 if ray_cpus is None else ray_cpus,
        keep_jobs=keep_jobs, keep_days=keep_days,
    ))
