"""What a submission may carry: its fields (each once, but the sample files), its settings (JSON of
bounded depth), uploaded files (size-limited, sanitised names, known suffixes), and artifact names
confined to a job's run directory. Server paths are `paths.py`'s."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from fastapi import HTTPException, Request
from starlette.datastructures import UploadFile

from precision_doctor.data.sources import SAMPLE_SUFFIXES as SAMPLE_FILE_SUFFIXES
from precision_doctor.errors import SpecError
from precision_doctor.render.numbers import fmt_bytes
from precision_doctor.service.config import MAX_JOB_FILES
from precision_doctor.spec import load_json

MODEL_SUFFIXES = (".onnx",)
SAMPLE_SUFFIXES = SAMPLE_FILE_SUFFIXES  # what --inputs reads (data/sources.py)
_FIELDS = {"settings", "model_path", "model", "inputs", "validate_inputs", "name"}
_REPEATABLE = {"inputs", "validate_inputs"}
MAX_SETTINGS_BYTES = 1 << 20  # a settings document sent as a file part


class Refused(HTTPException):
    """A 4xx with a one-line message (and, for a bad setting, the setting's JSON path)."""

    def __init__(self, status: int, message: str, setting: str | None = None):
        super().__init__(status, message)
        self.setting = setting


@dataclass
class Submission:
    """A parsed POST /jobs: the model (a server path or an upload), the settings, the uploads."""

    name: str | None
    settings: Any
    model_path: str | None = None
    model_upload: UploadFile | None = None
    inputs: list[UploadFile] = field(default_factory=list)
    validate_inputs: list[UploadFile] = field(default_factory=list)
    model_field: str = "model_path"  # what the request called the server path (for messages)


async def read_submission(request: Request) -> Submission:
    """JSON (`{"model": "/path/on/server.onnx", "settings": {...}, "name": ...}`) or multipart form
    (fields `model` (file) or `model_path`, `inputs` and `validate_inputs` (files, repeatable),
    `settings` (JSON text), `name`)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        body = _json(await request.body() or b"null", "the request body")
        if not isinstance(body, dict):
            raise Refused(400, "the request body must be a JSON object with 'model' and 'settings'")
        unknown = sorted(set(body) - {"model", "settings", "name"})
        if unknown:
            raise Refused(400, f"unknown field '{unknown[0]}' (known: model, settings, name)")
        if not isinstance(body.get("model"), str):
            raise Refused(400, "'model' must be the path of an ONNX model on the server (or upload one as multipart)")
        settings = body.get("settings")
        return Submission(_name(body.get("name")), {} if settings is None else settings, model_path=body["model"],
                          model_field="model")
    if kind != "multipart/form-data":
        raise Refused(415, "send application/json or multipart/form-data")
    try:
        form = await request.form(max_files=MAX_JOB_FILES + 2, max_fields=100)  # the samples, a model, a settings file
    except HTTPException:
        raise
    except Exception as exc:  # a malformed multipart body
        raise Refused(400, f"malformed multipart body: {exc}") from None
    unknown = sorted(set(form.keys()) - _FIELDS)
    if unknown:
        raise Refused(400, f"unknown form field '{unknown[0]}' (known: {', '.join(sorted(_FIELDS))})")
    twice = sorted(k for k in set(form.keys()) - _REPEATABLE if len(form.getlist(k)) > 1)
    if twice:
        raise Refused(400, f"form field '{twice[0]}' given {len(form.getlist(twice[0]))} times; give it once")
    settings = _settings_field(form.get("settings"))
    model = form.get("model")
    model_path = form.get("model_path")
    if isinstance(model, str) or (model_path is not None and not isinstance(model_path, str)):
        raise Refused(400, "'model' must be an uploaded file and 'model_path' a text field")
    files = {k: [v for v in form.getlist(k) if not isinstance(v, str)] for k in _REPEATABLE}
    if any(isinstance(v, str) for k in _REPEATABLE for v in form.getlist(k)):
        raise Refused(400, "'inputs' and 'validate_inputs' must be uploaded files (server paths go in settings.inputs.files)")
    name = form.get("name")
    if name is not None and not isinstance(name, str):
        raise Refused(400, "'name' must be a text field")
    return Submission(_name(name), settings, model_path=model_path, model_upload=model, inputs=files["inputs"],
                      validate_inputs=files["validate_inputs"])


async def read_resubmission(request: Request) -> dict[str, Any]:
    """A POST /jobs/{id}/resubmit: JSON `{"settings": {...}, "name": ...}`, both optional (an empty body: none)."""
    raw = await request.body()
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if raw.strip() and kind != "application/json":
        raise Refused(415, "send application/json (or no body)")
    body = _json(raw, "the request body") if raw.strip() else {}
    if not isinstance(body, dict):
        raise Refused(400, "the request body must be a JSON object with 'settings' and 'name', both optional")
    unknown = sorted(set(body) - {"settings", "name"})
    if unknown:
        raise Refused(400, f"unknown field '{unknown[0]}' (known: settings, name)")
    return {"settings": body.get("settings"), "name": _name(body.get("name"))}


def _json(data: str | bytes, what: str) -> Any:
    """Parsed JSON, or a 400 naming `what` (not JSON, or nested beyond spec.MAX_JSON_DEPTH)."""
    try:
        return load_json(data, "settings")
    except SpecError as exc:
        raise Refused(400, exc.render(lambda _: what)) from None


def _settings_field(value: str | UploadFile | None) -> Any:
    """The multipart field `settings`: JSON text, or a file part holding it (`curl -F settings=@s.json`)."""
    if value is None:
        return {}
    if not isinstance(value, str):
        value.file.seek(0)
        raw = value.file.read(MAX_SETTINGS_BYTES + 1)
        if len(raw) > MAX_SETTINGS_BYTES:
            raise Refused(400, f"field 'settings': the file is larger than {MAX_SETTINGS_BYTES >> 20} MiB")
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(400, "field 'settings': the file is not UTF-8 JSON") from None
    return _json(value, "field 'settings'") if value.strip() else {}


def _name(v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or len(v) > 200:
        raise Refused(400, "'name' must be a string of at most 200 characters")
    return v


def safe_filename(name: str | None, fallback: str) -> str:
    """A plain file name from an uploaded one (directories, odd characters and dot-files removed)."""
    base = PurePosixPath((name or "").replace("\\", "/")).name
    base = re.sub(r"[^A-Za-z0-9._-]", "_", base).lstrip(".")[:120]
    return base or fallback


def save_upload(upload: UploadFile, dest_dir: Path, index: int, suffixes: tuple[str, ...], what: str) -> Path:
    """Store an upload as `dest_dir/<index>-<name>`; its suffix must be one of `suffixes`."""
    name = safe_filename(upload.filename, f"{what}{suffixes[0]}")
    if not name.lower().endswith(suffixes):
        raise Refused(400, f"{what}: '{upload.filename}' must end in {' or '.join(suffixes)}")
    dest = dest_dir / (f"{index:03d}-{name}" if index >= 0 else name)
    dest_dir.mkdir(parents=True, exist_ok=True)
    upload.file.seek(0)
    with open(dest, "wb") as f:
        shutil.copyfileobj(upload.file, f, 1 << 20)
    return dest


def artifact(run_dir: Path, name: str) -> Path:
    """The file `name` inside `run_dir`: refused (4xx) when absolute, with `..`, a hidden part or a
    symlink anywhere on the way, or when it resolves outside."""
    if not name or name.startswith("/") or "\\" in name or "\x00" in name:
        raise Refused(400, f"artifact name '{name}' must be relative to the job's run directory")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise Refused(400, f"artifact name '{name}' may not contain '.', '..' or empty parts")
    if any(p.startswith(".") for p in parts):
        raise Refused(404, f"no artifact '{name}'")
    p = run_dir
    for part in parts:
        p = p / part
        if p.is_symlink():
            raise Refused(403, f"artifact '{name}' is a symbolic link; not served")
    try:
        real = p.resolve(strict=True)
    except (OSError, RuntimeError):
        raise Refused(404, f"no artifact '{name}'") from None
    if not real.is_relative_to(run_dir.resolve()) or not real.is_file():
        raise Refused(404, f"no artifact '{name}'")
    return real


def list_artifacts(run_dir: Path) -> list[dict]:
    """Regular files in the run directory (no hidden files, no symlinks), with sizes (bytes, and in words)."""
    if not run_dir.is_dir():
        return []
    out = []
    for top, dirs, files in os.walk(run_dir):  # symlinked directories are not entered
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for f in files:
            p = Path(top) / f
            if f.startswith(".") or p.is_symlink() or not p.is_file():
                continue
            size = p.stat().st_size
            out.append({"name": p.relative_to(run_dir).as_posix(), "size": size, "size_text": fmt_bytes(size)})
    return sorted(out, key=lambda a: a["name"])
