"""Captures shared across runs: a second diagnosis of the same model and samples skips the capture and
its analysis. A capture is its statistics (every tensor's error statistics, the analysis, the graph outputs of every
run; `measure/capture.py`) and the tensors `capture.keep` names, so what is shared is small unless `capture.keep` is
`all`; only the tolerance verdict is computed again, from the graph outputs.

`run_diagnose` calls `shared_capture` around its capture step when it is given a `CaptureCache`. The
cache is keyed by `capture_key`: everything that decides the contents of activations.h5 (the
reference, low-precision and local runs' statistics and the tensors kept). The key is the RunSpec's JSON minus the
settings in `NOT_IN_KEY` (each with the reason it cannot change the capture; `capture.keep` as the tensors it keeps:
`none` and `summary` share), plus the model's hash,
the search samples' hash and the code's fingerprint (version and source hash: another build never
reuses a capture). Any setting not listed there, including ones added later (emulation rules, ...),
is part of the key: a capture is never reused across them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

from precision_doctor.data.activations import ActivationStore
from precision_doctor.data.keep_plan import KeepPlan
from precision_doctor.data.workload import Workload
from precision_doctor.fingerprint import code_fingerprint
from precision_doctor.pipeline.compare import ACTIVATIONS
from precision_doctor.pipeline.settings import samples_hash
from precision_doctor.runfiles import RunDir
from precision_doctor.spec import RunSpec

_SAMPLES = "the search samples themselves are hashed into the key"
_TOLERANCE = "the capture does not read it; the verdict, the one part of the analysis that does, is computed again"
NOT_IN_KEY: dict[str, str] = {
    "model": "the hash of the model stands for its path (the same model under another path shares the capture)",
    "inputs.files": _SAMPLES,
    "inputs.samples": _SAMPLES,
    "inputs.data_loader_script": _SAMPLES,
    "inputs.max_samples": _SAMPLES,
    "inputs.seed": _SAMPLES,
    "inputs.val_ranges": _SAMPLES,
    "inputs.validate_files": "held-out samples are not captured",
    "inputs.reference_outputs": "the capture runs ONNX Runtime's FP32 reference; only the verdict reads the file",
    "inputs.validation_split": _SAMPLES + " (the split decides which are searched)",
    "tolerance.atol": _TOLERANCE,
    "tolerance.rtol": _TOLERANCE,
    "tolerance.check_error_stat": _TOLERANCE,
    "tolerance.cosine_floor": _TOLERANCE,
    "tolerance.output_atol": _TOLERANCE,
    "tolerance.output_rtol": _TOLERANCE,
    "search.strategy": "the search runs after the capture",
    "search.cost": "the search runs after the capture",
    "search.batch": "only the cost model and the latency read it, after the capture",
    "search.margin": "the search runs after the capture",
    "search.augment": "perturbed copies are made at search time and never captured",
    "search.max_evaluations": "the search runs after the capture",
    "search.time_budget": "the search runs after the capture",
    "search.keep_io_types": "only fixed.onnx reads it",
    "search.knobs": "the knobs are tried after the search",
    "backends.confirm_backend": "the confirmation runs after the search",
    "artifacts.engine": "the engine is built after the search",
    "artifacts.engine_targets": "the engine is built after the search",
}


class CaptureCache(Protocol):
    """Finished captures (activations.h5 files) by key. `lock(key)` is held while a run looks the key up
    and, on a miss, captures and puts it: a second run of the same key waits, then reuses."""

    def lock(self, key: str) -> AbstractContextManager[object]: ...

    def get(self, key: str, dest: Path) -> bool:
        """Write the capture of `key` to `dest` (a copy: the run appends to it); False when there is none."""
        ...

    def put(self, key: str, path: Path) -> None:
        """Keep a copy of the capture at `path` under `key`."""
        ...


def capture_key(spec: RunSpec, work: Workload) -> str:
    """What decides a capture's contents (see the module docstring), as 32 hex digits."""
    settings = spec.to_json()
    for path in NOT_IN_KEY:
        section, _, name = path.partition(".")
        if name:
            del settings[section][name]
        else:
            del settings[section]
    # which tensors the file holds beyond the statistics: `none` and `summary` capture the same (none removes it later)
    settings["capture"]["keep"] = KeepPlan.parse(spec.capture.keep).label
    text = json.dumps({"settings": settings, "model_hash": work.model.model_hash,
                       "samples_hash": samples_hash(work.captured()), "code": code_fingerprint()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@contextmanager
def shared_capture(cache: CaptureCache | None, spec: RunSpec, work: Workload, run: RunDir) -> Iterator[bool]:
    """Around a run's capture step: yields True when `run/activations.h5` was taken from `cache`
    (the run then only reads it), else False, and the capture the body made is put in the cache
    (before anything is appended to it). Without a cache: False, nothing else."""
    if cache is None:
        yield False
        return
    key = capture_key(spec, work)
    path = run.root / ACTIVATIONS
    with cache.lock(key):
        run.written(path)  # the run directory's manifest lists a capture taken from the cache too
        if cache.get(key, path):
            with ActivationStore(path, "a") as store:  # this run's own names, as a capture made here has them
                store.set_attrs(model_path=str(work.model.path or ""), tolerance=spec.tolerance.to_dict(),
                                input_source=work.describe())
            yield True
            return
        yield False
        if path.is_file():
            cache.put(key, path)
