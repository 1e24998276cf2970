"""JSON that stays valid: non-finite floats become the strings "inf", "-inf", "nan"; writes are atomic."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from precision_doctor.errors import UserError
from precision_doctor.runfiles import RunDir


class InvalidJSON(UserError, ValueError):
    """A file that is not valid JSON (cut short, empty, binary): one line naming it. A ValueError,
    so callers that treat an unreadable file as absent keep doing so."""


class CannotWrite(UserError, OSError):
    """A file that cannot be written (read-only directory, disk full): one line naming it."""


def jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj) if isinstance(obj, (set, frozenset)) else obj
        return [jsonable(v) for v in items]
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, Path):
        return str(obj)
    return obj


def as_float(v: Any) -> float:
    """Inverse of `jsonable` for one number."""
    return float(v) if v is not None else float("nan")


def write_text_atomic(path: Path, text: str, *, writer: RunDir | None) -> None:
    """Write via a temporary file in the same directory and rename: readers never see half a file. With the run
    directory's `writer` the file is recorded in its manifest first (and a file there that is not ours is
    refused); None: not recorded (no run directory)."""
    path = Path(path)
    if writer is not None:
        writer.written(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise CannotWrite(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise CannotWrite(f"cannot write {path}: {exc.strerror or exc}") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any, *, writer: RunDir | None) -> None:
    """`obj` as indented JSON (`jsonable`), written as `write_text_atomic` writes."""
    write_text_atomic(path, json.dumps(jsonable(obj), indent=2) + "\n", writer=writer)


def read_json(path: Path) -> Any:
    """The file's JSON; InvalidJSON (a UserError and a ValueError) naming the file if it is not JSON."""
    data = Path(path).read_bytes()
    if not data.strip():
        raise InvalidJSON(f"{path} is empty (not JSON; cut short by an interruption?)")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InvalidJSON(f"{path} is not JSON (not UTF-8 text; a binary file?)") from exc
    except json.JSONDecodeError as exc:
        raise InvalidJSON(f"{path} is not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg}; "
                          "cut short or damaged?)") from exc
    except RecursionError:
        raise InvalidJSON(f"{path} is not valid JSON here (nested too deeply)") from None
