"""The lock a run holds on its directory: one diagnose, compare, batch (or service job) at a time.

The lock is `DIR/.precision-doctor.lock`, held with flock(2) on an open file (the kernel lets go when the
holder dies, so a lock left by a killed process is simply free) and holding its owner as JSON: pid, host,
command, start time. A second run is refused with that owner named. Where flock is not supported (some
network file systems), the file is created with O_EXCL and a lock whose owner process is gone from this
host is taken over: it is renamed away (atomic) and checked to be the one read, then created anew.
Locks are per open file, so two runs in threads of one process exclude each other too.
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import shlex
import socket
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from precision_doctor.errors import SpecError

LOCK = ".precision-doctor.lock"


@dataclass(frozen=True)
class LockOwner:
    """Who holds (or held) a run directory."""

    pid: int
    host: str
    command: str
    started: str

    def describe(self) -> str:
        return f"process {self.pid} on {self.host} ({self.command}, started {self.started})"

    def alive(self) -> bool | None:
        """Whether the owner process still exists (None: on another host, cannot tell)."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


class RunDirLocked(SpecError):
    """Another run holds the directory; `owner` says who (None when it has not written its name yet)."""

    def __init__(self, run_dir: Path, owner: LockOwner | None, what: str = "another run"):
        self.run_dir, self.owner = Path(run_dir), owner
        who = owner.describe() if owner else "a process that has not recorded itself yet"
        super().__init__("out_dir", f"{what} is using {{out_dir}} {run_dir}: {who}; wait for it to end, "
                         "or choose another {out_dir}")


def this_command() -> str:
    """The command line of this process, as a user would type it."""
    argv = list(sys.argv)
    if argv and argv[0].endswith("__main__.py"):
        argv[0] = "python -m precision_doctor"
    elif argv:
        argv[0] = Path(argv[0]).name
    text = " ".join([argv[0], shlex.join(argv[1:])]) if argv else "python"
    return text[:300]


def read_owner(run_dir: Path) -> LockOwner | None:
    """The owner recorded in the lock file of `run_dir` (held or not); None when there is none."""
    return _parse(Path(run_dir) / LOCK)


def _parse(path: Path) -> LockOwner | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return LockOwner(int(data["pid"]), str(data["host"]), str(data["command"]), str(data["started"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


class RunLock:
    """`with RunLock(dir): ...` holds `dir`'s lock (RunDirLocked if another run has it); the lock file is
    removed on release. `took_over` names the dead owner of a stale lock this one replaced."""

    def __init__(self, run_dir: Path, command: str | None = None, what: str = "another run"):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK
        self.owner = LockOwner(os.getpid(), socket.gethostname(), command or this_command(),
                               _dt.datetime.now().astimezone().isoformat(timespec="seconds"))
        self.what = what
        self.took_over: LockOwner | None = None
        self._fd: int | None = None

    # -- holding ---------------------------------------------------------------------------------------
    def acquire(self) -> RunLock:
        for _ in range(5):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                got = _flock(fd)
            except OSError:
                os.close(fd)
                raise
            if got is None:  # flock unsupported here
                os.close(fd)
                return self._acquire_exclusive()
            if not got:
                os.close(fd)
                raise RunDirLocked(self.run_dir, self._owner_of_held(), self.what)
            if not _same_file(fd, self.path):  # released and removed between our open and our flock
                os.close(fd)
                continue
            previous = read_owner(self.run_dir)
            self.took_over = previous if previous and previous.pid != os.getpid() else None
            self._fd = fd
            self._record(fd)
            return self
        raise RunDirLocked(self.run_dir, read_owner(self.run_dir), self.what)

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            if _same_file(self._fd, self.path):
                self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)  # closing lets go of the flock
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    # -- internals --------------------------------------------------------------------------------------
    def _record(self, fd: int) -> None:
        data = json.dumps(asdict(self.owner)).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fsync(fd)

    def _owner_of_held(self) -> LockOwner | None:
        """The holder writes its name right after it takes the lock: give it a moment."""
        for _ in range(10):
            owner = read_owner(self.run_dir)
            if owner is not None:
                return owner
            time.sleep(0.05)
        return None

    def _acquire_exclusive(self) -> RunLock:
        """Without flock: create the file exclusively; take over a lock whose owner is gone from this host."""
        for _ in range(5):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                owner = self._owner_of_held()
                if owner is None or owner.alive() is not False:
                    raise RunDirLocked(self.run_dir, owner, self.what) from None
                aside = self.path.with_name(f"{LOCK}.stale-{uuid.uuid4().hex[:8]}")
                try:
                    os.rename(self.path, aside)  # only one taker wins the rename
                except FileNotFoundError:
                    continue
                moved = _parse(aside)
                if moved != owner:  # a live run took it meanwhile: give its file back, and refuse
                    try:
                        os.link(aside, self.path)
                    except OSError:
                        pass
                    aside.unlink(missing_ok=True)
                    raise RunDirLocked(self.run_dir, moved, self.what) from None
                aside.unlink(missing_ok=True)
                self.took_over = owner
                continue
            self._fd = fd
            self._record(fd)
            return self
        raise RunDirLocked(self.run_dir, read_owner(self.run_dir), self.what)


def _flock(fd: int) -> bool | None:
    """Try to take an exclusive flock: True (taken), False (held by another), None (not supported here)."""
    try:
        import fcntl
    except ImportError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return None
        raise


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_ino, a.st_dev) == (b.st_ino, b.st_dev)


def lock_owner(run_dir: Path) -> LockOwner | None:
    """Who holds `run_dir` now (None: nobody). For a service that shows what runs where."""
    path = Path(run_dir) / LOCK
    if not path.exists():
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        got = _flock(fd)
        if got is None:
            owner = read_owner(run_dir)
            return owner if owner is not None and owner.alive() is not False else None
        if got:
            return None  # free (a stale file): let go again at close
        return read_owner(run_dir)
    finally:
        os.close(fd)
