"""`batch`: diagnose every model of a zoo, in parallel, resumably; one summary table at the end.

The zoo and its recipes: `batch.recipes`. Output: `OUT/<model>/` is a `diagnose` run directory plus
`batch_entry.json` (`batch.jobs`); `OUT/summary.csv`, `OUT/summary.html` (self-contained) and
`OUT/summary.json` (`render.summary`) are rewritten atomically after every model. Running again with
the same OUT skips every finished model, continues one cut off mid-run from its checkpoint, and tries
again the ones that ended in an error.

Interruptions: Ctrl-C (or the StopToken given to `run_batch`) stops the workers (they checkpoint
first); if the batch process itself is killed, its workers notice, checkpoint and exit.
`OUT/.locks/` holds the batch's lock (a second batch on the same OUT is refused) and one lock per
model. Where the work runs is an `Executor` (`batch.executors`).
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from precision_doctor.batch.executors import InlineExecutor
from precision_doctor.batch.jobs import (
    LOCK_DIR,
    ModelTask,
    can_resume,
    earlier_row,
    error_row,
    file_lock,
    finished_row,
    interrupted_row,
    pending_row,
    run_model,
    write_entry,
)
from precision_doctor.batch.recipes import MARKER, RESERVED_NAMES, ModelSpec, discover, recipe_key
from precision_doctor.batch.work import Executor
from precision_doctor.control import StopToken
from precision_doctor.errors import SpecError
from precision_doctor.jsonio import read_json, write_json
from precision_doctor.outcome import RowStatus, SummaryRow
from precision_doctor.pipeline.spec_check import CheckedSpec, checked
from precision_doctor.render.summary import write_summary
from precision_doctor.results.runlock import RunLock
from precision_doctor.runfiles import RunDir
from precision_doctor.spec import RunSpec, file_sha256


@dataclass
class BatchResult:
    out_dir: Path
    rows: list[SummaryRow]
    ran: list[str] = field(default_factory=list)  # models diagnosed in this call
    skipped: list[str] = field(default_factory=list)  # finished earlier, not redone
    elapsed_s: float = 0.0

    @property
    def errors(self) -> list[SummaryRow]:
        return [r for r in self.rows if r.status == RowStatus.ERROR]


def default_batch_dir() -> Path:
    from precision_doctor.results.rundir import DEFAULT_ROOT

    base = DEFAULT_ROOT / f"batch-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    path, k = base, 1
    while path.exists():
        path, k = Path(f"{base}-{k}"), k + 1
    return path


class BatchSettingsDiffer(SpecError):
    """A batch directory made with other default settings than those given: continuing it would replace
    finished results with ones of other settings. `recorded` holds the settings it was made with."""

    def __init__(self, out_dir: Path, shown: str, recorded: RunSpec):
        self.out_dir, self.recorded = Path(out_dir), recorded
        super().__init__("out_dir", f"{{out_dir}} {out_dir} holds a batch run with other settings ({shown}); "
                         "continue it with its own settings, or pass {rerun} to diagnose every model again with "
                         "the new ones")


def recorded_defaults(out_dir: Path) -> RunSpec | None:
    """The default settings an earlier batch in `out_dir` ran with (None: none recorded)."""
    try:
        data = read_json(Path(out_dir) / MARKER)
        return RunSpec.from_json(data["defaults"]) if isinstance(data, dict) and "defaults" in data else None
    except (OSError, ValueError, KeyError, TypeError, SpecError):
        return None


def check_defaults(out_dir: Path, defaults: RunSpec, rerun: bool) -> None:
    """Refuse to continue a batch with other default settings than it was made with, unless `rerun`."""
    old = recorded_defaults(out_dir)
    if old is None or rerun:
        return
    a, b = old.flat(), defaults.flat()
    diff = [f"{recipe_key(k)} {a[k]!r} then, {b[k]!r} now" for k in a if k != "model" and a[k] != b.get(k)]
    if diff:
        raise BatchSettingsDiffer(out_dir, ", ".join(diff), old)


def prepare_batch_dir(out: Path, force: bool = False, protect: list[Path] | tuple[Path, ...] = ()) -> Path:
    """A fresh directory, or one an earlier batch wrote (it holds `batch.json`): then we resume. Never one
    that holds the zoo's models or recipes."""
    from precision_doctor import manifest
    from precision_doctor.results.rundir import BOOKKEEPING, check_protected

    out = Path(out)
    if str(out) == "":
        raise SpecError("out_dir", "{out_dir} must name a directory")
    if out.exists() and not out.is_dir():
        raise SpecError("out_dir", f"{{out_dir}} {out} exists and is not a directory")
    check_protected(out, protect)
    ours = (LOCK_DIR, *BOOKKEEPING)
    if out.exists() and any(p.name not in ours for p in out.iterdir()) and not (out / MARKER).is_file() and not force:
        raise SpecError("out_dir", f"{{out_dir}} {out} is not empty and holds no earlier batch "
                        "(pass {force} to write into it)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        manifest.start(out, adopt=(MARKER, *RESERVED_NAMES) if (out / MARKER).is_file() else ())
    except OSError as exc:
        raise SpecError("out_dir", f"cannot write {{out_dir}} {out}: {exc.strerror or exc}") from None
    return out


def run_batch(
    source: Path,
    out_dir: Path,
    defaults: RunSpec | CheckedSpec | None = None,
    executor: Executor | None = None,
    only: list[str] | None = None,
    rerun: bool = False,
    force: bool = False,
    on_start: Callable[[list[str], list[str]], None] | None = None,
    on_done: Callable[[SummaryRow], None] | None = None,
    stop: StopToken | None = None,
) -> BatchResult:
    """Diagnose every model of `source` into `out_dir`. `defaults` are the settings a recipe overrides
    (its `model` is ignored; checked here unless the caller checked them). `only` limits the run to those model
    names (the others keep their earlier rows, if any); `rerun` redoes finished models too. `on_start` gets the
    names to run and the names skipped; `on_done` each row as it completes. `stop` ends the batch early
    (KeyboardInterrupt)."""
    t0 = time.monotonic()
    defaults = checked(defaults or RunSpec(model="")).spec
    specs = discover(Path(source), defaults)
    if only:
        unknown = sorted(set(only) - {s.name for s in specs})
        if unknown:
            raise SpecError("only", f"{{only}} names unknown model '{unknown[0]}'; models: {', '.join(s.name for s in specs)}")
    protect = [Path(source), *(s.path for s in specs)]
    out_dir = prepare_batch_dir(Path(out_dir), force=force, protect=protect)
    with RunLock(out_dir, what="another batch"):
        check_defaults(out_dir, defaults, rerun)
        return _run_batch_locked(specs, source, out_dir, executor, only, rerun, on_start, on_done, t0, stop, defaults)


CUT_OFF_WAIT_S = 2.0  # after a stop, how long the batch waits for a killed item's lock before leaving its entry


def _cut_off(out_dir: Path, tasks: list[ModelTask]) -> dict[str, SummaryRow]:
    """After a stop, the rows of the items that had started: those that recorded "interrupted", and those whose
    entries still say running (their worker was killed before it could record
    "interrupted": a checkpoint slower than the executor's grace) recorded as interrupted, which they are (both
    resume alike); an entry whose worker still holds its lock is left as it is."""
    rows = {}
    for task in tasks:
        run_dir = Path(task.run_dir)
        row = earlier_row(run_dir)
        if row is not None and row.status == RowStatus.INTERRUPTED:
            rows[task.name] = row
        if row is None or row.status != RowStatus.RUNNING:
            continue
        with file_lock(out_dir / LOCK_DIR / f"{task.name}.lock", CUT_OFF_WAIT_S) as free:
            if free and (row := earlier_row(run_dir)) is not None and row.status == RowStatus.RUNNING:
                rows[task.name] = interrupted_row(task.name)
                write_entry(run_dir, task, rows[task.name])
    return rows


def _run_batch_locked(
    specs: list[ModelSpec], source: Path, out_dir: Path, executor: Executor | None, only: list[str] | None,
    rerun: bool, on_start: Callable[[list[str], list[str]], None] | None, on_done: Callable[[SummaryRow], None] | None,
    t0: float, stop: StopToken | None, defaults: RunSpec,
) -> BatchResult:
    executor = executor or InlineExecutor()
    threads = executor.threads
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    try:
        created = read_json(out_dir / MARKER).get("created", now)
    except (OSError, ValueError):
        created = now
    write_json(out_dir / MARKER, {
        "tool": "precision-doctor", "source": str(Path(source).resolve()), "created": created, "updated": now,
        "jobs": executor.jobs, "models": [s.name for s in specs],
        "defaults": RunSpec.from_json(defaults.to_json(), base_dir=Path.cwd()).to_json(),
    }, writer=RunDir(out_dir))
    rows: dict[str, SummaryRow] = {}
    tasks: list[ModelTask] = []
    skipped: list[str] = []
    for s in specs:
        run_dir = out_dir / s.name
        fhash = file_sha256(s.path) if s.path.is_file() else None
        key = s.spec.key()
        selected = not only or s.name in only
        with file_lock(out_dir / LOCK_DIR / f"{s.name}.lock", 0) as free:
            # A model locked by a worker of a killed batch is left to the task, which waits for it.
            done = None if (rerun and selected) or not free else finished_row(run_dir, fhash, key, repair=True)
        if done is not None:
            rows[s.name] = done
            skipped.append(s.name)
            continue
        if not selected:
            rows[s.name] = earlier_row(run_dir) or pending_row(s.name)
            continue
        error = s.error or (None if s.path.is_file() else f"model file not found: {s.path}")
        tasks.append(ModelTask(
            name=s.name, run_dir=str(run_dir.resolve()), spec=s.spec, spec_key=key, file_hash=fhash,
            resume=not rerun and can_resume(run_dir, fhash, key), threads=threads, error=error, rerun=rerun,
        ))
        rows[s.name] = pending_row(s.name)
    order = [s.name for s in specs]
    write_summary(RunDir(out_dir), [rows[n] for n in order])
    if on_start:
        on_start([t.name for t in tasks], skipped)
    ran = []
    try:
        for done in executor.map(run_model, tasks, stop):
            task = done.item
            row = done.result if done.error is None else error_row(task.name, done.error)
            if done.error is not None and Path(task.run_dir).is_dir():
                write_entry(Path(task.run_dir), task, row)
            (skipped if row.reused else ran).append(task.name)
            rows[task.name] = row = replace(row, reused=False)
            write_summary(RunDir(out_dir), [rows[n] for n in order])
            if on_done:
                on_done(row)
    except BaseException:  # stopped (Ctrl-C, a StopToken): the executor has ended or killed its running items
        rows.update(_cut_off(out_dir, [t for t in tasks if t.name not in ran and t.name not in skipped]))
        write_summary(RunDir(out_dir), [rows[n] for n in order])
        raise
    final = [rows[n] for n in order]
    return BatchResult(out_dir, final, ran=ran, skipped=skipped, elapsed_s=time.monotonic() - t0)
