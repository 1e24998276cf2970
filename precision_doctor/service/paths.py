"""Server paths a job names (`model`, `inputs.files`, `inputs.validate_files`, `inputs.reference_outputs`,
`inputs.data_loader_script`): confined to the allowed roots and pinned into the job's directory at submission.
A directory or a glob in `inputs.files`/`inputs.validate_files` is expanded at submission (`expand_confined`:
the directory, or the glob's fixed leading directories, must lie under a root; only matches whose real path
does too are kept; a glob may not hold `..`; at most MAX_JOB_FILES matches, in at most GLOB_TIME_S) and each file
found is pinned once by its real path (`Pins`: a file named twice, or by two names, is one file of the job; it must
have a sample file's suffix).

A file is checked before it is opened (its real path, symlinks resolved, is a regular file under an
`--allow-root`: nothing outside the roots is ever opened) and again after: the inode opened must be the
one at that real path now, so a symlink swapped in between changes nothing. The opened file is then
pinned as `STATE/jobs/ID/inputs/...`: a hard link to the opened inode where the filesystem allows one
(`/proc/self/fd`), else a copy read from the open descriptor. The job's settings name the pinned files
only, and the worker refuses a job whose settings name a file outside its directory (`check_pinned`): a
file swapped after the submission (a symlink to `/etc/shadow` in place of the model) is never read. A
model's external data files (the `location`s of its tensors, which ONNX keeps inside the model's
directory) are pinned beside it.

A missing file, a forbidden one and one that is not a regular file get the same answer: a submitter
learns nothing about files outside the roots.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path, PurePosixPath

from precision_doctor.errors import SpecError, UserError
from precision_doctor.graph.proto_scan import Malformed, external_locations
from precision_doctor.service.config import GLOB_TIME_S, MAX_JOB_FILES
from precision_doctor.service.uploads import Refused, safe_filename


def unavailable(what: str, path: str, setting: str | None = None) -> Refused:
    """The one answer for a path that is missing, outside the roots, or not a regular file."""
    return Refused(403, f"{what}: '{path}' is not a file this server may read (it must exist under an --allow-root "
                   "directory)", setting=setting)


def open_confined(path: str, roots: list[Path], what: str, setting: str | None = None) -> tuple[int, Path]:
    """(an open read-only descriptor, the real path) of `path`, a regular file under one of `roots`;
    Refused otherwise (`what` names it in the message, `setting` is the RunSpec setting, if one). The
    caller closes the descriptor."""
    if not roots:
        raise Refused(403, f"{what}: this server takes no paths on the server (start it with --allow-root DIR); "
                      "upload the file")
    roots = [Path(os.path.realpath(r)) for r in roots]
    if "\x00" in path:
        raise Refused(400, f"{what}: the path must not contain NUL characters", setting=setting)
    if not Path(path).is_absolute():
        raise Refused(400, f"{what}: '{path}' must be an absolute path on the server", setting=setting)
    # checked before the open (nothing outside the roots is opened: opening a device can act) and after it
    # (the inode opened is the one at the real path now: no swap in between)
    real = _real_regular_file(path, roots)
    if real is None:
        raise unavailable(what, path, setting)
    try:  # O_NOFOLLOW and O_NONBLOCK: a symlink or FIFO swapped in since is refused, not followed or waited on
        fd = os.open(real, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_NOCTTY", 0))
    except OSError:
        raise unavailable(what, path, setting) from None
    try:
        opened = os.fstat(fd)
        now = _real_regular_file(path, roots)
        here = os.stat(now) if now is not None else None
        if here is None or not stat.S_ISREG(opened.st_mode) or (here.st_dev, here.st_ino) != (opened.st_dev, opened.st_ino):
            raise unavailable(what, path, setting)
        os.set_blocking(fd, True)
    except OSError:
        os.close(fd)
        raise unavailable(what, path, setting) from None
    except BaseException:
        os.close(fd)
        raise
    return fd, real


def _real_under(path: str, roots: list[Path], is_kind=stat.S_ISREG) -> Path | None:
    """The real path of `path` (symlinks resolved) if it is under one of `roots` and of its kind (`is_kind` of its
    mode: a regular file, or `stat.S_ISDIR` a directory)."""
    try:
        real = Path(os.path.realpath(path, strict=True))
        if any(real.is_relative_to(r) for r in roots) and is_kind(os.stat(real).st_mode):
            return real
    except (OSError, ValueError):
        pass
    return None


def _real_regular_file(path: str, roots: list[Path]) -> Path | None:
    return _real_under(path, roots)


def pin(fd: int, dest: Path) -> None:
    """Make `dest` the file open at `fd`: a hard link to its inode where the filesystem allows, else a copy."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    proc = f"/proc/self/fd/{fd}"
    with contextlib.suppress(OSError, NotImplementedError):
        os.link(proc, dest, follow_symlinks=True)  # linkat(AT_SYMLINK_FOLLOW): the open inode, not a path
        return
    with open(dest, "xb") as out, os.fdopen(os.dup(fd), "rb") as src:
        src.seek(0)
        shutil.copyfileobj(src, out, 1 << 20)


def pin_confined(path: str, roots: list[Path], what: str, dest_dir: Path, prefix: str = "",
                 setting: str | None = None) -> Path:
    """Pin the server file `path` (confined to `roots`) as `dest_dir/<prefix><its real name>` (the real name
    keeps the suffix that says its format); returns the pinned path."""
    return Pins(roots, limit=1).pin(path, what, dest_dir, prefix, setting)


class Pins:
    """The server files a job names, each pinned once by its real path, at most `limit` of them: a file named twice,
    or by two names (a link, a glob and a directory that both hold it), is one pinned file of the job."""

    def __init__(self, roots: list[Path], limit: int = MAX_JOB_FILES):
        self.roots, self.limit = roots, limit
        self.by_real: dict[Path, Path] = {}

    def pin(self, path: str, what: str, dest_dir: Path, prefix: str = "", setting: str | None = None,
            suffixes: tuple[str, ...] = ()) -> Path:
        """The pinned copy of the server file `path` (`pin_confined`'s checks; refused unless its real name ends in one
        of `suffixes`, where given, and past `limit` files)."""
        fd, real = open_confined(path, self.roots, what, setting)
        try:
            if real in self.by_real:
                return self.by_real[real]
            if suffixes and not real.name.lower().endswith(suffixes):
                raise Refused(422, f"{what}: '{path}' is not a sample file (it must end in {', '.join(suffixes)})",
                              setting=setting)
            if len(self.by_real) >= self.limit:
                raise Refused(422, f"{what}: more than {self.limit:,} files in one job; give fewer (or samples "
                              "stacked in fewer files)", setting=setting)
            dest = dest_dir / f"{prefix}{safe_filename(real.name, 'file')}"
            pin(fd, dest)
        finally:
            os.close(fd)
        self.by_real[real] = dest
        return dest


def pin_model(path: str, roots: list[Path], what: str, dest_dir: Path) -> Path:
    """Pin the server model `path` and its external data files into `dest_dir` (the model under its real
    name, its data files at the `location`s it names); returns the pinned model's path."""
    fd, real = open_confined(path, roots, what)
    try:
        dest = dest_dir / safe_filename(real.name, "model.onnx")
        pin(fd, dest)
    finally:
        os.close(fd)
    for location in external_data_locations(dest):
        rel = PurePosixPath(location)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise Refused(400, f"{what}: '{path}' names external data '{location}' outside its directory")
        if (dest_dir / rel).exists():
            raise Refused(400, f"{what}: '{path}' names external data '{location}' that is not a file of its own")
        fd, _ = open_confined(str(real.parent / rel), roots, f"{what} (its external data '{location}')")
        try:
            pin(fd, dest_dir / rel)
        finally:
            os.close(fd)
    return dest


def expand_confined(value: str, roots: list[Path], what: str, setting: str | None = None,
                    limit: int = MAX_JOB_FILES, time_s: float = GLOB_TIME_S) -> list[str]:
    """The files to pin for one `inputs.files` value on the server: a directory under a root -> its sample
    files (sorted, as `data/sources.py` reads a directory); a glob whose fixed leading directories lie under a
    root -> the files it matches (sorted, each real file once; `..` refused); any other value as it is
    (`pin_confined` checks it). Matches and directory entries whose real path is not a regular file under a root
    are left out, so a listing says nothing about files outside the roots; a directory or glob outside them, or one
    that leaves no file, gets `unavailable`'s answer. More than `limit` files, or more than `time_s` seconds of
    matching, is refused (422) before anything is pinned. Runs in the request's worker thread, never on the event
    loop (app.py)."""
    from precision_doctor.data.sources import check_pattern, glob_files, is_glob, sample_files_in, static_root

    if "\x00" in value or not Path(value).is_absolute() or not roots:
        return [value]  # pin_confined gives the answer
    real_roots = [Path(os.path.realpath(r)) for r in roots]
    glob_ = is_glob(value)
    try:
        if glob_:  # '..' refused before anything is looked at
            check_pattern(value, setting or what, parents=False)
        base = _real_dir(static_root(value) if glob_ else value, real_roots)
        if base is None:
            if glob_:
                raise unavailable(what, value, setting)
            return [value]  # a file (or nothing): pin_confined gives the answer
        found = glob_files(value, limit, setting or what, parents=False, time_s=time_s) if glob_ else \
            sample_files_in(Path(value), limit, time_s, setting or what)
    except SpecError as exc:
        raise Refused(422, exc.render(lambda s: s), setting=setting) from None
    if len(found) > limit:
        raise Refused(422, f"{what}: '{value}' holds more than {limit:,} sample files, more than one job may name",
                      setting=setting)
    kept = [str(p) for p in found if _real_regular_file(str(p), real_roots) is not None]
    if not kept:  # the one answer: an empty directory says no more than a missing file
        raise unavailable(what, value, setting)
    return kept


def _real_dir(path: str, roots: list[Path]) -> Path | None:
    return _real_under(path, roots, stat.S_ISDIR)


def external_data_locations(model: Path) -> list[str]:
    """The external data files an ONNX model names (its tensors' `location`s), read without its weights
    (`graph.proto_scan`); [] for a model without, or for bytes that are no ONNX model (the job says so when it loads
    it)."""
    try:
        return external_locations(model)
    except Malformed:
        return []


def check_pinned(paths: list[str], inputs_dir: Path) -> None:
    """Refuse (UserError) a path that is not a regular file inside the job's own `inputs_dir` (a job stored
    by another version, or edited in the store): the worker reads the job's pinned files only."""
    root = Path(os.path.realpath(inputs_dir))
    for p in paths:
        real = Path(os.path.realpath(p))
        if not (real.is_relative_to(root) and real.is_file()):
            raise UserError(f"the job names a file that is not one of the job's own files ('{Path(p).name}'); submit the "
                            "job again")
