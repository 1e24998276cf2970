"""Turning a submission into a queued job: its settings checked as a RunSpec, the files it names pinned
into its directory (confined to the allowed roots), its uploads stored there."""

from __future__ import annotations

import shutil
from pathlib import Path

from precision_doctor.errors import SpecError, UserError
from precision_doctor.service.config import ServiceConfig, StateDir
from precision_doctor.service.paths import pin_confined, pin_model
from precision_doctor.service.store import Job, Store, new_id
from precision_doctor.service.uploads import MODEL_SUFFIXES, SAMPLE_SUFFIXES, Refused, Submission, save_upload
from precision_doctor.spec import RunSpec

_UPLOADED = "uploaded.onnx"  # the model's path while the settings are checked, before the upload is stored
SAMPLE_DIRS = {"files": "samples", "validate_files": "validate"}  # inputs.<key> -> STATE/jobs/ID/inputs/<dir>
MODEL_DIR, REFERENCE_DIR = "model", "reference"


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
    """Check the settings, pin every file the job names into its directory (`paths.py`: confined to the
    allowed roots, opened then checked), store the uploads there, queue the job. The job's settings name
    only files of its own directory. Raises Refused (4xx) and leaves nothing behind when something is wrong."""
    spec = check_settings(sub.settings)
    if (sub.model_path is None) == (sub.model_upload is None):
        raise Refused(400, "give exactly one model: an uploaded file ('model') or a path on the server ('model_path')")
    if sub.model_path is not None and "\x00" in sub.model_path:
        raise Refused(400, f"{sub.model_field}: the path must not contain NUL characters")
    if sub.model_path is not None and not sub.model_path.lower().endswith(MODEL_SUFFIXES):
        raise Refused(400, f"{sub.model_field}: '{sub.model_path}' is not an .onnx file")
    job_id = new_id()
    inputs_dir = state.inputs_dir(job_id)
    roots = config.allow_roots
    try:
        if sub.model_upload is not None:
            model = save_upload(sub.model_upload, inputs_dir, -1, MODEL_SUFFIXES, "model")
        else:
            assert sub.model_path is not None
            model = pin_model(sub.model_path, roots, sub.model_field, inputs_dir / MODEL_DIR)
        changes: dict[str, object] = {"model": str(model)}
        for key, uploads in (("files", sub.inputs), ("validate_files", sub.validate_inputs)):
            where, named = inputs_dir / SAMPLE_DIRS[key], getattr(spec.inputs, key)
            pinned = [str(pin_confined(path, roots, f"inputs.{key}", where, f"{i:03d}-", setting=f"inputs.{key}"))
                      for i, path in enumerate(named)]
            stored = [str(save_upload(up, where, len(named) + i, SAMPLE_SUFFIXES, key.rstrip("s")))
                      for i, up in enumerate(uploads)]
            changes[f"inputs.{key}"] = pinned + stored
        if (ref := spec.inputs.reference_outputs) is not None:
            changes["inputs.reference_outputs"] = str(pin_confined(ref, roots, "inputs.reference_outputs",
                                                                   inputs_dir / REFERENCE_DIR,
                                                                   setting="inputs.reference_outputs"))
        spec = spec.with_settings(changes)
        name = sub.name or Path(sub.model_path or model.name).stem
        return store.create(name, spec.to_json(), job_id=job_id)
    except BaseException:
        shutil.rmtree(state.job_dir(job_id), ignore_errors=True)
        raise

