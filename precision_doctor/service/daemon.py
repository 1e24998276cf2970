"""`precision-doctor serve`: check the settings, hold the state directory, run uvicorn."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import socket
import sys
from pathlib import Path

from precision_doctor.errors import UserError
from precision_doctor.service.config import ServiceConfig, StateDir, is_loopback

WORKERS_FROM_CLUSTER = 0  # --executor ray without --workers: as many as the cluster holds (RayLauncher)


def check(config: ServiceConfig) -> None:
    """Refuse settings that would be unsafe or cannot work (UserError, one line)."""
    if not is_loopback(config.host) and not config.token:
        raise UserError(f"--host {config.host} is not a loopback address: give a --token (or set PRECISION_DOCTOR_TOKEN) "
                        "so that requests without it are refused")
    if config.token is not None and len(config.token) < 8:
        raise UserError("--token must be at least 8 characters")
    if config.workers < 1 and not (config.executor == "ray" and config.workers == WORKERS_FROM_CLUSTER):
        raise UserError("--workers must be at least 1")
    if config.executor == "ray":
        from precision_doctor.service.ray_workers import RayLauncher

        RayLauncher(config)  # Ray installed, --ray-cpus positive (SpecError naming the flag)
    if config.max_upload_mb <= 0:
        raise UserError("--max-upload-mb must be positive")
    if config.state_dir.exists() and not config.state_dir.is_dir():
        raise UserError(f"--state-dir {config.state_dir} is not a directory")
    for root in config.allow_roots:
        if not Path(root).is_dir():
            raise UserError(f"--allow-root {root} is not a directory")


def hold_state_dir(state: StateDir):
    """An exclusive lock on the state directory for this daemon's life (the kernel drops it when the
    process dies, SIGKILL included); UserError if another daemon holds it."""
    try:
        state.root.mkdir(parents=True, exist_ok=True)
        f = open(state.daemon_lock, "a+")  # noqa: SIM115 (held for the process's life)
    except OSError as exc:
        raise UserError(f"--state-dir {state.root} cannot be used: {exc.strerror or exc}") from None
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise UserError(f"another daemon uses {state.root} (it holds {state.daemon_lock}); stop it or pick --state-dir") from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def listen(host: str, port: int) -> socket.socket:
    """The daemon's socket, bound before anything starts (UserError when the address cannot be had)."""
    try:
        family = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        raise UserError(f"--host {host}: cannot listen there ({exc.strerror or exc})") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise UserError(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})") from None
    return sock


def serve(config: ServiceConfig) -> None:
    """Run the daemon until SIGINT/SIGTERM (then the workers give their jobs back to the queue)."""
    import uvicorn

    from precision_doctor.service.app import create_app

    check(config)
    config.state_dir = config.state_dir.resolve()
    config.allow_roots = [Path(r).resolve() for r in config.allow_roots]
    lock = hold_state_dir(StateDir(config.state_dir))
    sock = listen(config.host, config.port)
    try:
        with worker_launcher(config) as launcher:
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
            app = create_app(config, launcher=launcher)
            where = f"http://{'[' + config.host + ']' if ':' in config.host else config.host}:{config.port}"
            on = " as Ray tasks" if config.executor == "ray" else ""
            print(f"precision-doctor daemon on {where} (state {config.state_dir}, {config.workers} worker(s){on}"
                  f"{', token required' if config.token else ''})", file=sys.stderr, flush=True)
            uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5)).run(sockets=[sock])
    finally:
        sock.close()
        lock.close()


@contextlib.contextmanager
def worker_launcher(config: ServiceConfig):
    """None (the supervisor's worker processes) or, for `--executor ray`, a connected `RayLauncher`
    (a local Ray instance is shut down on exit); sets the worker count the cluster decides."""
    if config.executor != "ray":
        yield None
        return
    from precision_doctor.service.ray_workers import RayLauncher

    print("precision-doctor daemon: " + (f"connecting to the Ray cluster at {config.ray_address}" if config.ray_address
          else "starting a local Ray instance"), file=sys.stderr, flush=True)
    terminated = False
    with RayLauncher(config) as launcher:
        if config.workers == WORKERS_FROM_CLUSTER:
            config.workers = launcher.default_workers()
        # uvicorn ends on SIGTERM by re-raising it to the handler it found (ray.init's: sys.exit(15)): make
        # it an exception, so that a local Ray instance is shut down on the way out, then end by SIGTERM
        # as the daemon does without Ray
        previous = signal.signal(signal.SIGTERM, _terminated)
        try:
            yield launcher
        except Terminated:
            terminated = True
        finally:
            signal.signal(signal.SIGTERM, previous)
    if terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)


class Terminated(BaseException):
    """SIGTERM arrived (raised by `_terminated`)."""


def _terminated(signum: int, frame: object) -> None:
    raise Terminated()
