"""Turning a submission into a queued job: its settings checked as a RunSpec, its paths confined, its
uploads stored."""

from __future__ import annotations

import shutil
from pathlib import Path

from precision_doctor.errors import SpecError, UserError
from precision_doctor.service.config import ServiceConfig, StateDir
from precision_doctor.service.store import Job, Store, new_id
from precision_doctor.service.uploads import MODEL_SUFFIXES, SAMPLE_SUFFIXES, Refused, Submission, confined, save_upload
from precision_doctor.spec import RunSpec

_UPLOADED = "uploaded.onnx"  # the model's path while the settings are checked, before the upload is stored


def check_settings(settings: object) -> RunSpec:
    """The job's settings (the RunSpec's JSON sections, every key optional) as a checked RunSpec whose
    model is still a placeholder; Refused (422, naming the setting) when one is wrong."""
    if not isinstance(settings, dict):
        raise Refused(422, "settings must be a JSON object with sections inputs, tolerance, search, capture, backends",
                      setting="settings")
    if "model" in settings:
        raise Refused(422, "settings.model: name the model as the request's 'model' (a server path) or upload it",
                      setting="model")
    try:
        return RunSpec.from_json({**settings, "model": _UPLOADED}).validate()
    except SpecError as exc:
        raise Refused(422, str(exc), setting=exc.setting) from None
    except UserError as exc:
        raise Refused(422, str(exc), setting="settings") from None


def create_job(sub: Submission, config: ServiceConfig, state: StateDir, store: Store) -> Job:
    """Check the settings and every path, store the uploads under the job's directory, queue the job.
    Raises Refused (4xx) and leaves nothing behind when something is wrong."""
    spec = check_settings(sub.settings)
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
        files: dict[str, list[str]] = {}
        for key, uploads, sub_dir in (("files", sub.inputs, "samples"), ("validate_files", sub.validate_inputs, "validate")):
            named = [str(confined(p, config.allow_roots, f"inputs.{key}")) for p in getattr(spec.inputs, key)]
            stored = [str(save_upload(up, inputs_dir / sub_dir, i, SAMPLE_SUFFIXES, key.rstrip("s")))
                      for i, up in enumerate(uploads)]
            files[f"inputs.{key}"] = named + stored
        assert model is not None
        spec = spec.with_settings({"model": str(model), **files})
        return store.create(sub.name or Path(model.name).stem, spec.to_json(), job_id=job_id)
    except BaseException:
        shutil.rmtree(state.job_dir(job_id), ignore_errors=True)
        raise
