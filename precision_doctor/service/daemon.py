"""`precision-doctor serve`: check the settings, hold the state directory, run uvicorn."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import signal
import socket
import sys
from pathlib import Path

from precision_doctor.errors import UserError, one_line
from precision_doctor.service.auth import token_problem
from precision_doctor.service.config import TOKEN_ENV, ServiceConfig, StateDir, is_loopback
from precision_doctor.words import counted

WORKERS_FROM_CLUSTER = 0  # --executor ray without --workers: as many as the cluster holds (RayLauncher)
MAX_WORKERS = 1024
MAX_MB = float(1 << 30)  # --max-upload-mb, --cache-mb (and --lease-s in seconds): beyond this, a typo


def check(config: ServiceConfig) -> None:
    """Refuse settings that would be unsafe or cannot work (UserError, one line)."""
    if not is_loopback(config.host) and not config.token:
        raise UserError(f"--host {config.host} is not a loopback address: give a --token (or set PRECISION_DOCTOR_TOKEN) "
                        "so that requests without it are refused")
    if config.token is not None and (why := token_problem(config.token)):
        raise UserError(f"--token (or PRECISION_DOCTOR_TOKEN) {why}")
    if not 1 <= config.port <= 65535:
        raise UserError(f"--port must lie in [1, 65535], got {config.port}")
    if config.workers < 1 and not (config.executor == "ray" and config.workers == WORKERS_FROM_CLUSTER):
        raise UserError("--workers must be at least 1")
    if config.workers > MAX_WORKERS:
        raise UserError(f"--workers must be at most {MAX_WORKERS}, got {config.workers}")
    if config.executor == "ray":
        from precision_doctor.service.ray_workers import RayLauncher

        RayLauncher(config)  # Ray installed, --ray-cpus positive (SpecError naming the flag)
    for flag, value, lowest in (("--max-upload-mb", config.max_upload_mb, 0.0), ("--cache-mb", config.cache_mb, None),
                                ("--lease-s", config.lease_s, 0.0)):
        if not (math.isfinite(value) and (value > lowest if lowest is not None else value >= 0) and value <= MAX_MB):
            kind = "a positive" if lowest is not None else "a non-negative"
            raise UserError(f"{flag} must be {kind} number (at most {MAX_MB:g}), got {value:g}")
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
    try:  # the pid is for people; the lock is the flock (a full disk takes the pid, not the lock)
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
    except OSError:
        pass
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
    from precision_doctor.service.store import StoreError

    check(config)
    os.umask(0o077)  # the state directory (uploads, run directories, the store) is the daemon user's alone
    os.environ.pop(TOKEN_ENV, None)  # held in config; nothing started from here (a local Ray instance) inherits it
    config.state_dir = config.state_dir.resolve()
    config.allow_roots = [Path(r).resolve() for r in config.allow_roots]
    lock = hold_state_dir(StateDir(config.state_dir))
    sock = listen(config.host, config.port)
    try:
        with worker_launcher(config) as launcher:
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
            try:
                app = create_app(config, launcher=launcher)
            except StoreError as exc:  # a new store on a full disk, or one another process keeps locked
                raise UserError(f"--state-dir {config.state_dir}: {one_line(exc)}") from None
            where = f"http://{'[' + config.host + ']' if ':' in config.host else config.host}:{config.port}"
            on = " as Ray tasks" if config.executor == "ray" else ""
            print(f"precision-doctor daemon on {where} (state {config.state_dir}, {counted(config.workers, 'worker')}{on}"
                  f"{', token required' if config.token else ''})", file=sys.stderr, flush=True)
            uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5)).run(sockets=[sock])
    finally:
        sock.close()
        with contextlib.suppress(OSError):  # its owner line unflushed on a full disk: the error that ended us is the news
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
