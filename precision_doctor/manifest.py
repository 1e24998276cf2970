"""A run directory's manifest: the files this tool wrote there, recorded as each is written.

`--force` replaces only the files the manifest lists, a failed run removes only those, and a write never
replaces a file the manifest does not list (someone else's file with one of our names). A directory
without a manifest is not a run directory: writes there are not recorded (zoo fetch, a user's folder).
Only the stdlib here. Writers record through a `runfiles.RunDir` passed down to them (`RunDir.written` calls
`record`), not through this module.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
import threading
from pathlib import Path

from precision_doctor.errors import SpecError

MANIFEST = ".precision-doctor-manifest.json"
_lock = threading.Lock()  # one writer of a manifest at a time within a process (runs in threads)


class NotOurs(SpecError):
    """A file in a run directory that the manifest does not list, where this tool would write."""

    def __init__(self, path: Path):
        self.path = Path(path)
        super().__init__("out_dir", f"{{out_dir}} {self.path.parent}: {self.path.name} was not written by "
                         f"precision-doctor (not in {MANIFEST}); move it away or choose another {{out_dir}}")


def listed(run_dir: Path) -> set[str] | None:
    """The file names the manifest of `run_dir` lists; None when there is no (readable) manifest."""
    try:
        data = json.loads((Path(run_dir) / MANIFEST).read_text(encoding="utf-8"))
        return {str(f) for f in data.get("files", [])}
    except (OSError, ValueError, AttributeError):
        return None


def start(run_dir: Path, adopt: list[str] | tuple[str, ...] = ()) -> None:
    """Make `run_dir` a run directory (an empty manifest) unless it is one; `adopt` lists existing files to
    record as ours (a run directory of a version that kept no manifest)."""
    run_dir = Path(run_dir)
    with _lock:
        if listed(run_dir) is None:
            _write(run_dir, sorted(n for n in adopt if (run_dir / n).exists()))


def _root(path: Path) -> Path | None:
    """The run directory `path` is in: its folder, or the folder above (a run's subfolder such as knobs/)."""
    for d in (path.parent, path.parent.parent):
        if (d / MANIFEST).is_file():
            return d
    return None


def record(run_dir: Path, path: Path) -> None:
    """Record `path` (in `run_dir` or a subfolder of it) in the manifest of `run_dir` before it is written (a kill
    between the two leaves a listed file that does not exist, never an unlisted one of ours); a file in a
    subfolder is listed as "sub/name". NotOurs when `path` exists and the manifest does not list it. Nothing when
    `run_dir` has no (readable) manifest. Writers call it through `runfiles.RunDir.written`."""
    root, path = Path(run_dir), Path(path)
    with _lock:
        files = listed(root)
        if files is None:
            return
        name = Path(os.path.relpath(path, root)).as_posix()
        if name in files:
            return
        if path.exists():
            raise NotOurs(path)
        _write(root, sorted(files | {name}))


def ours(path: Path) -> bool:
    """Whether the manifest of `path`'s run directory lists it."""
    path = Path(path)
    root = _root(path)
    return root is not None and path.relative_to(root).as_posix() in (listed(root) or set())


def forget(run_dir: Path, names: set[str]) -> None:
    """Take `names` off the manifest (files this tool removed)."""
    with _lock:
        files = listed(run_dir)
        if files is not None and files & names:
            _write(Path(run_dir), sorted(files - names))


def remove_ours(run_dir: Path, keep: tuple[str, ...] = ()) -> list[str]:
    """Delete the files the manifest lists (not `keep`); returns their names. Nothing else is touched."""
    run_dir = Path(run_dir)
    files = listed(run_dir) or set()
    removed = []
    for name in sorted(files - set(keep)):
        p = run_dir / name
        if p.is_file() or p.is_symlink():
            p.unlink()
        if "/" in name and p.parent.is_dir() and not any(p.parent.iterdir()):
            p.parent.rmdir()  # a subfolder of ours (knobs/) left empty
        removed.append(name)
    forget(run_dir, set(removed))
    return removed


def _write(run_dir: Path, files: list[str]) -> None:
    data = {"tool": "precision-doctor", "updated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "files": files}
    fd, tmp = tempfile.mkstemp(prefix=f"{MANIFEST}.", dir=run_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
        os.chmod(tmp, 0o644)
        os.replace(tmp, run_dir / MANIFEST)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
