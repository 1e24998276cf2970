"""A zoo's models and their recipes, as RunSpecs.

A zoo is a directory of `.onnx` files, each optionally with a recipe beside it (`<model>.json`,
`<model>.yaml` or `<model>.yml`), or a manifest file (JSON or YAML) that lists the models with the
same settings. A recipe (every key optional; unknown keys are refused):

    inputs:    {samples, seed, val_range: ["name:[lo,hi]", ...] or {name: [lo, hi]},
                input_shapes: ["name:[d0,...]", ...] or {name: [d0, ...]},
                files: [a.npz, data/, "calib/*.npz", ...] (files, directories, globs), validate_files: [...],
                data_loader_script: "loader.py[:FUNC]", max_samples, validation_split, allow_nonfinite,
                reference_outputs: polygraphy --save-outputs JSON of `files`}
    tolerance: {atol, rtol, check_error_stat, cosine_floor, margin,
                output_atol / output_rtol: {output name: value} or ["name:value", ...] (polygraphy's --atol NAME:V)}
    precision, target, backend, confirm_backend, emulation_rules, strategy, cost, augment, max_evaluations, time_budget
    about:     free-form notes (provenance, why the tolerance is fair); not read by the batch

Paths in a recipe are relative to the recipe (or the manifest). A manifest is `{"defaults": {...},
"models": [{"path": "m.onnx", "name": "m", ...recipe keys...}, ...]}` (or just the list).
The batch's own defaults (the command's options) are a RunSpec that a recipe overrides.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from precision_doctor.errors import SpecError, UserError
from precision_doctor.pipeline.spec_check import validate_spec
from precision_doctor.spec import RunSpec

RECIPE_SUFFIXES = (".json", ".yaml", ".yml")
MARKER = "batch.json"  # the batch directory's record of the batch
RESERVED_NAMES = {MARKER, "summary.csv", "summary.html", "summary.json"}  # no model directory takes these names

# Recipe keys and the RunSpec settings they set.
RECIPE_KEYS: dict[str, str] = {
    "inputs.samples": "inputs.samples",
    "inputs.seed": "inputs.seed",
    "inputs.val_range": "inputs.val_ranges",
    "inputs.input_shapes": "inputs.input_shapes",
    "inputs.files": "inputs.files",
    "inputs.data_loader_script": "inputs.data_loader_script",
    "inputs.max_samples": "inputs.max_samples",
    "inputs.validate_files": "inputs.validate_files",
    "inputs.validation_split": "inputs.validation_split",
    "inputs.allow_nonfinite": "inputs.allow_nonfinite",
    "inputs.reference_outputs": "inputs.reference_outputs",
    "tolerance.atol": "tolerance.atol",
    "tolerance.rtol": "tolerance.rtol",
    "tolerance.check_error_stat": "tolerance.check_error_stat",
    "tolerance.cosine_floor": "tolerance.cosine_floor",
    "tolerance.output_atol": "tolerance.output_atol",
    "tolerance.output_rtol": "tolerance.output_rtol",
    "tolerance.margin": "search.margin",
    "precision": "precision",
    "backend": "backends.backend",
    "confirm_backend": "backends.confirm_backend",
    "emulation_rules": "backends.rules",
    "target": "backends.target",
    "strategy": "search.strategy",
    "cost": "search.cost",
    "augment": "search.augment",
    "max_evaluations": "search.max_evaluations",
    "time_budget": "search.time_budget",
}
_SETTING_KEYS = {setting: key for key, setting in RECIPE_KEYS.items()}
_TOP_KEYS = {k for k in RECIPE_KEYS if "." not in k} | {"inputs", "tolerance", "about"}
_SECTION_KEYS = {s: {k.split(".", 1)[1] for k in RECIPE_KEYS if k.startswith(s + ".")} for s in ("inputs", "tolerance")}
# str() of any value
_STRINGIFIED = {"precision", "target", "backend", "emulation_rules", "strategy", "cost", "tolerance.check_error_stat"}


def recipe_key(setting: str) -> str:
    """The recipe key of a RunSpec setting (SpecError messages in batch rows are shown with these)."""
    return _SETTING_KEYS.get(setting, setting)


@dataclass
class ModelSpec:
    """One model of the zoo: its (unique, directory-safe) name, file, and RunSpec, or why its recipe is unusable."""

    name: str
    path: Path
    spec: RunSpec
    error: str | None = None


def _named_list(value: Any, what: str) -> tuple[str, ...]:
    """`["n:[..]", ...]`, one such string, or `{name: [..]}` (None for an unnamed entry) -> strings."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            if not isinstance(v, (list, tuple)):
                raise UserError(f"{what}: '{k}' must map to a list, got {v!r}")
            vals = ",".join(str(x) for x in v)
            out.append(f"[{vals}]" if k in (None, "", "*") else f"{k}:[{vals}]")
        return tuple(out)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise UserError(f"{what}: expected a list of 'name:[...]' strings or a mapping, got {value!r}")


def _per_output(value: Any, what: str) -> tuple[str, ...]:
    """`{name: value}` or `["name:value", ...]` -> "name:value" strings (checked as the tolerance is made)."""
    if isinstance(value, dict):
        return tuple(f"{k}:{v}" for k, v in value.items())
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise UserError(f"{what}: expected a mapping of output names to values or a list of 'name:value' strings, "
                    f"got {value!r}")


def _section(recipe: dict, key: str, where: str) -> dict:
    """A recipe's sub-mapping (empty when absent), with unknown keys refused."""
    value = recipe.get(key) or {}
    if not isinstance(value, dict):
        raise UserError(f"{where}: '{key}' must be a mapping")
    known = _SECTION_KEYS[key]
    bad = sorted(set(value) - known)
    if bad:
        raise UserError(f"{where}: unknown {key} key '{bad[0]}' (known: {', '.join(sorted(known))})")
    return value


def apply_recipe(base: RunSpec, recipe: dict, rel_to: Path, where: str) -> RunSpec:
    """`base` with the keys of `recipe` applied; UserError names the first bad key."""
    if not isinstance(recipe, dict):
        raise UserError(f"{where}: a recipe must be a mapping, got {type(recipe).__name__}")
    unknown = sorted(set(recipe) - _TOP_KEYS - {"path", "model", "name"})
    if unknown:
        raise UserError(f"{where}: unknown key '{unknown[0]}' (known: {', '.join(sorted(_TOP_KEYS))})")
    given: dict[str, Any] = {k: v for k, v in recipe.items() if k in RECIPE_KEYS}
    for section in ("inputs", "tolerance"):
        given.update({f"{section}.{k}": v for k, v in _section(recipe, section, where).items()})
    changes: dict[str, Any] = {}
    for key, value in given.items():
        if key in ("inputs.val_range", "inputs.input_shapes"):
            value = _named_list(value, f"{where}: {key}")
        elif key in ("tolerance.output_atol", "tolerance.output_rtol"):
            value = _per_output(value, f"{where}: {key}")
        elif key in ("inputs.files", "inputs.validate_files"):
            value = value or []
        elif key in _STRINGIFIED:
            value = str(value)
        changes[RECIPE_KEYS[key]] = value
    try:
        return validate_spec(base.with_settings(changes, base_dir=rel_to)).spec
    except SpecError as exc:
        raise UserError(f"{where}: {exc.render(recipe_key)}") from None


def read_recipe(path: Path) -> Any:
    """A JSON or YAML file's contents; UserError with a one-line reason."""
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() == ".json":
            return json.loads(text)
        import yaml

        return yaml.safe_load(text)
    except Exception as exc:  # json, yaml and OS errors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{path}: cannot read recipe: {first[:200]}") from exc


def discover(source: Path, defaults: RunSpec) -> list[ModelSpec]:
    """The models of a zoo directory or a manifest file, with their RunSpecs (`defaults` with the recipe
    applied). A bad recipe does not stop the others: its model carries the error and is reported as such."""
    source = Path(source)
    if not source.exists():
        raise UserError(f"zoo not found: {source}")
    specs = _from_manifest(source, defaults) if source.is_file() else _from_directory(source, defaults)
    if not specs:
        raise UserError(f"{source}: no models found (a directory of .onnx files, or a JSON/YAML manifest)")
    _unique_names(specs)
    return specs


def _from_directory(root: Path, defaults: RunSpec) -> list[ModelSpec]:
    specs = []
    for path in sorted(root.glob("*.onnx")):
        name = path.stem
        model = replace(defaults, model=str(path.resolve()))
        recipes = [path.with_suffix(s) for s in RECIPE_SUFFIXES if path.with_suffix(s).is_file()]
        try:
            if len(recipes) > 1:
                raise UserError(f"{name}: more than one recipe ({', '.join(r.name for r in recipes)}); keep one")
            spec = model
            if recipes:
                spec = apply_recipe(model, read_recipe(recipes[0]) or {}, root, recipes[0].name)
            specs.append(ModelSpec(name, path.resolve(), spec))
        except UserError as exc:
            specs.append(ModelSpec(name, path.resolve(), model, error=str(exc)))
    return specs


def _from_manifest(path: Path, defaults: RunSpec) -> list[ModelSpec]:
    if path.suffix.lower() not in RECIPE_SUFFIXES:
        raise UserError(f"{path}: a zoo is a directory of .onnx files or a .json/.yaml manifest")
    data = read_recipe(path)
    base = path.parent.resolve()
    if isinstance(data, dict):
        shared = data.get("defaults") or {}
        if shared:
            defaults = apply_recipe(defaults, shared, base, f"{path.name}: defaults")
        entries = data.get("models")
    else:
        entries = data
    if not isinstance(entries, list):
        raise UserError(f"{path}: a manifest lists its models under 'models' (a list)")
    specs = []
    for i, entry in enumerate(entries):
        if isinstance(entry, str):
            entry = {"path": entry}
        if not isinstance(entry, dict) or not (entry.get("path") or entry.get("model")):
            raise UserError(f"{path}: models[{i}] needs a 'path'")
        model_path = (base / str(entry.get("path") or entry.get("model"))).resolve()
        name = str(entry.get("name") or model_path.stem)
        model = replace(defaults, model=str(model_path))
        try:
            specs.append(ModelSpec(name, model_path, apply_recipe(model, entry, base, f"{path.name}: {name}")))
        except UserError as exc:
            specs.append(ModelSpec(name, model_path, model, error=str(exc)))
    return specs


def _unique_names(specs: list[ModelSpec]) -> None:
    """Directory-safe, unique names (they name the run directories)."""
    seen: set[str] = set(RESERVED_NAMES)
    for s in specs:
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", s.name).strip(".") or "model"
        name, k = base, 2
        while name.lower() in seen:
            name, k = f"{base}-{k}", k + 1
        seen.add(name.lower())
        s.name = name
