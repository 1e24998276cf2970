"""`batch`: diagnose every model of a zoo, in parallel, resumably; one summary table at the end.

A zoo is a directory of `.onnx` files, each optionally with a recipe beside it (`<model>.json`,
`<model>.yaml` or `<model>.yml`), or a manifest file (JSON or YAML) that lists the models with the
same settings. A recipe (every key optional; unknown keys are refused):

    inputs:    {samples, seed, val_range: ["name:[lo,hi]", ...] or {name: [lo, hi]},
                input_shapes: ["name:[d0,...]", ...] or {name: [d0, ...]},
                files: [a.npz, ...], validate_files: [...], validation_split, allow_nonfinite}
    tolerance: {atol, rtol, check_error_stat, cosine_floor, margin}
    precision, backend, confirm_backend, strategy, cost, max_evaluations, time_budget
    about:     free-form notes (provenance, why the tolerance is fair); not read by the batch

Paths in a recipe are relative to the recipe (or the manifest). A manifest is `{"defaults": {...},
"models": [{"path": "m.onnx", "name": "m", ...recipe keys...}, ...]}` (or just the list).
Options given to the command are defaults that a recipe overrides.

Output: `OUT/<model>/` is a `diagnose` run directory (report.json, report.html, fixed.onnx, ...)
plus `batch_entry.json` (the summary row, model file hash and settings key); `OUT/summary.csv`,
`OUT/summary.html` (self-contained) and `OUT/summary.json` are rewritten atomically after every
model. Running again with the same OUT skips every model whose `report.json` matches its file hash
and settings (also one cut off after its report.json was written); a model whose run was cut off
earlier continues from its search checkpoint; models that ended in an error are tried again.

Interruptions: Ctrl-C stops the workers (they checkpoint first); if the batch process itself is
killed, its workers notice, checkpoint and exit. `OUT/.locks/` holds the batch's lock (a second
batch on the same OUT is refused) and one lock per model, held while a worker runs it, so that a
new batch never works in a directory that a worker of a killed batch is still writing.

Where the work runs is an `Executor` (see there): `LocalExecutor` uses local worker processes;
`InlineExecutor` runs in this process (tests, debugging).
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import hashlib
import io
import json
import multiprocessing
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from html import escape
from pathlib import Path
from typing import Any, Protocol

from precision_doctor import interrupt
from precision_doctor.errors import UserError
from precision_doctor.results.jsonio import jsonable, read_json, write_json, write_text_atomic

RECIPE_SUFFIXES = (".json", ".yaml", ".yml")
ENTRY = "batch_entry.json"
MARKER = "batch.json"
ORT_THREADS_ENV = "PRECISION_DOCTOR_ORT_THREADS"
SUMMARY_COLUMNS = (
    "model", "status", "passed", "fallback_size", "fp32_flop_share", "evaluations", "elapsed_s", "report", "message",
)
_RECIPE_KEYS = {
    "inputs", "tolerance", "precision", "backend", "confirm_backend", "strategy", "cost", "max_evaluations",
    "time_budget", "about",
}
_INPUT_KEYS = {
    "samples", "seed", "val_range", "input_shapes", "files", "validate_files", "validation_split", "allow_nonfinite",
}
_TOL_KEYS = {"atol", "rtol", "check_error_stat", "cosine_floor", "margin"}


# -- settings ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSettings:
    """Everything that decides one model's diagnose run (files as absolute paths)."""

    samples: int = 4
    seed: int = 0
    val_range: tuple[str, ...] = ()
    input_shapes: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    validate_files: tuple[str, ...] = ()
    validation_split: float | None = None
    allow_nonfinite: bool = False
    atol: float = 1e-5
    rtol: float = 1e-5
    check_error_stat: str = "elemwise"
    cosine_floor: float | None = None
    margin: float = 0.0
    precision: str = "fp16"
    backend: str = "emulate"
    confirm_backend: str | None = None
    strategy: str = "auto"
    cost: str = "nodes"
    max_evaluations: int | None = None
    time_budget: float | None = None

    def key(self) -> str:
        """A fingerprint of the settings and of the contents of the input files they name."""
        d = asdict(self)
        for k in ("margin", "confirm_backend"):  # batches run before these existed keep their keys
            if not d[k]:
                del d[k]
        d["file_hashes"] = [file_sha256(Path(f)) if Path(f).is_file() else None for f in self.files + self.validate_files]
        return hashlib.sha256(json.dumps(jsonable(d), sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class ModelSpec:
    """One model of the zoo: where it is and how to diagnose it (or why its recipe is unusable)."""

    name: str
    path: Path
    settings: ModelSettings
    error: str | None = None


def _named_list(value: Any, what: str) -> tuple[str, ...]:
    """`["n:[..]", ...]`, one such string, or `{name: [..]}` (None for an unnamed entry) -> strings."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            if not isinstance(v, (list, tuple)):
                raise UserError(f"{what}: '{k}' must map to a list, got {v!r}")
            vals = ",".join(str(x) for x in v)
            out.append(f"[{vals}]" if k in (None, "", "*") else f"{k}:[{vals}]")
        return tuple(out)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise UserError(f"{what}: expected a list of 'name:[...]' strings or a mapping, got {value!r}")


def _section(recipe: dict, key: str, known: set[str], where: str) -> dict:
    """A recipe's sub-mapping (empty when absent), with unknown keys refused."""
    value = recipe.get(key) or {}
    if not isinstance(value, dict):
        raise UserError(f"{where}: '{key}' must be a mapping")
    bad = sorted(set(value) - known)
    if bad:
        raise UserError(f"{where}: unknown {key} key '{bad[0]}' (known: {', '.join(sorted(known))})")
    return value


def apply_recipe(base: ModelSettings, recipe: dict, rel_to: Path, where: str) -> ModelSettings:
    """`base` with the keys of `recipe` applied; UserError names the first bad key."""
    if not isinstance(recipe, dict):
        raise UserError(f"{where}: a recipe must be a mapping, got {type(recipe).__name__}")
    unknown = sorted(set(recipe) - _RECIPE_KEYS - {"path", "model", "name"})
    if unknown:
        raise UserError(f"{where}: unknown key '{unknown[0]}' (known: {', '.join(sorted(_RECIPE_KEYS))})")
    upd: dict[str, Any] = {}
    inputs = _section(recipe, "inputs", _INPUT_KEYS, where)
    if "val_range" in inputs:
        upd["val_range"] = _named_list(inputs["val_range"], f"{where}: inputs.val_range")
    if "input_shapes" in inputs:
        upd["input_shapes"] = _named_list(inputs["input_shapes"], f"{where}: inputs.input_shapes")
    for k in ("files", "validate_files"):
        if k in inputs:
            items = inputs[k] or []
            items = [items] if isinstance(items, str) else items
            upd[k] = tuple(str((rel_to / str(f)).resolve()) for f in items)
    for k, typ in (("samples", int), ("seed", int), ("validation_split", float), ("allow_nonfinite", bool)):
        if k in inputs:
            upd[k] = None if inputs[k] is None and k == "validation_split" else _typed(inputs[k], typ, f"{where}: inputs.{k}")
    tol = _section(recipe, "tolerance", _TOL_KEYS, where)
    for k in ("atol", "rtol", "margin"):
        if k in tol:
            upd[k] = _typed(tol[k], float, f"{where}: tolerance.{k}")
    if "check_error_stat" in tol:
        upd["check_error_stat"] = str(tol["check_error_stat"])
    if "cosine_floor" in tol:
        upd["cosine_floor"] = None if tol["cosine_floor"] is None else _typed(tol["cosine_floor"], float, where)
    for k in ("precision", "backend", "strategy", "cost"):
        if k in recipe:
            upd[k] = str(recipe[k])
    if "confirm_backend" in recipe:
        upd["confirm_backend"] = None if recipe["confirm_backend"] is None else str(recipe["confirm_backend"])
    if "max_evaluations" in recipe:
        v = recipe["max_evaluations"]
        upd["max_evaluations"] = None if v is None else _typed(v, int, f"{where}: max_evaluations")
    if "time_budget" in recipe:
        v = recipe["time_budget"]
        upd["time_budget"] = None if v is None else _typed(v, float, f"{where}: time_budget")
    return replace(base, **upd)


def _typed(v: Any, typ: type, where: str) -> Any:
    if typ is bool:
        if isinstance(v, bool):
            return v
        raise UserError(f"{where}: expected true or false, got {v!r}")
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise UserError(f"{where}: expected a number, got {v!r}")
    try:
        out = typ(v)
    except (TypeError, ValueError):
        raise UserError(f"{where}: expected a number, got {v!r}") from None
    if typ is int and float(v) != out:
        raise UserError(f"{where}: expected an integer, got {v!r}")
    return out


def read_recipe(path: Path) -> Any:
    """A JSON or YAML file's contents; UserError with a one-line reason."""
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() == ".json":
            return json.loads(text)
        import yaml

        return yaml.safe_load(text)
    except Exception as exc:  # json, yaml and OS errors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{path}: cannot read recipe: {first[:200]}") from exc


def discover(source: Path, defaults: ModelSettings) -> list[ModelSpec]:
    """The models of a zoo directory or a manifest file, with their resolved settings. A bad recipe
    does not stop the others: its model carries the error and is reported as such."""
    source = Path(source)
    if not source.exists():
        raise UserError(f"zoo not found: {source}")
    specs = _from_manifest(source, defaults) if source.is_file() else _from_directory(source, defaults)
    if not specs:
        raise UserError(f"{source}: no models found (a directory of .onnx files, or a JSON/YAML manifest)")
    _unique_names(specs)
    return specs


def _from_directory(root: Path, defaults: ModelSettings) -> list[ModelSpec]:
    specs = []
    for path in sorted(root.glob("*.onnx")):
        name = path.stem
        recipes = [path.with_suffix(s) for s in RECIPE_SUFFIXES if path.with_suffix(s).is_file()]
        try:
            if len(recipes) > 1:
                raise UserError(f"{name}: more than one recipe ({', '.join(r.name for r in recipes)}); keep one")
            settings = defaults
            if recipes:
                settings = apply_recipe(defaults, read_recipe(recipes[0]) or {}, root, recipes[0].name)
            specs.append(ModelSpec(name, path.resolve(), settings))
        except UserError as exc:
            specs.append(ModelSpec(name, path.resolve(), defaults, error=str(exc)))
    return specs


def _from_manifest(path: Path, defaults: ModelSettings) -> list[ModelSpec]:
    if path.suffix.lower() not in RECIPE_SUFFIXES:
        raise UserError(f"{path}: a zoo is a directory of .onnx files or a .json/.yaml manifest")
    data = read_recipe(path)
    base = path.parent.resolve()
    if isinstance(data, dict):
        shared = data.get("defaults") or {}
        if shared:
            defaults = apply_recipe(defaults, shared, base, f"{path.name}: defaults")
        entries = data.get("models")
    else:
        entries = data
    if not isinstance(entries, list):
        raise UserError(f"{path}: a manifest lists its models under 'models' (a list)")
    specs = []
    for i, entry in enumerate(entries):
        if isinstance(entry, str):
            entry = {"path": entry}
        if not isinstance(entry, dict) or not (entry.get("path") or entry.get("model")):
            raise UserError(f"{path}: models[{i}] needs a 'path'")
        model_path = (base / str(entry.get("path") or entry.get("model"))).resolve()
        name = str(entry.get("name") or model_path.stem)
        try:
            specs.append(ModelSpec(name, model_path, apply_recipe(defaults, entry, base, f"{path.name}: {name}")))
        except UserError as exc:
            specs.append(ModelSpec(name, model_path, defaults, error=str(exc)))
    return specs


def _unique_names(specs: list[ModelSpec]) -> None:
    """Directory-safe, unique names (they name the run directories)."""
    seen: set[str] = {MARKER, "summary.csv", "summary.html", "summary.json"}
    for s in specs:
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", s.name).strip(".") or "model"
        name, k = base, 2
        while name.lower() in seen:
            name, k = f"{base}-{k}", k + 1
        seen.add(name.lower())
        s.name = name


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# -- one model -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelTask:
    """What a worker needs to diagnose one model (picklable)."""

    name: str
    model_path: str
    run_dir: str
    settings: ModelSettings
    settings_key: str
    file_hash: str | None
    resume: bool = False
    threads: int = 0
    error: str | None = None  # known before running: the row is an error without loading anything
    rerun: bool = False  # diagnose again even if the run directory holds a finished run


LOCK_DIR = ".locks"  # OUT/.locks/: batch.lock (held by the batch), <model>.lock (held while a model runs)
LOCK_WAIT_S = 120.0  # how long a model waits for another process that still works on it
ORPHAN_GRACE_S = 30.0  # after the batch process died, a worker's time to checkpoint before it exits
_WATCHING = False


def run_model(task: ModelTask) -> dict:
    """Diagnose one model into its run directory; never raises: failures become an "error" row.

    A top-level function so that spawn and forkserver workers can import it. The model's lock
    (OUT/.locks/<model>.lock) is held while it runs: a worker left over from a batch that was
    killed finishes or checkpoints before a new batch touches the same directory, which then
    decides again whether the model is finished or can be resumed."""
    if task.threads:
        os.environ[ORT_THREADS_ENV] = str(task.threads)
    _stop_with_parent()
    run_dir = Path(task.run_dir)
    t0 = time.monotonic()
    try:
        with _file_lock(run_dir.parent / LOCK_DIR / f"{run_dir.name}.lock", LOCK_WAIT_S) as locked:
            if not locked:
                return error_row(task.name, f"another process is still diagnosing this model (it holds "
                                 f"{LOCK_DIR}/{run_dir.name}.lock); run the batch again when it has ended")
            if not task.error and not task.rerun:
                done = finished_row(run_dir, task.file_hash, task.settings_key, repair=True)
                if done is not None:  # finished by a worker of an earlier batch while this one waited
                    return {**done, "reused": True}
                task = replace(task, resume=can_resume(run_dir, task.file_hash, task.settings_key))
            return _run_model_locked(task, run_dir, t0)
    except KeyboardInterrupt:
        return {**error_row(task.name, "interrupted", time.monotonic() - t0), "status": "interrupted"}


def _run_model_locked(task: ModelTask, run_dir: Path, t0: float) -> dict:
    row: dict[str, Any]
    try:
        if task.error:
            raise UserError(task.error)
        if not task.resume and run_dir.exists():
            shutil.rmtree(run_dir)  # our own directory from an earlier attempt
        run_dir.mkdir(parents=True, exist_ok=True)
        _write_entry(run_dir, task, {"model": task.name, "status": "running"})
        try:
            report = _diagnose(task, run_dir)
        except Exception:
            if not task.resume:
                raise
            # What the cut-off run left cannot be continued (a file cut short): start over, once.
            task = replace(task, resume=False)
            shutil.rmtree(run_dir)
            run_dir.mkdir(parents=True)
            _write_entry(run_dir, task, {"model": task.name, "status": "running"})
            report = _diagnose(task, run_dir)
        row = row_from_report(task.name, report)
    except Exception as exc:
        row = error_row(task.name, _one_line(exc), time.monotonic() - t0)
    except KeyboardInterrupt:
        row = error_row(task.name, "interrupted", time.monotonic() - t0)
        row["status"] = "interrupted"
    if run_dir.is_dir():
        _write_entry(run_dir, task, row)
    return row


def _diagnose(task: ModelTask, run_dir: Path) -> dict:
    from precision_doctor.data.workload import InputOptions, load_workload
    from precision_doctor.measure.capture import CaptureSettings
    from precision_doctor.measure.tolerance import Tolerance
    from precision_doctor.pipeline.diagnose import DiagnoseOptions, held_out_samples, run_diagnose
    from precision_doctor.search.oracle import Budget

    s = task.settings
    opts = DiagnoseOptions(
        precision=s.precision, backend=s.backend, strategy=s.strategy, cost=s.cost,
        tolerance=Tolerance(s.atol, s.rtol, s.check_error_stat, s.cosine_floor), margin=s.margin,
        confirm_backend=s.confirm_backend,
        budget=Budget(s.max_evaluations, s.time_budget), resume=task.resume, capture=CaptureSettings(),
    )
    opts.check()
    work = load_workload(task.model_path, InputOptions(
        files=list(s.files), samples=s.samples, seed=s.seed, val_ranges=list(s.val_range),
        input_shapes=list(s.input_shapes), allow_nonfinite=s.allow_nonfinite,
    ))
    validation = held_out_samples(work, list(s.validate_files), s.validation_split)
    return run_diagnose(work, validation, opts, run_dir).report


def row_from_report(name: str, report: dict) -> dict:
    from precision_doctor.render.markdown import confirm_sentence

    status = report.get("status", "unknown")
    passed = bool(report.get("passed"))
    if status == "complete":
        status = "passed" if passed else "failed"
    return {
        "model": name,
        "status": status,
        "passed": passed,
        "fallback_size": report.get("fallback_size"),
        "fp32_flop_share": report.get("fp32_flop_share"),
        "evaluations": report.get("evaluations"),
        "elapsed_s": report.get("elapsed_s"),
        "report": f"{name}/report.html",
        "message": report.get("reason") or confirm_sentence(report) or "",
        "model_hash": (report.get("model") or {}).get("hash"),
    }


def error_row(name: str, message: str, elapsed: float | None = None) -> dict:
    return {
        "model": name, "status": "error", "passed": False, "fallback_size": None, "fp32_flop_share": None,
        "evaluations": None, "elapsed_s": elapsed, "report": "", "message": message,
    }


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    msg = text[0] if text else ""
    if isinstance(exc, UserError):
        return msg[:300]
    return f"{type(exc).__name__}: {msg}"[:300]


def _write_entry(run_dir: Path, task: ModelTask, row: dict) -> None:
    write_json(run_dir / ENTRY, {
        "row": row, "file_hash": task.file_hash, "settings_key": task.settings_key,
        "settings": asdict(task.settings), "model_path": task.model_path,
        "updated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    })


def finished_row(run_dir: Path, file_hash: str | None, settings_key: str, repair: bool = False) -> dict | None:
    """The stored row if `run_dir` holds a finished run of this very file and these settings.

    A run cut off after its final report.json was written (while report.md/report.html were
    rendered, or before its worker recorded the row) is finished too: its row is made from
    report.json, and with `repair` the missing reports are rendered and the entry is updated."""
    entry, report = run_dir / ENTRY, run_dir / "report.json"
    if file_hash is None or not entry.is_file() or not report.is_file():
        return None
    try:
        e, r = read_json(entry), read_json(report)
    except (OSError, ValueError):
        return None
    row = e.get("row") or {}
    if e.get("file_hash") != file_hash or e.get("settings_key") != settings_key:
        return None
    if r.get("status") in (None, "interrupted"):
        return None
    if row.get("status") in ("running", "interrupted"):
        # The directory belongs to the attempt that wrote this entry (a fresh attempt empties it;
        # a resumed one finds only an interrupted report there), so this report.json is its result.
        row = row_from_report(str(row.get("model") or run_dir.name), r)
        if repair:
            _repair_finished(run_dir, e, r, row)
        return row
    if row.get("status") in (None, "error"):
        return None
    if (r.get("model") or {}).get("hash") != row.get("model_hash"):
        return None
    return row


def _repair_finished(run_dir: Path, entry: dict, report: dict, row: dict) -> None:
    """Render the reports a cut-off run did not write (report.json stays as it is), and record its
    row in the entry."""
    try:
        if not (run_dir / "report.md").is_file() or not (run_dir / "report.html").is_file():
            from precision_doctor.render.html import render_html
            from precision_doctor.render.markdown import render_markdown

            clean = jsonable(report)
            write_text_atomic(run_dir / "report.md", render_markdown(clean))
            write_text_atomic(run_dir / "report.html", render_html(clean))
        write_json(run_dir / ENTRY, {**entry, "row": row,
                                     "updated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
    except Exception:  # the row stands; the next run tries again
        pass


def can_resume(run_dir: Path, file_hash: str | None, settings_key: str) -> bool:
    """Whether `run_dir` holds a cut-off run of this file and these settings whose capture (and
    search checkpoint, if the search had begun) lets us continue rather than start over."""
    entry = run_dir / ENTRY
    if file_hash is None or not entry.is_file():
        return False
    try:
        e = read_json(entry)
    except (OSError, ValueError):
        return False
    status = (e.get("row") or {}).get("status")
    return (
        e.get("file_hash") == file_hash and e.get("settings_key") == settings_key
        and status in ("running", "interrupted")
        and (run_dir / "activations.h5").is_file()
    )


@contextlib.contextmanager
def _file_lock(path: Path, wait_s: float) -> Iterator[bool]:
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


def _stop_with_parent() -> None:
    """In a worker process: when the batch process dies (SIGKILL, OOM killer, a closed terminal),
    stop too instead of running on unseen. The worker gets a KeyboardInterrupt (the search
    checkpoints and the row says "interrupted"), and exits after ORPHAN_GRACE_S at the latest."""
    import multiprocessing.process as mpp
    import threading

    global _WATCHING
    parent = mpp.parent_process()
    if _WATCHING or parent is None or getattr(parent, "sentinel", None) is None:
        return  # the batch's own process (InlineExecutor), or watched already
    _WATCHING = True

    def watch() -> None:
        from multiprocessing.connection import wait as wait_ready

        try:
            wait_ready([parent.sentinel])
        except OSError:
            return
        import _thread

        _thread.interrupt_main()
        time.sleep(ORPHAN_GRACE_S)
        os._exit(130)

    threading.Thread(target=watch, name="pd-parent-watch", daemon=True).start()


# -- executors -------------------------------------------------------------------------------------


@dataclass
class Done:
    """One finished item: `result` of `fn(item)`, or `error` when the executor could not run it
    (its worker process died)."""

    item: Any
    result: Any = None
    error: str | None = None


class Executor(Protocol):
    """Runs `fn` over `items` and yields a `Done` per item as each completes (any order).

    `fn` is a picklable top-level function that handles its own failures; the executor reports
    only what `fn` cannot (a worker that died). A Ray executor is a small class of this shape:
    `refs = {ray.remote(fn).remote(it): it for it in items}`, then loop on
    `ready, _ = ray.wait(list(refs), num_returns=1)` and yield `Done(refs.pop(r), ray.get(r))`
    (or `Done(item, error=...)` on `ray.exceptions.RayError`). Nothing else in the batch changes,
    since the tasks carry absolute paths and write their own run directories.
    """

    jobs: int

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Done]: ...


class InlineExecutor:
    """Runs every item in this process, one after another (tests, debugging, `--jobs 0`)."""

    jobs = 1

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Done]:
        for it in items:
            yield Done(it, fn(it))
            interrupt.check()  # a Ctrl-C that ended the item stops the batch too


def _mp_context():
    """forkserver where available (fast, and safe with ONNX Runtime's threads), else spawn."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _child_main(fn: Callable[[Any], Any], item: Any, conn: Any) -> None:
    """A worker process: `fn(item)`, and its result (or what it raised, in one line) sent on `conn`."""
    interrupt.install()
    try:
        msg: tuple[str, Any] = ("ok", fn(item))
    except BaseException as exc:  # fn handles its own failures; report whatever escapes it
        msg = ("error", _one_line(exc) or type(exc).__name__)
    try:
        conn.send(msg)
    finally:
        conn.close()


class LocalExecutor:
    """`jobs` local worker processes, a fresh process per item (so memory does not carry over
    between models), at most `jobs` at a time. A worker that dies (a crash in native code, the OOM
    killer) fails only its own item.

    When the consumer is interrupted (Ctrl-C) or stops early, the running workers get SIGINT (so
    that they checkpoint and record "interrupted"), WORKER_GRACE_S to end, then SIGTERM and SIGKILL;
    the next batch resumes from their run directories. Plain processes rather than a
    concurrent.futures pool: a pool with one task per child can hang at interpreter exit after an
    interrupted shutdown (CPython gh-119592)."""

    def __init__(self, jobs: int):
        if jobs < 1:
            raise UserError("--jobs must be at least 1")
        self.jobs = jobs

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Done]:
        from multiprocessing.connection import wait as wait_ready

        ctx = _mp_context()
        queue = list(items)
        queue.reverse()  # pop() from the end: items start in their order
        running: dict[Any, tuple[Any, Any]] = {}  # result connection -> (process, item)
        finished = False
        try:
            while queue or running:
                interrupt.check()  # a Ctrl-C that a weakref callback swallowed in this process
                while queue and len(running) < self.jobs:
                    item = queue.pop()
                    recv, send = ctx.Pipe(duplex=False)
                    proc = ctx.Process(target=_child_main, args=(fn, item, send), name="precision-doctor-worker")
                    try:
                        proc.start()
                    except Exception as exc:  # e.g. an item that cannot be pickled: that item fails
                        recv.close()
                        yield Done(item, error=f"could not start a worker: {_one_line(exc)}")
                        continue
                    finally:
                        send.close()  # the child holds the sending end; EOF here when it dies
                    running[recv] = (proc, item)
                ready = set(wait_ready(list(running)))
                for recv in [c for c in running if c in ready]:
                    proc, item = running.pop(recv)
                    try:
                        status, value = recv.recv()
                    except (EOFError, OSError):
                        status, value = "died", None
                    finally:
                        recv.close()
                    proc.join(5)
                    if status == "ok":
                        yield Done(item, value)
                    elif status == "error":
                        yield Done(item, error=value)
                    else:
                        yield Done(item, error="the worker process died (exit code "
                                   f"{proc.exitcode}: a crash in native code, or out of memory)")
            finished = True
        finally:
            if not finished:
                _stop_workers([proc for proc, _ in running.values()])
            for recv in running:
                recv.close()


WORKER_GRACE_S = 5.0


def _stop_workers(procs: list) -> None:
    """SIGINT, a grace period, then SIGTERM and SIGKILL for the processes still alive."""
    import signal

    def send(sig: int) -> None:
        for p in procs:
            if p.is_alive() and p.pid:
                try:
                    os.kill(p.pid, sig)
                except OSError:
                    pass

    try:
        send(signal.SIGINT)
        deadline = time.monotonic() + WORKER_GRACE_S
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
    except KeyboardInterrupt:  # a second Ctrl-C: no more waiting
        pass
    send(signal.SIGTERM)
    for p in procs:
        p.join(2)
    send(getattr(signal, "SIGKILL", signal.SIGTERM))
    for p in procs:
        p.join(2)


def make_executor(jobs: int) -> Executor:
    return InlineExecutor() if jobs == 0 else LocalExecutor(jobs)


def threads_per_worker(jobs: int) -> int:
    """ONNX Runtime intra-op threads for each of `jobs` workers (0 = ORT's default, for one job)."""
    if jobs <= 1:
        return 0
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, cores // jobs)


# -- the batch ---------------------------------------------------------------------------------------


@dataclass
class BatchResult:
    out_dir: Path
    rows: list[dict]
    ran: list[str] = field(default_factory=list)  # models diagnosed in this call
    skipped: list[str] = field(default_factory=list)  # finished earlier, not redone
    elapsed_s: float = 0.0

    @property
    def errors(self) -> list[dict]:
        return [r for r in self.rows if r["status"] == "error"]


def default_batch_dir() -> Path:
    from precision_doctor.results.rundir import DEFAULT_ROOT

    base = DEFAULT_ROOT / f"batch-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    path, k = base, 1
    while path.exists():
        path, k = Path(f"{base}-{k}"), k + 1
    return path


def prepare_batch_dir(out: Path, force: bool = False) -> Path:
    """A fresh directory, or one an earlier batch wrote (it holds `batch.json`): then we resume."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    if out.exists() and any(p.name != LOCK_DIR for p in out.iterdir()) and not (out / MARKER).is_file() and not force:
        raise UserError(f"--out {out} is not empty and holds no earlier batch (pass --force to write into it)")
    out.mkdir(parents=True, exist_ok=True)
    return out


def run_batch(
    source: Path,
    out_dir: Path,
    defaults: ModelSettings | None = None,
    executor: Executor | None = None,
    only: list[str] | None = None,
    rerun: bool = False,
    force: bool = False,
    on_start: Callable[[list[str], list[str]], None] | None = None,
    on_done: Callable[[dict], None] | None = None,
) -> BatchResult:
    """Diagnose every model of `source` into `out_dir`. `only` limits the run to those model names
    (the others keep their earlier rows, if any); `rerun` redoes finished models too. `on_start`
    gets the names to run and the names skipped; `on_done` each row as it completes."""
    t0 = time.monotonic()
    specs = discover(Path(source), defaults or ModelSettings())
    if only:
        unknown = sorted(set(only) - {s.name for s in specs})
        if unknown:
            raise UserError(f"--only names unknown model '{unknown[0]}'; models: {', '.join(s.name for s in specs)}")
    out_dir = prepare_batch_dir(Path(out_dir), force=force)
    with _file_lock(out_dir / LOCK_DIR / "batch.lock", 0) as locked:
        if not locked:
            raise UserError(f"another batch is running in {out_dir}; wait for it to end, or pass another --out")
        return _run_batch_locked(specs, source, out_dir, executor, only, rerun, on_start, on_done, t0)


def _run_batch_locked(
    specs: list[ModelSpec], source: Path, out_dir: Path, executor: Executor | None, only: list[str] | None,
    rerun: bool, on_start: Callable[[list[str], list[str]], None] | None, on_done: Callable[[dict], None] | None,
    t0: float,
) -> BatchResult:
    executor = executor or InlineExecutor()
    threads = threads_per_worker(executor.jobs)
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    try:
        created = read_json(out_dir / MARKER).get("created", now)
    except (OSError, ValueError):
        created = now
    write_json(out_dir / MARKER, {
        "tool": "precision-doctor", "source": str(Path(source).resolve()), "created": created, "updated": now,
        "jobs": executor.jobs, "models": [s.name for s in specs],
    })
    rows: dict[str, dict] = {}
    tasks: list[ModelTask] = []
    skipped: list[str] = []
    for s in specs:
        run_dir = out_dir / s.name
        fhash = file_sha256(s.path) if s.path.is_file() else None
        key = s.settings.key()
        selected = not only or s.name in only
        with _file_lock(out_dir / LOCK_DIR / f"{s.name}.lock", 0) as free:
            # A model locked by a worker of a killed batch is left to the task, which waits for it.
            done = None if (rerun and selected) or not free else finished_row(run_dir, fhash, key, repair=True)
        if done is not None:
            rows[s.name] = done
            skipped.append(s.name)
            continue
        if not selected:
            rows[s.name] = _earlier_row(run_dir) or _pending_row(s.name)
            continue
        error = s.error or (None if s.path.is_file() else f"model file not found: {s.path}")
        tasks.append(ModelTask(
            name=s.name, model_path=str(s.path), run_dir=str(run_dir.resolve()), settings=s.settings,
            settings_key=key, file_hash=fhash, resume=not rerun and can_resume(run_dir, fhash, key),
            threads=threads, error=error, rerun=rerun,
        ))
        rows[s.name] = _pending_row(s.name)
    order = [s.name for s in specs]
    write_summary(out_dir, [rows[n] for n in order])
    if on_start:
        on_start([t.name for t in tasks], skipped)
    ran = []
    for done in executor.map(run_model, tasks):
        task = done.item
        row = dict(done.result) if done.error is None else error_row(task.name, done.error)
        if done.error is not None and Path(task.run_dir).is_dir():
            _write_entry(Path(task.run_dir), task, row)
        (skipped if row.pop("reused", False) else ran).append(task.name)
        rows[task.name] = row
        write_summary(out_dir, [rows[n] for n in order])
        if on_done:
            on_done(row)
    final = [rows[n] for n in order]
    return BatchResult(out_dir, final, ran=ran, skipped=skipped, elapsed_s=time.monotonic() - t0)


def _pending_row(name: str) -> dict:
    return {**error_row(name, ""), "status": "pending"}


def _earlier_row(run_dir: Path) -> dict | None:
    try:
        return read_json(run_dir / ENTRY).get("row")
    except (OSError, ValueError):
        return None


# -- summary files ---------------------------------------------------------------------------------


def write_summary(out_dir: Path, rows: list[dict]) -> None:
    """summary.csv, summary.json and summary.html, each written atomically."""
    write_text_atomic(out_dir / "summary.csv", summary_csv(rows))
    write_json(out_dir / "summary.json", {"models": [{k: r.get(k) for k in SUMMARY_COLUMNS} for r in rows]})
    write_text_atomic(out_dir / "summary.html", summary_html(rows))


def summary_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(SUMMARY_COLUMNS)
    for r in rows:
        vals = []
        for k in SUMMARY_COLUMNS:
            v = r.get(k)
            if isinstance(v, bool):
                v = "yes" if v else "no"
            elif isinstance(v, float):
                v = f"{v:.6g}"
            vals.append("" if v is None else v)
        w.writerow(vals)
    return buf.getvalue()


def fmt_share(v: Any) -> str:
    """A FLOP share as a percentage with 3 significant digits ("0.000619%", "12.5%")."""
    return "" if v is None else f"{100 * float(v):.3g}%"


def _fmt_time(v: Any) -> str:
    return "" if v is None else f"{float(v):.1f} s"


_STATUS_CLASS = {"passed": "ok", "error": "bad", "failed": "bad", "no_solution": "bad", "pending": "mut"}

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;color:#1f2328;margin:0}
main{max-width:1200px;margin:0 auto;padding:18px 24px 48px}
h1{font-size:20px;margin:0 0 4px} p.sub{color:#57606a;margin:0 0 14px}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #e5e7eb;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600;white-space:nowrap;cursor:pointer;user-select:none}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.msg{color:#57606a;font-size:12.5px;max-width:420px;word-break:break-word}
.ok{color:#1a7f37;font-weight:600}.bad{color:#c62828;font-weight:600}.warn{color:#b7791f;font-weight:600}
.mut{color:#57606a}
"""

_JS = """
document.querySelectorAll('th').forEach(function(th,i){th.addEventListener('click',function(){
 var tb=th.closest('table').tBodies[0],rows=Array.from(tb.rows),asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';
 rows.sort(function(a,b){var x=a.cells[i].dataset.v||a.cells[i].textContent,y=b.cells[i].dataset.v||b.cells[i].textContent;
  var p=parseFloat(x),q=parseFloat(y);var c=(!isNaN(p)&&!isNaN(q))?p-q:x.localeCompare(y);return asc?c:-c;});
 rows.forEach(function(r){tb.appendChild(r);});});});
"""


def summary_html(rows: list[dict], title: str = "precision-doctor batch") -> str:
    """One self-contained page (inline CSS and JS, no URLs but relative links to each report)."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    sub = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    head = "".join(f"<th>{h}</th>" for h in (
        "Model", "Status", "Passed", "FP32 nodes", "FP32 FLOP share", "Evaluations", "Time", "Report", "Message"))
    body = []
    for r in rows:
        st = r["status"]
        cls = _STATUS_CLASS.get(st, "warn")
        link = f'<a href="{escape(r["report"], quote=True)}">report</a>' if r.get("report") else ""
        passed = "" if st in ("error", "pending") else ("yes" if r.get("passed") else "no")

        def n(v: Any, text: str) -> str:
            return f'<td class="n" data-v="{"" if v is None else escape(str(v), quote=True)}">{escape(text)}</td>'

        body.append(
            "<tr>"
            f"<td>{escape(r['model'])}</td><td class=\"{cls}\">{escape(st)}</td><td>{passed}</td>"
            + n(r.get("fallback_size"), "" if r.get("fallback_size") is None else str(r["fallback_size"]))
            + n(r.get("fp32_flop_share"), fmt_share(r.get("fp32_flop_share")))
            + n(r.get("evaluations"), "" if r.get("evaluations") is None else str(r["evaluations"]))
            + n(r.get("elapsed_s"), _fmt_time(r.get("elapsed_s")))
            + f"<td>{link}</td><td class=\"msg\">{escape(r.get('message') or '')}</td></tr>"
        )
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body><main>"
        f"<h1>{escape(title)}</h1><p class=\"sub\">{len(rows)} models: {escape(sub)} &middot; updated {stamp}</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        f"</main><script>{_JS}</script></body></html>\n"
    )
