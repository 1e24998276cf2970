"""The one adapter between the service and the core: "run this job spec in this directory with this
progress sink and this stop token, return a summary".

The service speaks the RunSpec's JSON section form (`precision_doctor.spec`, arriving with the
restructure):

    {"model": "/abs/model.onnx", "precision": "fp16",
     "inputs": {"files", "samples", "seed", "val_ranges", "input_shapes", "allow_nonfinite",
                "validate_files", "validation_split"},
     "tolerance": {"atol", "rtol", "check_error_stat", "cosine_floor"},
     "search": {"strategy", "cost", "margin", "max_evaluations", "time_budget", "keep_io_types"},
     "capture": {"group_mb"},
     "backends": {"backend", "confirm_backend"}}

Today this module maps that onto `diagnose.run_diagnose` (DiagnoseOptions, load_workload,
held_out_samples); when `api.diagnose(spec, out_dir, progress=, stop=, resume=)` lands, only the
bodies of `normalize_settings` (-> `RunSpec.from_json(..).validate()`), `StopToken` (->
`control.StopToken`) and `run_job` change. Progress reaches the service as plain dicts shaped like the
core's events: {"kind": "phase", "phase"}, {"kind": "evaluation", "step", "phase", "size", "passed",
"best_size"}.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from precision_doctor.errors import UserError
from precision_doctor.service.cache import CaptureCache

ProgressSink = Callable[[dict], None]
BACKENDS = ("emulate", "ort-cuda", "ort-cpu", "trt", "auto")
ACTIVATIONS = "activations.h5"
RUN_SETTINGS = "run_settings.json"
# Today's core names CLI flags in its messages; the service names settings (as SpecError will).
_FLAG_SETTINGS = {
    "--check-error-stat": "tolerance.check_error_stat", "--atol": "tolerance.atol", "--rtol": "tolerance.rtol",
    "--cosine-floor": "tolerance.cosine_floor", "--margin": "search.margin", "--cost": "search.cost",
    "--confirm-backend": "backends.confirm_backend", "--backend": "backends.backend",
    "--validation-split": "inputs.validation_split", "--val-range": "inputs.val_ranges",
    "--input-shapes": "inputs.input_shapes",
}


class SettingsError(UserError):
    """A job setting is wrong; `setting` is its JSON path ("search.margin"), as the core's SpecError."""

    def __init__(self, setting: str, message: str):
        super().__init__(message)
        self.setting = setting


def default_settings() -> dict:
    """Every setting with the core's default, in section form (the defaults live in the core)."""
    from precision_doctor.capture import CaptureSettings
    from precision_doctor.diagnose import DiagnoseOptions
    from precision_doctor.tolerance import Tolerance
    from precision_doctor.workload import InputOptions

    d, i = DiagnoseOptions(), InputOptions()
    return {
        "precision": d.precision,
        "inputs": {"files": [], "samples": i.samples, "seed": i.seed, "val_ranges": [], "input_shapes": [],
                   "allow_nonfinite": i.allow_nonfinite, "validate_files": [], "validation_split": None},
        "tolerance": asdict(Tolerance()),
        "search": {"strategy": d.strategy, "cost": d.cost, "margin": d.margin, "max_evaluations": d.budget.max_evaluations,
                   "time_budget": d.budget.time_s, "keep_io_types": d.keep_io_types},
        "capture": {"group_mb": CaptureSettings().group_mb},
        "backends": {"backend": d.backend, "confirm_backend": d.confirm_backend},
    }


_INT = ("inputs.samples", "inputs.seed", "search.max_evaluations")
_FLOAT = ("inputs.validation_split", "tolerance.atol", "tolerance.rtol", "tolerance.cosine_floor", "search.margin",
          "search.time_budget", "capture.group_mb")
_BOOL = ("inputs.allow_nonfinite", "search.keep_io_types")
_LISTS = ("inputs.files", "inputs.validate_files", "inputs.val_ranges", "inputs.input_shapes")
_NULLABLE = ("inputs.validation_split", "tolerance.cosine_floor", "search.max_evaluations", "search.time_budget",
             "backends.confirm_backend")


def normalize_settings(given: Any) -> dict:
    """`given` (section form, every key optional; "model" is not a setting here) checked and completed
    with the defaults. Raises SettingsError naming the first bad setting."""
    if not isinstance(given, dict):
        raise SettingsError("settings", "settings must be a JSON object with sections inputs, tolerance, search, ...")
    out = default_settings()
    for key, value in given.items():
        if key not in out:
            raise SettingsError(key, f"unknown setting '{key}' (known: {', '.join(sorted(out))})")
        if isinstance(out[key], dict):
            if not isinstance(value, dict):
                raise SettingsError(key, f"{key} must be an object")
            for sub, v in value.items():
                if sub not in out[key]:
                    raise SettingsError(f"{key}.{sub}", f"unknown setting '{key}.{sub}' (known: "
                                        f"{', '.join(f'{key}.{k}' for k in out[key])})")
                out[key][sub] = _typed(f"{key}.{sub}", v)
        else:
            out[key] = _typed(key, value)
    _check(out)
    return out


def _typed(path: str, v: Any) -> Any:
    if v is None and path in _NULLABLE:
        return None
    if path in _BOOL:
        if not isinstance(v, bool):
            raise SettingsError(path, f"{path} must be true or false, got {v!r}")
        return v
    if path in _INT or path in _FLOAT:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
            raise SettingsError(path, f"{path} must be a number, got {v!r}")
        if path in _INT and float(v) != int(v):
            raise SettingsError(path, f"{path} must be an integer, got {v!r}")
        return int(v) if path in _INT else float(v)
    if path in _LISTS:
        v = [v] if isinstance(v, str) else v
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise SettingsError(path, f"{path} must be a list of strings, got {v!r}")
        return list(v)
    if not isinstance(v, str):
        raise SettingsError(path, f"{path} must be a string, got {v!r}")
    return v


@contextmanager
def _setting(path: str) -> Iterator[None]:
    """Turn the core's UserError into a SettingsError for `path` (flag names become setting names)."""
    try:
        yield
    except SettingsError:
        raise
    except UserError as exc:
        msg = str(exc)
        named = [s for f, s in _FLAG_SETTINGS.items() if f in msg]
        for flag in sorted(_FLAG_SETTINGS, key=len, reverse=True):
            msg = msg.replace(flag, _FLAG_SETTINGS[flag])
        raise SettingsError(named[0] if named else path, msg) from None


def _check(s: dict) -> None:
    from precision_doctor.inputs import parse_input_shapes, parse_val_ranges
    from precision_doctor.precision.formats import get_format
    from precision_doctor.tolerance import Tolerance

    with _setting("precision"):
        get_format(s["precision"])
    with _setting("tolerance"):
        Tolerance(**s["tolerance"])
    with _setting("search"):
        _options(s, resume=False).check()
    for path, name in (("inputs.val_ranges", "val_ranges"), ("inputs.input_shapes", "input_shapes")):
        with _setting(path):
            (parse_val_ranges if name == "val_ranges" else parse_input_shapes)(s["inputs"][name])
    for path in ("backends.backend", "backends.confirm_backend"):
        v = s["backends"][path.split(".")[1]]
        if v is not None and v not in BACKENDS:
            raise SettingsError(path, f"{path}: unknown backend '{v}'; choose one of {', '.join(BACKENDS)}")
    split = s["inputs"]["validation_split"]
    if split is not None and not 0 <= split < 1:
        raise SettingsError("inputs.validation_split", f"inputs.validation_split must lie in [0, 1), got {split}")
    if s["inputs"]["samples"] < 1 and not s["inputs"]["files"]:
        raise SettingsError("inputs.samples", "inputs.samples must be at least 1")
    for path in ("search.max_evaluations", "search.time_budget", "capture.group_mb"):
        sec, key = path.split(".")
        if s[sec][key] is not None and s[sec][key] <= 0:
            raise SettingsError(path, f"{path} must be positive, got {s[sec][key]}")


def _options(s: dict, resume: bool):
    from precision_doctor.capture import CaptureSettings
    from precision_doctor.diagnose import DiagnoseOptions
    from precision_doctor.search.oracle import Budget
    from precision_doctor.tolerance import Tolerance

    return DiagnoseOptions(
        precision=s["precision"], backend=s["backends"]["backend"], strategy=s["search"]["strategy"],
        cost=s["search"]["cost"], tolerance=Tolerance(**s["tolerance"]), margin=s["search"]["margin"],
        confirm_backend=s["backends"]["confirm_backend"],
        budget=Budget(s["search"]["max_evaluations"], s["search"]["time_budget"]), resume=resume,
        keep_io_types=s["search"]["keep_io_types"], capture=CaptureSettings(group_mb=s["capture"]["group_mb"]),
    )


# -- stopping -------------------------------------------------------------------------------------


class StopToken:
    """Stops one run at the core's next safe point (an evaluation, a capture run), as
    `control.StopToken` will. Today the core checks the process-wide flag in `interrupt.py`, so a
    process runs one job at a time (the service's workers do)."""

    def __init__(self) -> None:
        self.reason: str | None = None

    @property
    def stopped(self) -> bool:
        return self.reason is not None

    def stop(self, reason: str) -> None:
        from precision_doctor import interrupt

        if self.reason is None:
            self.reason = reason
        interrupt._pending = True  # today's stop: interrupt.check() raises at the core's next safe point

    def clear(self) -> None:
        from precision_doctor import interrupt

        self.reason = None
        interrupt.clear()


# -- running ----------------------------------------------------------------------------------------


@dataclass
class Summary:
    """What a job's run came to (the service stores it; report.json has the rest)."""

    status: str  # the core's: complete, no_solution, budget_exhausted, interrupted; "stopped": cut off outside the search
    passed: bool
    fallback_size: int | None = None
    fp32_flop_share: float | None = None
    evaluations: int | None = None
    elapsed_s: float | None = None
    reason: str | None = None
    capture_reused: bool = False
    capture_s: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def run_job(spec: dict, out_dir: Path, *, progress: ProgressSink, stop: StopToken, resume: bool = False,
            cache: CaptureCache | None = None) -> Summary:
    """Diagnose `spec` (section form with "model") into `out_dir`. `resume` continues the run there
    from its checkpoint; otherwise `out_dir` is emptied first. A capture of the same model, samples,
    precision and capture settings is taken from `cache` (and put there when made here). A stop
    (`stop`) ends the run at a safe point: status "interrupted" (the search reports its best set
    so far) or "stopped" (before or after the search). UserError for bad input, as the core."""
    from precision_doctor.diagnose import _samples_hash, held_out_samples, run_diagnose
    from precision_doctor.workload import InputOptions, load_workload

    settings = normalize_settings({k: v for k, v in spec.items() if k != "model"})
    inp = settings["inputs"]
    if not resume and out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    best: list[int] = []

    def on_stage(name: str) -> None:
        # run_diagnose's "capture" stage finds activations.h5 in place (seeded or captured here): it analyses
        progress({"kind": "phase", "phase": "analyse" if name == "capture" else name})

    def on_evaluation(ev) -> None:
        if ev.verdict.passed and (not best or len(ev.fallback) < best[0]):
            best[:] = [len(ev.fallback)]
        progress({"kind": "evaluation", "step": ev.step, "phase": ev.phase, "size": len(ev.fallback),
                  "passed": bool(ev.verdict.passed), "best_size": best[0] if best else None})

    try:
        on_stage("load")
        work = load_workload(spec["model"], InputOptions(
            files=list(inp["files"]), samples=inp["samples"], seed=inp["seed"], val_ranges=list(inp["val_ranges"]),
            input_shapes=list(inp["input_shapes"]), allow_nonfinite=inp["allow_nonfinite"]))
        validation = held_out_samples(work, list(inp["validate_files"]), inp["validation_split"])
        opts = _options(settings, resume=True)  # resume: a seeded or earlier capture in out_dir is used
        reused, capture_s = False, None
        if not (out_dir / ACTIVATIONS).is_file():
            progress({"kind": "phase", "phase": "capture"})
            key = capture_key(work.model.model_hash, _samples_hash(work.samples), settings)
            t0 = time.monotonic()
            with (cache.locked(key) if cache else _nothing()):
                reused = cache is not None and cache.get(key, out_dir / ACTIVATIONS)
                if not reused:
                    _capture(work, opts, out_dir, progress)
                    if cache is not None:
                        cache.put(key, out_dir / ACTIVATIONS)
            capture_s = time.monotonic() - t0
        outcome = run_diagnose(work, validation, opts, out_dir, on_stage=on_stage, on_evaluation=on_evaluation)
    except KeyboardInterrupt:
        if not stop.stopped:
            raise
        return Summary("stopped", False, reason=f"stopped ({stop.reason}) outside the search")
    r = outcome.report
    return Summary(
        status=r["status"], passed=bool(r["passed"]), fallback_size=r.get("fallback_size"),
        fp32_flop_share=r.get("fp32_flop_share"), evaluations=r.get("evaluations"), elapsed_s=r.get("elapsed_s"),
        reason=r.get("reason"), capture_reused=reused, capture_s=capture_s,
    )


def _capture(work, opts, out_dir: Path, progress: ProgressSink) -> None:
    """The reference, low-precision and local runs into out_dir/activations.h5 (what
    compare.capture_and_analyse writes, without its analysis: diagnose analyses the file itself)."""
    from precision_doctor.capture import capture
    from precision_doctor.precision.formats import get_format

    tmp = out_dir / f".{ACTIVATIONS}.partial"
    attrs = {"tolerance": opts.tolerance.to_dict(), "input_source": work.inputs.describe()}

    def on_capture(stage: str, done: int, total: int) -> None:
        progress({"kind": "capture", "stage": stage, "done": done, "total": total})

    capture(work.model, work.samples, get_format(opts.precision), tmp, frozenset(), opts.capture, attrs=attrs,
            progress=on_capture)
    tmp.replace(out_dir / ACTIVATIONS)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def capture_key(model_hash: str, samples_hash: str, settings: dict) -> str:
    """What decides a capture's contents: the model, the search samples, the precision, the capture
    settings and the code that captures."""
    from precision_doctor import __version__

    d = {"model": model_hash, "samples": samples_hash, "precision": settings["precision"].lower(),
         "capture": settings["capture"], "version": __version__}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:32]


def run_settings_exist(out_dir: Path) -> bool:
    """Whether `out_dir` holds a run that `resume` can continue."""
    return (out_dir / RUN_SETTINGS).is_file()


# -- where workers run -------------------------------------------------------------------------------


def gpu_count() -> int:
    """GPUs on this machine (nvidia-smi), for the default worker count."""
    from precision_doctor.environment import gpus

    return len(gpus())


def worker_environment(index: int, workers: int, gpus: int) -> dict[str, str]:
    """Environment of worker `index`: its GPU when there are GPUs, else a share of the CPU cores for
    ONNX Runtime's threads."""
    from precision_doctor.batch import ORT_THREADS_ENV

    env: dict[str, str] = {}
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = str(index % gpus)
    if workers > 1:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:
            cores = os.cpu_count() or 1
        env[ORT_THREADS_ENV] = str(max(1, cores // workers))
    return env
