"""run_settings.json: what decides the checkpointed verdicts of a run, so that `resume` refuses a run
directory made with other settings (its memoized verdicts would not hold)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from precision_doctor.data.inputs import Sample
from precision_doctor.data.workload import Workload
from precision_doctor.errors import SpecError
from precision_doctor.results.jsonio import jsonable, read_json, write_json
from precision_doctor.spec import RunSpec

RUN_SETTINGS = "run_settings.json"


def run_settings(work: Workload, spec: RunSpec, validation: list[Sample]) -> dict:
    """What decides the verdicts in the checkpoints: a resumed run must have the same."""
    return jsonable({
        "model_hash": work.model.model_hash, "precision": spec.precision, "backend": spec.backends.backend,
        "tolerance": spec.tolerance.to_dict(), "margin": spec.search.margin,
        "confirm_backend": spec.backends.confirm_backend, "rules": spec.backends.rules,
        "samples": len(work.samples), "validation_samples": len(validation),
        "samples_hash": samples_hash(work.samples + validation),
    })


def samples_hash(samples: list[Sample]) -> str:
    h = hashlib.sha256()
    for s in samples:
        for name in sorted(s):
            a = np.ascontiguousarray(s[name])
            h.update(f"{name}:{a.dtype}:{a.shape};".encode())
            h.update(a.tobytes())
    return h.hexdigest()[:16]


def check_run_settings(out_dir: Path, settings: dict, resume: bool) -> None:
    """Record the settings of a run; refuse to resume one made with other settings. Runs from before
    this file existed resume unchecked."""
    path = out_dir / RUN_SETTINGS
    if resume and path.exists():
        old = read_json(path)
        diff = [k for k in settings if old.get(k) != settings[k]]
        if diff:
            shown = ", ".join(f"{k} {old.get(k)!r} then, {settings[k]!r} now" for k in diff)
            raise SpecError("resume", f"{{resume}}: {out_dir} was run with other settings ({shown}); use another {{out_dir}}")
    write_json(path, settings)
