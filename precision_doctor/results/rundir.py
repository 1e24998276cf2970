"""Run directories: fresh or empty (never overwrite what a user made), files written atomically."""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path

from precision_doctor.errors import SpecError

DEFAULT_ROOT = Path("reports")


def default_run_dir(model_path: Path, command: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", model_path.stem)
    base = DEFAULT_ROOT / f"{stem}-{command}-{stamp}"
    path, k = base, 1
    while path.exists():
        path, k = Path(f"{base}-{k}"), k + 1
    return path


def prepare_run_dir(path: Path, force: bool = False, resume: bool = False) -> Path:
    """Create `path`; refuse a non-empty one unless `force` (files are then replaced one by one,
    nothing else is deleted) or `resume` (continue a checkpointed run)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise SpecError("out_dir", f"{{out_dir}} {path} exists and is not a directory")
    if path.exists() and any(path.iterdir()) and not (force or resume):
        raise SpecError("out_dir", f"{{out_dir}} {path} exists and is not empty "
                        "(pass {force} to write into it, or choose another)")
    if resume and not path.exists():
        raise SpecError("resume", f"{{resume}}: {path} does not exist")
    path.mkdir(parents=True, exist_ok=True)
    return path
