"""Run directories: fresh or empty (never overwrite what a user made), locked while a run works there,
files written atomically and listed in a manifest as they are written (`manifest`).

`open_run_dir` is what api.diagnose, api.compare (and a service) use: it refuses a directory that holds
the model or an input file, a non-empty one unless `force` (which removes only the files our manifest
lists) or `resume`, and one another run holds (`runlock`, naming that run's process); it creates the
directory, holds its lock while the run works, and when the run fails, removes a directory it created
itself unless what is there can be resumed; a failure for lack of room becomes `storage.DiskFull`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from precision_doctor import manifest, storage
from precision_doctor.errors import SpecError, UserError
from precision_doctor.manifest import MANIFEST
from precision_doctor.outcome import RunStatus
from precision_doctor.results.runlock import LOCK, RunDirLocked, RunLock, lock_owner

DEFAULT_ROOT = Path("reports")
SETTINGS_FILE = "run_settings.json"  # pipeline/settings.py writes it
# Every file a diagnose or compare run writes (a test checks a real run against this list); `--force`
# refuses a directory where one of these exists and the manifest does not list it.
RUN_OUTPUTS = (
    "report.json", "report.md", "report.html", "activations.h5", ".activations.h5.partial", ".activations.h5.summary",
    "layers.csv", "layers.json", "search.jsonl", "repair.jsonl", "confirm.jsonl", "confirm-every.jsonl",
    "search_rounds.jsonl",
    SETTINGS_FILE, "fixed.onnx", ".fixed.onnx.partial", "fixed.onnx.data",
    "named.onnx", ".named.onnx.partial", "inputs.json", "reference_outputs.json", "layer_precisions.txt",
    "trtexec.sh", "tensorrt_rtx.sh", "autocast_nodes_to_exclude.txt", "precision-doctor-error.log",
    "named.onnx.data", "fixed.plan", ".fixed.plan.partial", "timing.cache", ".timing.cache.partial", "runtime.cache",
    ".runtime.cache.partial", "knobs",  # knobs/: the knob search's checkpoints, listed as knobs/<name>
    "ort_node_block_list.json", "model.onnx", "trtexec_io",  # trtexec_io/: the trtexec check's raw files
    "references.h5", "loader_samples.h5",  # FP32 outputs computed so far; a data loader script's samples
    "other-tensorrt.jsonl", "other-ort-cuda.jsonl",  # the answer on the other runtime (pipeline/target.py)
    "other-tensorrt-gated.jsonl", "other-ort-cuda-gated.jsonl",  # its growing there on the gated graph, first
    "other-tensorrt-gated-rounds.jsonl", "other-ort-cuda-gated-rounds.jsonl",  # and that growing's rounds
    "tensorrt", "ort-cuda",  # that runtime's own answer, where it needs one: its fixed.onnx and commands there
)
BOOKKEEPING = (LOCK, MANIFEST)  # in every run directory; not what "empty" is about


def default_run_dir(model_path: Path, command: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", model_path.stem)
    base = DEFAULT_ROOT / f"{stem}-{command}-{stamp}"
    path, k = base, 1
    while path.exists():
        path, k = Path(f"{base}-{k}"), k + 1
    return path


def contents(path: Path) -> list[str]:
    """The names in a directory, without our bookkeeping files (lock, manifest, manifest temporaries)."""
    return sorted(p.name for p in Path(path).iterdir() if p.name not in BOOKKEEPING and not p.name.startswith(MANIFEST))


def resumable(path: Path) -> bool:
    """Whether `path` holds a run that `resume` can continue (its settings, and its capture or checkpoint)."""
    p = Path(path)
    return (p / SETTINGS_FILE).is_file() and ((p / "activations.h5").is_file() or (p / "search.jsonl").is_file())


def interrupted(path: Path) -> bool:
    """Whether `path` holds a run cut off before its report (or one whose report says it was interrupted)."""
    p = Path(path)
    if not resumable(p):
        return False
    report = p / "report.json"
    if not report.is_file():
        return True
    try:
        import json

        return json.loads(report.read_text(encoding="utf-8")).get("status") == RunStatus.INTERRUPTED
    except (OSError, ValueError, AttributeError):
        return True


def check_protected(path: Path, protect: Sequence[str | Path], setting: str = "out_dir",
                    also: Sequence[str] = ()) -> None:
    """Refuse a run directory that holds (at any depth) one of the user's files (the model, an input file),
    or `also` (names of files there that we did not write)."""
    root = Path(path).resolve()
    found = []
    for f in protect:
        p = Path(f).resolve() if f else None
        if p is not None and (p == root or root in p.parents):
            what = "the model" if str(f).endswith(".onnx") else "the input folder" if p.is_dir() else "the input file"
            if p == root:
                raise SpecError(setting, f"{{{setting}}} {path} is {what} {f}: a run writes its files there; choose "
                                f"another {{{setting}}} (a new or empty directory)")
            found.append(f"{what} {f}")
    if also:
        found.append(f"{', '.join(also)}, which precision-doctor did not write (it is not in {MANIFEST})")
    if found:
        raise SpecError(setting, f"{{{setting}}} {path} holds {' and '.join(found)}: a run writes its files there; "
                        f"choose another {{{setting}}} (a new or empty directory)")


def not_ours(path: Path) -> list[str]:
    """Files in `path` with names a run writes that its manifest does not list (someone else's)."""
    mine = manifest.listed(path) or set()
    folders = {m.split("/", 1)[0] for m in mine if "/" in m}
    return [n for n in contents(path) if n in RUN_OUTPUTS and n not in mine and n not in folders]


def check_reusable(path: Path, force: bool, resume: bool) -> None:
    """Refuse a non-empty directory unless `force` (and then one where a file we would write is not ours)
    or `resume`."""
    names = contents(path)
    if not names or resume:
        return
    if not force:
        if interrupted(path):
            raise SpecError("out_dir", f"{{out_dir}} {path} holds an interrupted run: add {{resume}} to continue "
                            "it, {force} to start over, or choose another {out_dir}")
        ours = "a finished run" if (Path(path) / "report.json").is_file() else "files"
        raise SpecError("out_dir", f"{{out_dir}} {path} exists and is not empty (it holds {ours}): pass {{force}} "
                        "to replace what precision-doctor wrote there, or choose another {out_dir}")
    if theirs := not_ours(path):
        check_protected(path, (), also=theirs)


def prepare_run_dir(path: Path, force: bool = False, resume: bool = False,
                    protect: Sequence[str | Path] = ()) -> bool:
    """Check `path` and create it (with its manifest); returns whether it was created. With `force` the
    files of an earlier run that the manifest lists are removed; nothing else is."""
    path = Path(path)
    if str(path) == "":
        raise SpecError("out_dir", "{out_dir} must name a directory")
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        pass  # a new directory; a file in its way is named below
    except OSError as exc:  # a loop of symbolic links, a name too long, no permission to look
        raise SpecError("out_dir", f"{{out_dir}} {path}: {exc.strerror or exc}") from None
    if path.exists() and not path.is_dir():
        raise SpecError("out_dir", f"{{out_dir}} {path} exists and is not a directory")
    if resume and not path.is_dir():
        raise SpecError("resume", f"{{resume}}: {path} does not exist")
    created = not path.exists()
    if not created and (owner := lock_owner(path)):
        raise RunDirLocked(path, owner)
    check_protected(path, protect, also=not_ours(path) if force and not resume and not created else ())
    if not created:
        check_reusable(path, force, resume)
    if resume and contents(path) and not (path / SETTINGS_FILE).is_file():
        raise SpecError("resume", f"{{resume}}: {path} holds no run to continue (no {SETTINGS_FILE}); choose "
                        "the --out of an interrupted run")
    try:
        path.mkdir(parents=True, exist_ok=True)
        # a run of a version that kept no manifest: its files are ours
        manifest.start(path, adopt=RUN_OUTPUTS if resume and (path / SETTINGS_FILE).is_file() else ())
    except OSError as exc:
        raise SpecError("out_dir", f"cannot write {{out_dir}} {path}: {exc.strerror or exc}") from None
    if force and not resume:
        manifest.remove_ours(path, keep=tuple(n for n in manifest.listed(path) or () if n not in RUN_OUTPUTS))
    return created


@contextlib.contextmanager
def open_run_dir(path: Path, *, force: bool = False, resume: bool = False, protect: Sequence[str | Path] = (),
                 command: str | None = None) -> Iterator[Path]:
    """A run directory, checked and created (`prepare_run_dir`), locked while the block runs. When the block
    fails, a directory created here is removed, unless it holds a run that `resume` can continue."""
    path = Path(path)
    created = prepare_run_dir(path, force=force, resume=resume, protect=protect)
    try:
        lock = RunLock(path, command).acquire()
    except BaseException:
        if created:
            _remove_created(path)
        raise
    try:
        yield path
    except BaseException as exc:
        lock.release()
        if created and not resumable(path):
            with contextlib.suppress(OSError):  # on a full disk too: removing comes before any write
                _remove_created(path)
        full = storage.as_disk_full(exc, path) if isinstance(exc, Exception) else None
        if full is not None and full is not exc:
            raise full from exc  # one line naming the run directory and what ran out
        raise
    lock.release()


def _remove_created(path: Path) -> None:
    """Remove a directory this run created: our files, then the directory if nothing else is there."""
    manifest.remove_ours(path)
    for name in BOOKKEEPING:
        (path / name).unlink(missing_ok=True)
    for p in path.iterdir():  # temporaries of our atomic writes
        if p.is_file() and any(p.name.startswith(f".{n}.") for n in (*RUN_OUTPUTS, MANIFEST)):
            p.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        os.rmdir(path)


@contextlib.contextmanager
def updating(run_dir: Path, writes: Sequence[str], command: str | None = None) -> Iterator[Path]:
    """A finished run's directory that a later command writes into (`report` renders report.md and report.html
    again; `emit --format engine` builds fixed.plan and rewrites the reports): refused when a file of
    `writes` exists there and the manifest does not list it (someone else's; in a folder without a manifest,
    any that exists) or when another run holds the directory; its lock is held meanwhile. These commands
    take the directory as their argument, so the messages name it (no --out)."""
    run_dir = Path(run_dir)
    mine = manifest.listed(run_dir)
    theirs = [n for n in dict.fromkeys(writes) if (run_dir / n).exists() and n not in (mine or set())]
    if theirs:
        it = "them" if len(theirs) > 1 else "it"
        why = (f"{'they are' if len(theirs) > 1 else 'it is'} not in {MANIFEST}" if mine is not None else
               f"the folder has no {MANIFEST}, so precision-doctor cannot tell that it wrote {it}")
        raise UserError(f"{run_dir}: {', '.join(theirs)} would be replaced, but {why}; move {it} away first")
    try:
        lock = RunLock(run_dir, command).acquire()
    except RunDirLocked as exc:
        who = exc.owner.describe() if exc.owner else "a process that has not recorded itself yet"
        raise UserError(f"{run_dir}: another run is using it ({who}); wait for it to end") from None
    try:
        if mine is None:
            manifest.start(run_dir)  # from now on its writes are recorded
        yield run_dir
    finally:
        lock.release()
