"""run_settings.json: a run's settings, recorded when it starts, so that `resume` continues with them and
refuses a run directory made with other settings (its memoized verdicts would not hold).

It holds what decides the checkpointed verdicts (model hash, precision, backends, tolerance, margin, the
a hash of the samples and of the reference outputs, how the counterexample-guided search picks its samples)
and the whole RunSpec (`spec`, paths made absolute): a front end resumes a run without repeating its flags
(`recorded_spec`) and, when they differ, shows the command that continues it (`SettingsDiffer.recorded`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from precision_doctor.data.augment import recipe
from precision_doctor.data.inputs import Sample
from precision_doctor.data.loader_script import parse_script
from precision_doctor.data.samples import SampleSet
from precision_doctor.data.workload import Workload
from precision_doctor.errors import SpecError, UserError
from precision_doctor.graph.model import Model
from precision_doctor.jsonio import jsonable, read_json, write_json
from precision_doctor.runfiles import RunDir
from precision_doctor.search.cegis import COUNTEREXAMPLES, MAX_ROUNDS, START
from precision_doctor.spec import RunSpec, file_sha256

RUN_SETTINGS = "run_settings.json"
SHOWN_CHANGES = 5  # changed input files named in a refusal
# How the counterexample-guided search picks its samples: a resumed run's checkpointed verdicts are of those.
LOOP = {"start": START, "counterexamples": COUNTEREXAMPLES, "rounds": MAX_ROUNDS}
VERDICT_KEYS = ("model_hash", "precision", "backend", "tolerance", "margin", "augment", "copies", "confirm_backend",
                "rules", "target", "samples", "validation_samples", "samples_hash", "reference_hash", "search_loop")
# What every version of the file recorded, with its type: a file without one of them was not written by a run.
RECORDED_ALWAYS = {"model_hash": str, "precision": str, "backend": str, "tolerance": dict, "margin": (int, float),
                   "confirm_backend": (str, type(None)), "samples": int, "validation_samples": int}


class SettingsDiffer(SpecError):
    """`resume` of a run made with other settings; `recorded` is the RunSpec it was made with (None for a
    run of an older version, which recorded only the verdict settings); `other_model`: it was made on another
    model (the run continues with `recorded.model`)."""

    def __init__(self, out_dir: Path, shown: str, recorded: RunSpec | None, other_model: bool = False):
        self.out_dir, self.recorded, self.other_model = Path(out_dir), recorded, other_model
        super().__init__("resume", f"{{resume}}: {out_dir} was run with other settings ({shown}); continue it with "
                         "its own settings, or choose another {out_dir}")


def run_settings(work: Workload, spec: RunSpec, validation: Sequence[Sample],
                 references: Sequence[dict] | None = None) -> dict:
    """What decides the verdicts in the checkpoints (a resumed run must have the same), the files the samples
    were read from with their SHA-256 (`input_files`: a resume names those that changed), and the RunSpec."""
    return jsonable({
        "input_files": input_files(work, validation),
        "model_hash": work.model.model_hash, "precision": spec.precision, "backend": spec.backends.backend,
        "tolerance": spec.tolerance.to_dict(), "margin": spec.search.margin,
        "augment": spec.search.augment, "copies": recipe(work.samples) if spec.search.augment else None,
        "confirm_backend": spec.backends.confirm_backend, "rules": spec.backends.emulation_rules,
        "target": spec.backends.target,
        "samples": len(work.samples), "validation_samples": len(validation),
        "samples_hash": samples_hash(work.samples + validation),
        "reference_hash": samples_hash(references) if references else None,
        "search_loop": LOOP,
        "spec": RunSpec.from_json(spec.to_json(), base_dir=Path.cwd()).to_json(),
    })


def input_files(work: Workload, validation: Sequence[Sample]) -> list[dict]:
    """Every file the samples came from (directories and globs expanded; a data loader script itself) with its
    SHA-256, in order."""
    files = [*work.samples.files(), *(validation.files() if isinstance(validation, SampleSet) else [])]
    if work.inputs.data_loader_script:
        files.insert(0, parse_script(work.inputs.data_loader_script)[0])
    return [{"path": str(Path(f).resolve()), "sha256": file_sha256(Path(f))} for f in dict.fromkeys(files)]


def changed_files(old: list[dict], new: list[dict]) -> list[str]:
    """What differs between two `input_files` records, in words ("x.npz added", "y.npz changed")."""
    before, after = {f["path"]: f.get("sha256") for f in old}, {f["path"]: f.get("sha256") for f in new}
    out = [f"{p} added" for p in after if p not in before]
    out += [f"{p} removed" for p in before if p not in after]
    out += [f"{p} changed" for p in after if p in before and before[p] != after[p]]
    return out


def _same_sources(old: dict, new: dict) -> bool:
    """Whether two records name the same inputs (files, directories, globs, loader script, held-out files) and
    both list the files found: then what changed is the files, not the settings."""
    def sources(d: dict) -> list | None:
        spec = d.get("spec")
        inputs = spec.get("inputs") if isinstance(spec, dict) else None
        if not isinstance(inputs, dict) or not isinstance(d.get("input_files"), list):
            return None
        return [inputs.get(k) for k in ("files", "data_loader_script", "validate_files")]

    return sources(old) is not None and sources(old) == sources(new)


def samples_hash(samples: Sequence[Sample] | Sequence[dict]) -> str:
    h = hashlib.sha256()
    for i in range(len(samples)):
        s = samples[i]
        for name in sorted(s):
            a = np.ascontiguousarray(s[name])
            h.update(f"{name}:{a.dtype}:{a.shape};".encode())
            h.update(a.tobytes())
    return h.hexdigest()[:16]


def recorded_spec(out_dir: Path) -> RunSpec | None:
    """The RunSpec a run directory was made with; None when it records none (no run, an older version).
    A settings file that cannot be read is refused (SpecError naming it): a resume never falls back to
    defaults over a run made with other settings."""
    path = Path(out_dir) / RUN_SETTINGS
    if not path.exists():
        return None
    data = _recorded(path)
    if "spec" not in data:
        return None
    try:
        return RunSpec.from_json(data["spec"])
    except (UserError, ValueError, KeyError, TypeError, AttributeError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:150]
        raise _unreadable(path, f"holds a 'spec' that cannot be read ({first})") from None


def _unreadable(path: Path, why: str) -> SpecError:
    return SpecError("resume", f"{{resume}}: {path} {why}, so the run's settings are unknown; start over with "
                     "{force} instead of {resume}, or choose another {out_dir}")


def _recorded(path: Path) -> dict:
    """run_settings.json's contents, checked for what every version recorded (`RECORDED_ALWAYS`)."""
    if not path.is_file():
        raise _unreadable(path, "is not a file")
    try:
        data = read_json(path)
    except UserError as exc:
        raise _unreadable(path, f"is not valid JSON ({str(exc).split('(', 1)[-1].rstrip(')')})") from None
    except RecursionError:
        raise _unreadable(path, "is not valid JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise _unreadable(path, "is not a JSON object")
    for key, kind in RECORDED_ALWAYS.items():
        if key not in data:
            raise _unreadable(path, f"lacks '{key}'")
        if not isinstance(data[key], kind) or isinstance(data[key], bool):
            raise _unreadable(path, f"has a '{key}' of the wrong type ({data[key]!r:.40})")
    return data


def check_resumed_model(out_dir: Path, model: Model) -> None:
    """Refuse to resume a run made on another model (SettingsDiffer, with the command that continues it) as soon as
    the model is loaded: before its samples are read against it, which would fail on the wrong cause (an input
    name the other model does not have)."""
    path = Path(out_dir) / RUN_SETTINGS
    if not path.exists():
        return
    old = _recorded(path)["model_hash"]
    if old != model.model_hash:
        recorded = recorded_spec(out_dir)
        then = f"{recorded.model} " if recorded is not None else ""
        raise SettingsDiffer(out_dir, f"model {then}then (hash {old[:12]}), {model.path or '?'} now (hash "
                             f"{model.model_hash[:12]}): another model", recorded, other_model=True)


def _changed(key: str, then, now) -> str:
    """A setting that differs, in words: only the entries that differ where it is a mapping (a tolerance's atol)."""
    if isinstance(then, dict) and isinstance(now, dict):
        return ", ".join(_changed(f"{key}.{k}", then.get(k), now.get(k))
                         for k in dict.fromkeys([*then, *now]) if then.get(k) != now.get(k))
    return f"{key} {then!r} then, {now!r} now"


def check_run_settings(run: RunDir, settings: dict, resume: bool) -> None:
    """Record the settings of a run; refuse to resume one made with other settings (SettingsDiffer). Runs
    from before this file existed resume unchecked; keys an older version did not record are not compared,
    but for `copies` (how perturbed copies are made), which is "noise" where it recorded `augment`."""
    out_dir = run.root
    path = out_dir / RUN_SETTINGS
    if resume and path.exists():
        old = _recorded(path)
        if _same_sources(old, settings) and (changed := changed_files(old["input_files"], settings["input_files"])):
            shown = ", ".join(changed[:SHOWN_CHANGES]) + (f" and {len(changed) - SHOWN_CHANGES} more"
                                                          if len(changed) > SHOWN_CHANGES else "")
            raise SpecError("resume", f"{{resume}}: the input files of {out_dir} changed since the run started "
                            f"({shown}); restore them to continue, or start over with {{force}} instead of {{resume}}")
        if "augment" in old and "copies" not in old:  # recorded before image copies changed: its copies had noise only
            old["copies"] = "noise" if old["augment"] else None
        diff = [k for k in VERDICT_KEYS if k in old and old.get(k) != settings.get(k)]
        if diff:
            shown = ", ".join(_changed(k, old.get(k), settings.get(k)) for k in diff)
            raise SettingsDiffer(out_dir, shown, recorded_spec(out_dir))
    write_json(path, settings, writer=run)
