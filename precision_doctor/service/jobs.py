"""Turning a submission into a queued job, and a job into what the API shows."""

from __future__ import annotations

import shutil
from pathlib import Path

from precision_doctor.service.config import ServiceConfig, StateDir
from precision_doctor.service.store import Job, Store, new_id, to_dict
from precision_doctor.service.uploads import MODEL_SUFFIXES, SAMPLE_SUFFIXES, Refused, Submission, confined, save_upload


def create_job(sub: Submission, config: ServiceConfig, state: StateDir, store: Store) -> Job:
    """Check the settings and every path, store the uploads under the job's directory, queue the job.
    Raises Refused (4xx) and leaves nothing behind when something is wrong."""
    from precision_doctor.service.engine import SettingsError, normalize_settings

    try:
        settings = normalize_settings(sub.settings)
    except SettingsError as exc:
        raise Refused(422, str(exc), setting=exc.setting) from None
    if (sub.model_path is None) == (sub.model_upload is None):
        raise Refused(400, "give exactly one model: an uploaded file ('model') or a path on the server ('model_path')")
    model = confined(sub.model_path, config.allow_roots, sub.model_field) if sub.model_path is not None else None
    if model is not None and model.suffix.lower() not in MODEL_SUFFIXES:
        raise Refused(400, f"{sub.model_field}: '{sub.model_path}' is not an .onnx file")
    job_id = new_id()
    inputs_dir = state.inputs_dir(job_id)
    try:
        if sub.model_upload is not None:
            model = save_upload(sub.model_upload, inputs_dir, -1, MODEL_SUFFIXES, "model")
        for key, uploads in (("files", sub.inputs), ("validate_files", sub.validate_inputs)):
            settings["inputs"][key] = [str(confined(p, config.allow_roots, f"inputs.{key}")) for p in settings["inputs"][key]]
            for i, up in enumerate(uploads):
                sub_dir = inputs_dir / ("samples" if key == "files" else "validate")
                settings["inputs"][key].append(str(save_upload(up, sub_dir, i, SAMPLE_SUFFIXES, key.rstrip("s"))))
        assert model is not None
        name = sub.name or Path(model.name).stem
        return store.create(name, {"model": str(model), **settings}, job_id=job_id)
    except BaseException:
        shutil.rmtree(state.job_dir(job_id), ignore_errors=True)
        raise


def job_json(job: Job, detail: bool = True) -> dict:
    """A job for the API: state, progress, result, links (and its settings with `detail`)."""
    base = f"/jobs/{job.id}"
    out = to_dict(job)
    out["links"] = {"self": base, "report": f"{base}/report", "events": f"{base}/events", "artifacts": f"{base}/artifacts",
                    "page": f"/ui/jobs/{job.id}"}
    if detail:
        out["spec"] = job.spec
    return out
