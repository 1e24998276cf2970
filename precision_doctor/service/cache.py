"""Captures shared across jobs: a second diagnosis of the same model, samples, precision and capture
settings copies the first one's activations.h5 instead of capturing again."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class CaptureCache:
    """Captures (activations.h5 with the reference, low-precision and local runs) shared across jobs,
    keyed by `capture_key`; at most `limit_mb` on disk, least recently used dropped first. A run
    directory gets a copy (the core appends the "fixed" run to its own file)."""

    def __init__(self, root: Path, limit_mb: float):
        self.root = Path(root)
        self.limit = int(limit_mb * (1 << 20))
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{8,64}", key):
            raise ValueError(f"bad cache key {key!r}")
        return self.root / f"{key}.h5"

    @contextmanager
    def locked(self, key: str) -> Iterator[None]:
        """Held while a job looks up and, on a miss, makes this capture: a second job of the same
        model waits and then reuses it instead of capturing it again."""
        with open(self.root / f"{key}.lock", "a+") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def get(self, key: str, dest: Path) -> bool:
        src = self._path(key)
        if not src.is_file():
            return False
        tmp = dest.with_name(f".{dest.name}.partial")
        shutil.copyfile(src, tmp)
        tmp.replace(dest)
        os.utime(src)  # recently used
        return True

    def put(self, key: str, src: Path) -> None:
        if self.limit <= 0:
            return
        dest = self._path(key)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
        shutil.copyfile(src, tmp)
        tmp.replace(dest)
        self._evict(keep=dest)

    def _evict(self, keep: Path) -> None:
        files = sorted(self.root.glob("*.h5"), key=lambda p: p.stat().st_mtime)
        total = sum(p.stat().st_size for p in files)
        for p in files:
            if total <= self.limit:
                break
            if p != keep:
                total -= p.stat().st_size
                p.unlink(missing_ok=True)
