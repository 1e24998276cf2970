"""One model of a batch: its task, its lock, whether it is finished or can be resumed, and its summary row.

`OUT/<model>/` is a `diagnose` run directory plus `batch_entry.json` (the summary row, the model file's
hash and the RunSpec key). A model is finished when its report.json matches that hash and key (also one
cut off after its report.json was written); one cut off earlier continues from its search checkpoint;
one that ended in an error is tried again. `OUT/.locks/<model>.lock` is held while a model runs, so
that a new batch never works in a directory a worker of a killed batch is still writing.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from precision_doctor.batch.recipes import recipe_key
from precision_doctor.batch.work import ItemNeeds
from precision_doctor.control import StopToken
from precision_doctor.errors import UserError, one_line
from precision_doctor.jsonio import read_json, write_json
from precision_doctor.outcome import RowStatus, RunStatus, SummaryRow
from precision_doctor.results.report import REPORT, Report
from precision_doctor.runfiles import RunDir
from precision_doctor.spec import RunSpec

ENTRY = "batch_entry.json"
ORT_THREADS_ENV = "PRECISION_DOCTOR_ORT_THREADS"
LOCK_DIR = ".locks"  # OUT/.locks/: batch.lock (held by the batch), <model>.lock (held while a model runs)
LOCK_WAIT_S = 120.0  # how long a model waits for another process that still works on it


@dataclass(frozen=True)
class ModelTask:
    """What a worker needs to diagnose one model (picklable)."""

    name: str
    run_dir: str
    spec: RunSpec
    spec_key: str
    file_hash: str | None
    resume: bool = False
    threads: int = 0
    error: str | None = None  # known before running: the row is an error without loading anything
    rerun: bool = False  # diagnose again even if the run directory holds a finished run


def task_needs(task: ModelTask) -> ItemNeeds:
    """What diagnosing `task` needs where it runs: a GPU when it searches or confirms on a GPU backend,
    its model and input files (directories and globs expanded), and the batch directory (the run
    directory's parent) to write in. A task already known to be an error needs nothing."""
    from precision_doctor.backends.registry import gpu_use

    if task.error:
        return ItemNeeds()
    spec = task.spec
    return ItemNeeds(
        gpu=gpu_use(spec.backends.backend, spec.backends.confirm_backend),
        reads=tuple(spec.read_files()),
        writes=(str(Path(task.run_dir).parent),),
    )


def run_model(task: ModelTask, stop: StopToken | None = None) -> SummaryRow:
    """Diagnose one model into its run directory; never raises: failures become an error row.

    A top-level function so that spawn and forkserver workers can import it; `stop` is the token of
    the process it runs in. The model's lock (OUT/.locks/<model>.lock) is held while it runs: a worker
    left over from a batch that was killed finishes or checkpoints before a new batch touches the same
    directory, which then decides again whether the model is finished or can be resumed."""
    if task.threads:
        os.environ[ORT_THREADS_ENV] = str(task.threads)
    run_dir = Path(task.run_dir)
    t0 = time.monotonic()
    try:
        with file_lock(run_dir.parent / LOCK_DIR / f"{run_dir.name}.lock", LOCK_WAIT_S) as locked:
            if not locked:
                return error_row(task.name, f"another process is still diagnosing this model (it holds "
                                 f"{LOCK_DIR}/{run_dir.name}.lock); run the batch again when it has ended")
            if not task.error and not task.rerun:
                done = finished_row(run_dir, task.file_hash, task.spec_key, repair=True)
                if done is not None:  # finished by a worker of an earlier batch while this one waited
                    return replace(done, reused=True)
                task = replace(task, resume=can_resume(run_dir, task.file_hash, task.spec_key))
            return _run_model_locked(task, run_dir, t0, stop)
    except KeyboardInterrupt:
        return interrupted_row(task.name, time.monotonic() - t0)


def _run_model_locked(task: ModelTask, run_dir: Path, t0: float, stop: StopToken | None) -> SummaryRow:
    try:
        if task.error:
            raise UserError(task.error)
        _fresh_run_dir(run_dir, keep=task.resume)
        write_entry(run_dir, task, SummaryRow(task.name, RowStatus.RUNNING))
        try:
            report = _diagnose(task, run_dir, stop)
        except Exception:
            if not task.resume:
                raise
            # What the cut-off run left cannot be continued (a file cut short): start over, once.
            task = replace(task, resume=False)
            _fresh_run_dir(run_dir, keep=False)
            write_entry(run_dir, task, SummaryRow(task.name, RowStatus.RUNNING))
            report = _diagnose(task, run_dir, stop)
        row = row_from_report(task.name, report)
    except Exception as exc:
        row = error_row(task.name, one_line(exc, recipe_key), time.monotonic() - t0)
    except KeyboardInterrupt:
        row = interrupted_row(task.name, time.monotonic() - t0)
    if run_dir.is_dir():
        write_entry(run_dir, task, row)
    return row


def _fresh_run_dir(run_dir: Path, keep: bool) -> None:
    """The model's run directory, made a run directory (its manifest) and, unless `keep` (a resume),
    emptied of the files an earlier attempt wrote; nothing else in it is touched."""
    from precision_doctor import manifest
    from precision_doctor.results.rundir import RUN_OUTPUTS

    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        manifest.start(run_dir, adopt=(*RUN_OUTPUTS, ENTRY) if (run_dir / ENTRY).is_file() else ())
    except OSError as exc:
        raise UserError(f"cannot write {run_dir}: {exc.strerror or exc}") from None
    if not keep:
        manifest.remove_ours(run_dir)


def _diagnose(task: ModelTask, run_dir: Path, stop: StopToken | None) -> Report:
    from precision_doctor import api

    return api.diagnose(task.spec, run_dir, stop=stop, resume=task.resume, force=True, origin="batch")


def row_from_report(name: str, report: Report) -> SummaryRow:
    """The summary row of a finished model, cut from the report's brief (render/brief.py); its message is the
    verdict's headline, then why the run stopped (its reason) or what the confirmation did."""
    from precision_doctor.render.brief import brief
    from precision_doctor.render.wording import confirm_sentence

    b = brief(report)
    return SummaryRow(
        model=name,
        status=RowStatus.of_run(RunStatus(report.status), b.passed),
        passed=b.passed,
        fallback_size=report.answer.fallback_size,
        fp32_flop_share=report.answer.fp32_flop_share,
        evaluations=report.search.evaluations,
        elapsed_s=report.search.elapsed_s,
        report=f"{name}/report.html",
        message=" ".join(x for x in (b.headline, report.reason or confirm_sentence(report)) if x), verdict=b.label,
        model_hash=report.model.hash if report.model is not None else None,
    )


def error_row(name: str, message: str, elapsed: float | None = None) -> SummaryRow:
    return SummaryRow(name, RowStatus.ERROR, elapsed_s=elapsed, message=message)


def interrupted_row(name: str, elapsed: float | None = None) -> SummaryRow:
    return SummaryRow(name, RowStatus.INTERRUPTED, elapsed_s=elapsed, message="interrupted")


def pending_row(name: str) -> SummaryRow:
    return SummaryRow(name, RowStatus.PENDING)


def write_entry(run_dir: Path, task: ModelTask, row: SummaryRow) -> None:
    write_json(run_dir / ENTRY, {
        "row": row.to_json(), "file_hash": task.file_hash, "settings_key": task.spec_key,
        "settings": task.spec.to_json(), "model_path": task.spec.model,
        "updated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }, writer=RunDir(run_dir))


def earlier_row(run_dir: Path) -> SummaryRow | None:
    try:
        return SummaryRow.from_json(read_json(run_dir / ENTRY).get("row"))
    except (OSError, ValueError, AttributeError):
        return None


def finished_row(run_dir: Path, file_hash: str | None, spec_key: str, repair: bool = False) -> SummaryRow | None:
    """The stored row if `run_dir` holds a finished run of this very file and these settings.

    A run cut off after its final report.json was written (while report.md/report.html were
    rendered, or before its worker recorded the row) is finished too: its row is made from
    report.json, and with `repair` the missing reports are rendered and the entry is updated."""
    entry, report = run_dir / ENTRY, run_dir / REPORT
    if file_hash is None or not entry.is_file() or not report.is_file():
        return None
    try:
        e, r = read_json(entry), Report.load(report)
    except (OSError, ValueError, UserError):
        return None
    if e.get("file_hash") != file_hash or e.get("settings_key") != spec_key:
        return None
    if r.status == RunStatus.INTERRUPTED:
        return None
    row = SummaryRow.from_json(e.get("row"))
    if row is not None and row.status in (RowStatus.RUNNING, RowStatus.INTERRUPTED):
        # The directory belongs to the attempt that wrote this entry (a fresh attempt empties it;
        # a resumed one finds only an interrupted report there), so this report.json is its result.
        row = row_from_report(row.model or run_dir.name, r)
        if repair:
            _repair_finished(run_dir, e, r, row)
        return row
    if row is None or row.status == RowStatus.ERROR:
        return None
    if (r.model.hash if r.model is not None else None) != row.model_hash:
        return None
    return row


def _repair_finished(run_dir: Path, entry: dict, report: Report, row: SummaryRow) -> None:
    """Render the reports a cut-off run did not write (report.json stays as it is), and record its
    row in the entry."""
    try:
        if not (run_dir / "report.md").is_file() or not (run_dir / "report.html").is_file():
            from precision_doctor.render import write_reports

            write_reports(report, RunDir(run_dir))
        write_json(run_dir / ENTRY, {**entry, "row": row.to_json(),
                                     "updated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")},
                   writer=RunDir(run_dir))
    except Exception:  # the row stands; the next run tries again
        pass


def can_resume(run_dir: Path, file_hash: str | None, spec_key: str) -> bool:
    """Whether `run_dir` holds a cut-off run of this file and these settings whose capture (and
    search checkpoint, if the search had begun) lets us continue rather than start over."""
    entry = run_dir / ENTRY
    if file_hash is None or not entry.is_file():
        return False
    try:
        e = read_json(entry)
    except (OSError, ValueError):
        return False
    row = SummaryRow.from_json(e.get("row"))
    return (
        e.get("file_hash") == file_hash and e.get("settings_key") == spec_key
        and row is not None and row.status in (RowStatus.RUNNING, RowStatus.INTERRUPTED)
        and (run_dir / "activations.h5").is_file()
    )


@contextlib.contextmanager
def file_lock(path: Path, wait_s: float) -> Iterator[bool]:
    """An exclusive advisory lock (flock) on `path`, waiting up to `wait_s` seconds; yields whether
    it is held. The kernel releases it when the holder dies. Where flock is missing (Windows) or
    refused (some network file systems), yields True: locking is a safeguard, not a requirement."""
    try:
        import fcntl
    except ImportError:
        yield True
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "a+")  # noqa: SIM115 (held across the yield)
    except OSError:
        yield True
        return
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.2)
            except OSError:
                break  # locking not supported here
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield True
    finally:
        f.close()
