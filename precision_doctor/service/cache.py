"""The daemon's capture cache: finished captures (activations.h5, their analysis kept inside) in one
directory, shared by every worker process; the core's `pipeline.capture_cache.CaptureCache` protocol."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class DirectoryCaptureCache:
    """Captures by key (`pipeline.capture_cache.capture_key`) in `root`, at most `limit_mb` on disk, least
    recently used dropped first. A run directory gets a copy (with `capture.keep all` the core appends the
    "fixed" run to its own file). The per-key lock is an flock, so it holds across processes."""

    def __init__(self, root: Path, limit_mb: float):
        self.root = Path(root)
        self.limit = int(limit_mb * (1 << 20))
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{8,64}", key):
            raise ValueError(f"bad cache key {key!r}")
        return self.root / f"{key}.h5"

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Held while a job looks up and, on a miss, makes this capture: a second job of the same
        model waits and then reuses it instead of capturing it again."""
        self._path(key)  # a well-formed key
        with open(self.root / f"{key}.lock", "a+") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def get(self, key: str, dest: Path) -> bool:
        """Copy the capture of `key` to `dest`; False when there is none."""
        src = self._path(key)
        if not src.is_file():
            return False
        tmp = dest.with_name(f".{dest.name}.partial")
        try:
            shutil.copyfile(src, tmp)
        except FileNotFoundError:  # dropped by another process's eviction just now
            tmp.unlink(missing_ok=True)
            return False
        tmp.replace(dest)
        with contextlib.suppress(FileNotFoundError):
            os.utime(src)  # recently used
        return True

    def put(self, key: str, src: Path) -> None:
        """Keep a copy of `src` under `key` (nothing when the limit is 0), then trim to the limit."""
        if self.limit <= 0:
            return
        dest = self._path(key)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
        shutil.copyfile(src, tmp)
        tmp.replace(dest)
        self._evict(keep=dest)

    def _evict(self, keep: Path) -> None:
        entries = []
        for p in self.root.glob("*.h5"):
            with contextlib.suppress(FileNotFoundError):  # another process may drop entries meanwhile
                st = p.stat()
                entries.append((st.st_mtime, st.st_size, p))
        total = sum(size for _, size, _ in entries)
        for _, size, p in sorted(entries):
            if total <= self.limit:
                break
            if p != keep:
                p.unlink(missing_ok=True)
                total -= size
