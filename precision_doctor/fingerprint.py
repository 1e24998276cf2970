"""Which code made a file: the version and a hash of the package's source, so that what one build of
precision-doctor keeps for later (the analysis kept in activations.h5, the service's capture cache) is
not trusted by another build, released or not (an editable install keeps its version across changes)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from precision_doctor import __version__


@functools.cache
def code_fingerprint() -> str:
    """`<version>+<16 hex digits of the SHA-256 of every .py file of the package>`."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
    return f"{__version__}+{h.hexdigest()[:16]}"
