"""A finished job run again (`POST /jobs/{id}/resubmit`, `precision-doctor resubmit ID`): a new job on the old one's
pinned files (hard links into its own directory: the daemon keeps what the job needs, nothing is uploaded again), with
the old settings and the changes given.

Where the old run can be continued (its run directory records its settings) and the changes touch its budget only
(`search.max_evaluations`, `search.time_budget`), the new job starts from a copy of the old run directory and resumes
from its checkpoint: the search goes on where it stopped, no evaluation repeated, and without the old budget unless one
is given (a new job: its budget is what it is given; `diagnose --resume` continues one run, with its recorded budget).
Other changes start the job over (the capture comes from the daemon's cache).

A job still queued or running is refused (409), and so is one whose files the retention removed (410: the message
gives the `submit` command that sends them again, with the files named as they were submitted)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from precision_doctor.data.loader_script import parse_script
from precision_doctor.errors import SpecError, UserError
from precision_doctor.results.report import ServiceJob
from precision_doctor.service.config import StateDir
from precision_doctor.service.engine import can_resume
from precision_doctor.service.jobs import check_settings
from precision_doctor.service.store import Job, Store, new_id
from precision_doctor.service.uploads import Refused
from precision_doctor.spec import RunSpec

BUDGET = ("search.max_evaluations", "search.time_budget")  # a resubmitted job's budget is what it is given
FILES = ("model", "inputs.files", "inputs.validate_files", "inputs.reference_outputs", "inputs.data_loader_script")


def flat_changes(settings: Any) -> dict[str, Any]:
    """The RunSpec JSON sections of a resubmission (`{"search": {"max_evaluations": 100}, "precision": "bf16"}`, every
    key optional) as {setting path: value}; Refused (422, naming it) for a file setting: the job's files are its own."""
    if settings is None:
        return {}
    if not isinstance(settings, dict):
        raise Refused(422, "settings must be a JSON object with sections inputs, tolerance, search, capture, backends",
                      setting="settings")
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    for path in flat:
        if path in FILES:
            raise Refused(422, f"{path}: a resubmitted job runs on the job's own files; to run it on other files, "
                          "submit them (precision-doctor submit)", setting=path)
    return flat


def resubmit_job(old: Job, settings: Any, name: str | None, state: StateDir, store: Store) -> tuple[Job, bool]:
    """Queue `old` again with `settings` (partial RunSpec JSON sections) changed; (the new job, whether it continues
    the old run). Refused (409, 410, 422) when it cannot be; nothing is left behind then."""
    from precision_doctor.batch.jobs import file_lock

    if not old.terminal:
        raise Refused(409, f"job {old.id} is still {old.state}: follow it (precision-doctor wait {old.id}) or cancel "
                      "it first")
    changes = flat_changes(settings)
    if old.files_removed:
        raise Refused(410, f"{old.files_removed} {bring_files(old, state)}")
    old_spec = RunSpec.from_json(old.spec)
    continues = can_resume(state.run_dir(old.id)) and set(changes) <= set(BUDGET)
    if continues:
        changes = {**{k: None for k in BUDGET}, **changes}
    try:
        merged = old_spec.with_settings(changes).to_json()
    except SpecError as exc:
        raise Refused(422, str(exc), setting=exc.setting) from None
    del merged["model"]
    check_settings(merged)
    job_id = new_id()
    try:
        with file_lock(state.job_dir(old.id) / "job.lock", 10.0) as held:  # the retention waits meanwhile
            if not held or not state.inputs_dir(old.id).is_dir():
                raise Refused(409, f"job {old.id}'s files are busy or gone; try again in a moment")
            _link_tree(state.inputs_dir(old.id), state.inputs_dir(job_id))
            if continues:
                shutil.copytree(state.run_dir(old.id), state.run_dir(job_id), symlinks=True)
            _copy_submitted(state, old.id, job_id)
        moved = _moved_paths(old_spec, state.inputs_dir(old.id), state.inputs_dir(job_id))
        spec = RunSpec.from_json(merged | {"model": old_spec.model}).with_settings(moved)
        return store.create(name or old.name, spec.to_json(), job_id=job_id), continues
    except BaseException:
        shutil.rmtree(state.job_dir(job_id), ignore_errors=True)
        raise


def bring_files(old: Job, state: StateDir) -> str:
    """What a user must send again to run a job whose files are gone: the `submit` command with its files as
    submitted."""
    from precision_doctor.render.commands import submit_command

    try:
        submitted = ServiceJob.from_json(json.loads(state.submitted(old.id).read_text(encoding="utf-8")))
    except (OSError, ValueError, UserError):  # a job of a daemon that did not write it
        submitted = None
    return ("Submit it again with your files, from the folder that holds them: "
            f"{submit_command(submitted, RunSpec.from_json(old.spec))}")


def _link_tree(src: Path, dest: Path) -> None:
    """`dest` as `src`'s files: hard links where the filesystem allows (the pinned files are never written), else
    copies."""
    for top, _, names in os.walk(src):
        where = dest / Path(top).relative_to(src)
        where.mkdir(parents=True, exist_ok=True)
        for n in names:
            try:
                os.link(Path(top) / n, where / n)
            except OSError:
                shutil.copy2(Path(top) / n, where / n)


def _moved_paths(spec: RunSpec, old_dir: Path, new_dir: Path) -> dict[str, Any]:
    """The file settings of `spec` (all inside the old job's `old_dir`) moved into `new_dir`."""

    def moved(path: str) -> str:
        rel = os.path.relpath(path, old_dir)
        if rel.startswith(".."):  # not one of the job's files: the worker refuses it (paths.check_pinned)
            return path
        return str(new_dir / rel)

    i = spec.inputs
    out: dict[str, Any] = {"model": moved(spec.model), "inputs.files": [moved(f) for f in i.files],
                           "inputs.validate_files": [moved(f) for f in i.validate_files]}
    if i.reference_outputs:
        out["inputs.reference_outputs"] = moved(i.reference_outputs)
    if i.data_loader_script:
        path, func = parse_script(i.data_loader_script)
        out["inputs.data_loader_script"] = f"{moved(str(path))}:{func}"
    return out


def _copy_submitted(state: StateDir, old_id: str, job_id: str) -> None:
    """The new job's submitted.json: the old one's files as the submitter named them, under the new id."""
    try:
        data = json.loads(state.submitted(old_id).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(data, dict):
        state.job_dir(job_id).mkdir(parents=True, exist_ok=True)
        state.submitted(job_id).write_text(json.dumps({**data, "id": job_id}), encoding="utf-8")
