"""Disk space: the room left for a write, and disk-full errors recognised wherever they come from.

A full disk (ENOSPC), a quota (EDQUOT) or the file-size limit (EFBIG: `ulimit -f`, RLIMIT_FSIZE) ends a run
with one line naming the directory and what ran out (`DiskFull`, a UserError: exit 2); the run directory is
kept when it can be resumed (`results.rundir.open_run_dir`). Two facts shape this:

* HDF5 2.0 (h5py 3.16) does not recover from a failed write: every later flush of the file fails again (h5py
  prints a traceback for each handle it frees: 40,877 lines on a 200 KB tmpfs), and closing the file, or the
  library's own clean-up at exit, kills the process (SIGSEGV). So the activation store checks `room` before
  each write and stops while `RESERVE_BYTES` are still free, which HDF5's metadata flushes then use. A write
  that fails anyway (another process filled the disk) abandons the file (`abandon`): it is never closed, and
  the CLI ends with `os._exit` once it has said why (`abandoned`).
* The errors come as OSError with an errno, and from h5py also as RuntimeError/ValueError/KeyError whose text
  carries HDF5's "errno = 28"; `disk_full` recognises both anywhere in an exception's chain.
"""

from __future__ import annotations

import errno
import os
import re
import resource
from pathlib import Path

from precision_doctor.errors import UserError

RESERVE_BYTES = 16 << 20  # left free by the activation store: HDF5's metadata cache is flushed at close
WHAT_RAN_OUT = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is used up",
                errno.EFBIG: "the file size limit (ulimit -f) is reached"}
ADVICE = {errno.ENOSPC: "free some space", errno.EDQUOT: "free some space (or ask for a larger quota)",
          errno.EFBIG: "raise the file size limit (ulimit -f)"}
_HDF5_ERRNO = re.compile(r"errno = (\d+)")
_HDF5_FILE = re.compile(r"filename = '([^']*)'")
abandoned: list[object] = []  # HDF5 files whose writes failed: never closed (see above)


class DiskFull(UserError):
    """A write ran out of room: `directory` is where, `code` what ran out (ENOSPC, EDQUOT, EFBIG), `file` which
    file was being written; `advice` what to do about it."""

    def __init__(self, directory: Path, code: int, file: str | None = None, detail: str = ""):
        self.directory, self.code, self.file = Path(directory), code, file
        writing = f" while writing {file}" if file else ""
        super().__init__(f"{directory}: {WHAT_RAN_OUT[code]}{writing}" + (f" ({detail})" if detail else ""))

    @property
    def advice(self) -> str:
        return ADVICE[self.code]


def file_size_limit() -> int | None:
    """The file-size limit (ulimit -f, RLIMIT_FSIZE) in bytes; None without one."""
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if limit == resource.RLIM_INFINITY else limit


def _room(path: Path) -> tuple[int, int | None]:
    """(free bytes of the file system for an unprivileged process, bytes the file-size limit leaves the file
    or None without a limit)."""
    path = Path(path)
    st = os.statvfs(path if path.is_dir() else path.parent)
    limit = file_size_limit()
    if limit is None:
        return st.f_bavail * st.f_frsize, None
    return st.f_bavail * st.f_frsize, max(limit - (path.stat().st_size if path.is_file() else 0), 0)


def free_space(path: Path) -> int:
    """Free bytes of the file system of `path` (a directory: of a new file in it) for an unprivileged process."""
    return _room(path)[0]


def check_room(path: Path, need: int) -> None:
    """DiskFull unless `need` more bytes fit in the file at `path` with `RESERVE_BYTES` to spare."""
    free, by_limit = _room(path)
    left = free if by_limit is None else min(free, by_limit)
    if left < need + RESERVE_BYTES:
        code = errno.EFBIG if by_limit is not None and by_limit < free else errno.ENOSPC
        raise DiskFull(Path(path).parent, code, Path(path).name, f"{left / 2**20:.1f} MiB left, "
                       f"{(need + RESERVE_BYTES) / 2**20:.1f} MiB needed with a reserve for HDF5")


def disk_full(exc: BaseException | None) -> tuple[int, str | None] | None:
    """(errno, file name or None) when `exc` or an exception in its chain is a disk-full error (ENOSPC,
    EDQUOT, EFBIG; an OSError's errno or HDF5's "errno = N" in h5py's text), else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, DiskFull):
            return exc.code, exc.file
        code = getattr(exc, "errno", None)
        if not isinstance(code, int) or code not in WHAT_RAN_OUT:
            m = _HDF5_ERRNO.search(str(exc))
            code = int(m.group(1)) if m else None
        if code in WHAT_RAN_OUT:
            name = getattr(exc, "filename", None)
            if not isinstance(name, str):
                m = _HDF5_FILE.search(str(exc))
                name = m.group(1) if m else None
            return code, name
        exc = exc.__cause__ or exc.__context__
    return None


def as_disk_full(exc: BaseException, directory: Path) -> DiskFull | None:
    """`exc` as a DiskFull naming `directory` (None when it is no disk-full error)."""
    if isinstance(exc, DiskFull):
        return exc
    found = disk_full(exc)
    if found is None:
        return None
    code, name = found
    return DiskFull(directory, code, Path(name).name if name else None)


def abandon(handle: object) -> None:
    """Keep an HDF5 file (and its open objects) whose write failed from ever being closed (see above)."""
    abandoned.append(handle)
