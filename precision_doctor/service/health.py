"""What `/healthz` says beyond "alive": the disk under the state directory, and errors that mean the disk
is full (`out_of_space`), which the API answers with 507 instead of a 500."""

from __future__ import annotations

import errno
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

LOW_DISK_BYTES = 4 << 20  # below this much free space the state directory's disk counts as full
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


@dataclass(frozen=True)
class DiskUse:
    """The filesystem holding the state directory (`shutil.disk_usage`)."""

    path: str
    total_bytes: int
    used_bytes: int
    free_bytes: int

    @property
    def full(self) -> bool:
        return self.free_bytes < LOW_DISK_BYTES

    def to_json(self) -> dict:
        """As /healthz shows it (no path: /healthz needs no token)."""
        out = {k: v for k, v in asdict(self).items() if k != "path"}
        return {**out, "used_share": round(self.used_bytes / self.total_bytes, 4) if self.total_bytes else None,
                "full": self.full}

    def problem(self) -> str | None:
        if not self.full:
            return None
        return (f"the disk of the state directory is full ({self.free_bytes >> 10} KiB free): jobs cannot be stored or "
                "run until space is freed")


def disk_use(path: Path) -> DiskUse | None:
    """The disk use of `path`'s filesystem (None when it cannot be read)."""
    try:
        u = shutil.disk_usage(path)
    except OSError:
        return None
    return DiskUse(str(path), u.total, u.used, u.free)


def out_of_space(exc: BaseException) -> bool:
    """Whether `exc` (or what it was raised from) says a disk or quota is full."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in NO_SPACE:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False
