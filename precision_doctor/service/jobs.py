"""Turning a submission into a queued job: its settings checked as a RunSpec, the files it names pinned
into its directory (confined to the allowed roots, each real file once, sample files by their suffix, at most
MAX_JOB_FILES of them with the uploads), its uploads stored there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from precision_doctor.data.loader_script import parse_script
from precision_doctor.data.sources import looks_like_shape
from precision_doctor.errors import SpecError, UserError
from precision_doctor.results.report import ServiceJob
from precision_doctor.service import precheck
from precision_doctor.service.config import MAX_JOB_FILES, ServiceConfig, StateDir
from precision_doctor.service.paths import Pins, expand_confined, pin_confined, pin_model
from precision_doctor.service.store import Job, Store, new_id
from precision_doctor.service.uploads import (
    MODEL_SUFFIXES,
    SAMPLE_SUFFIXES,
    Refused,
    Submission,
    safe_filename,
    save_upload,
)
from precision_doctor.spec import RunSpec

_UPLOADED = "uploaded.onnx"  # the model's path while the settings are checked, before the upload is stored
SAMPLE_DIRS = {"files": "samples", "validate_files": "validate"}  # inputs.<key> -> STATE/jobs/ID/inputs/<dir>
MODEL_DIR, REFERENCE_DIR, LOADER_DIR = "model", "reference", "loader"


def check_settings(settings: object) -> RunSpec:
    """The job's settings (the RunSpec's JSON sections, every key optional) as a checked RunSpec whose
    model is still a placeholder; Refused (422, naming the setting) when one is wrong."""
    if not isinstance(settings, dict):
        raise Refused(422, "settings must be a JSON object with sections inputs, tolerance, search, capture, backends",
                      setting="settings")
    if "model" in settings:
        raise Refused(422, "settings.model: name the model as the request's 'model' (a server path) or upload it",
                      setting="model")
    from precision_doctor.pipeline.spec_check import validate_spec  # backends, search, rules: not at the daemon's start

    try:
        return validate_spec(RunSpec.from_json({**settings, "model": _UPLOADED})).spec
    except SpecError as exc:
        raise Refused(422, str(exc), setting=exc.setting) from None
    except UserError as exc:
        raise Refused(422, str(exc), setting="settings") from None


def create_job(sub: Submission, config: ServiceConfig, state: StateDir, store: Store, server: str | None = None) -> Job:
    """Check the settings, pin every file the job names into its directory (`paths.py`: confined to the
    allowed roots, opened then checked), store the uploads there, queue the job. The job's settings name
    only files of its own directory; `submitted.json` keeps the files as the submitter named them and the
    daemon's URL as they reached it (`server`), for the report's `submit` command. Raises Refused (4xx) and
    leaves nothing behind when something is wrong."""
    spec = check_settings(sub.settings)
    if (sub.model_path is None) == (sub.model_upload is None):
        raise Refused(400, "give exactly one model: an uploaded file ('model') or a path on the server ('model_path')")
    if sub.model_path is not None and "\x00" in sub.model_path:
        raise Refused(400, f"{sub.model_field}: the path must not contain NUL characters")
    if sub.model_path is not None and not sub.model_path.lower().endswith(MODEL_SUFFIXES):
        raise Refused(400, f"{sub.model_field}: '{sub.model_path}' is not an .onnx file")
    uploads = len(sub.inputs) + len(sub.validate_inputs)
    if uploads > MAX_JOB_FILES:
        raise Refused(422, f"inputs: {uploads:,} uploaded files, more than the {MAX_JOB_FILES:,} one job may hold",
                      setting="inputs.files")
    job_id = new_id()
    inputs_dir = state.inputs_dir(job_id)
    roots = config.allow_roots
    pins = Pins(roots, MAX_JOB_FILES - uploads)  # the job's sample files: each real file pinned once
    try:
        if sub.model_upload is not None:
            model = save_upload(sub.model_upload, inputs_dir, -1, MODEL_SUFFIXES, "model")
        else:
            assert sub.model_path is not None
            model = pin_model(sub.model_path, roots, sub.model_field, inputs_dir / MODEL_DIR)
        changes: dict[str, object] = {"model": str(model)}
        shown, field = (sub.model_path, sub.model_field) if sub.model_path is not None else (model.name, "model")
        names = precheck.model_inputs(model, shown, field)
        for key, sent in (("files", sub.inputs), ("validate_files", sub.validate_inputs)):
            where, named = inputs_dir / SAMPLE_DIRS[key], _expanded(getattr(spec.inputs, key), roots, f"inputs.{key}")
            setting = f"inputs.{key}"
            given = [(path, pins.pin(path, setting, where, f"{i:03d}-", setting, SAMPLE_SUFFIXES))
                     for i, path in enumerate(named)]
            given += [(up.filename or "an upload", save_upload(up, where, len(named) + i, SAMPLE_SUFFIXES, key.rstrip("s")))
                      for i, up in enumerate(sent)]
            if spec.inputs.data_loader_script is None:  # a script's samples are its own (checked as the job runs)
                precheck.samples(given, names, setting)
            changes[setting] = list(dict.fromkeys(str(stored) for _, stored in given))
        if (script := spec.inputs.data_loader_script) is not None:
            changes["inputs.data_loader_script"] = _pinned_script(script, config, inputs_dir / LOADER_DIR)
        if (ref := spec.inputs.reference_outputs) is not None:
            changes["inputs.reference_outputs"] = str(Pins(roots).pin(ref, "inputs.reference_outputs",
                                                                      inputs_dir / REFERENCE_DIR, "",
                                                                      "inputs.reference_outputs", (".json",)))
        state.job_dir(job_id).mkdir(parents=True, exist_ok=True)
        state.submitted(job_id).write_text(json.dumps(_as_submitted(job_id, sub, spec, server).to_json()))
        spec = spec.with_settings(changes)
        name = sub.name or Path(sub.model_path or model.name).stem
        return store.create(name, spec.to_json(), job_id=job_id)
    except BaseException:
        shutil.rmtree(state.job_dir(job_id), ignore_errors=True)
        raise


def _as_submitted(job_id: str, sub: Submission, spec: RunSpec, server: str | None) -> ServiceJob:
    """The job's files as the submitter named them: server paths as given, uploads by their file names."""

    def uploaded(ups: list) -> list[str]:
        return [safe_filename(u.filename, "sample") for u in ups]

    i = spec.inputs
    model = sub.model_path if sub.model_path is not None else safe_filename(sub.model_upload.filename, "model.onnx")
    return ServiceJob(id=job_id, server=server, model=model, inputs=[*i.files, *uploaded(sub.inputs)],
                      validate_inputs=[*i.validate_files, *uploaded(sub.validate_inputs)],
                      reference_outputs=i.reference_outputs, remote=sub.model_path is not None)

def _expanded(values: tuple[str, ...], roots: list[Path], setting: str) -> list[str]:
    """The server files `values` name (directories and globs under the roots expanded, `paths.expand_confined`);
    a value that looks like a shape is refused with a pointer to inputs.input_shapes. Each name once (a name given
    again is the same file), and more distinct names than a job may hold files (MAX_JOB_FILES) are refused before any
    is opened."""
    out: dict[str, None] = {}
    for value in dict.fromkeys(values):
        if looks_like_shape(value):
            raise Refused(422, f"{setting}: '{value}' looks like a shape, not a file: did you mean inputs.input_shapes?",
                          setting=setting)
        out.update(dict.fromkeys(expand_confined(value, roots, setting, setting=setting)))
        if len(out) > MAX_JOB_FILES:
            raise Refused(422, f"{setting}: more than {MAX_JOB_FILES:,} files named in one job; give fewer (or samples "
                          "stacked in fewer files)", setting=setting)
    return list(out)


def _pinned_script(value: str, config: ServiceConfig, where: Path) -> str:
    """A data loader script named on the server (`--allow-loader-scripts` only: it runs code as the daemon's
    user), pinned into the job's directory; "PINNED:FUNC"."""
    setting = "inputs.data_loader_script"
    if not config.loader_scripts:
        raise Refused(403, f"{setting}: this server does not run data loader scripts (it runs code as the daemon's "
                      "user; start it with --allow-loader-scripts to allow scripts under its --allow-root); give the "
                      "samples as files", setting=setting)
    path, func = parse_script(value)
    return f"{pin_confined(str(path), config.allow_roots, setting, where, setting=setting)}:{func}"
