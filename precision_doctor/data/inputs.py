"""Feeds: loaded from .npz, polygraphy JSON (`--save-inputs` files) and HDF5, or generated (seeded)."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
from onnx import helper

from precision_doctor.errors import SpecError, UserError
from precision_doctor.graph.model import Model

Sample = dict[str, np.ndarray]
DEFAULT_DIM = 1  # polygraphy's value for dynamic dimensions
VAL_RANGES, INPUT_SHAPES = "inputs.val_ranges", "inputs.input_shapes"  # the settings parsed here


@dataclass(frozen=True)
class ModelInput:
    name: str
    dtype: np.dtype
    shape: tuple  # None for a dynamic dimension


def model_inputs(model: Model) -> dict[str, ModelInput]:
    specs = {}
    for vi in model.proto.graph.input:
        if vi.name in model.initializers:
            continue
        tt = vi.type.tensor_type
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None for d in tt.shape.dim)
        specs[vi.name] = ModelInput(vi.name, dtype, shape)
    return specs


def parse_named_list(text: str, setting: str) -> tuple[str | None, list[float]]:
    """`name:[a,b,...]` or `[a,b,...]` -> (name or None, values); SpecError names `setting`."""
    text = text.strip()
    name, sep, rest = text.rpartition(":[")
    value = "[" + rest if sep else text
    try:
        values = ast.literal_eval(value.strip())
        if not isinstance(values, (list, tuple)):
            raise ValueError
        return (name or None), [float(v) for v in values]
    except (ValueError, SyntaxError):
        raise SpecError(setting, f"{{{setting}}}: expected NAME:[a,b,...], got '{text}'") from None


def parse_val_ranges(items: Sequence[str]) -> dict[str | None, tuple[float, float]]:
    out: dict[str | None, tuple[float, float]] = {}
    for item in items:
        name, vals = parse_named_list(item, VAL_RANGES)
        if len(vals) != 2 or vals[0] > vals[1]:
            raise SpecError(VAL_RANGES, f"{{{VAL_RANGES}}}: expected [low,high] with low <= high, got '{item}'")
        out[name] = (vals[0], vals[1])
    return out


def parse_input_shapes(items: Sequence[str]) -> dict[str, list[int]]:
    out = {}
    for item in items:
        name, vals = parse_named_list(item, INPUT_SHAPES)
        if name is None:
            raise SpecError(INPUT_SHAPES, f"{{{INPUT_SHAPES}}} needs NAME:[dims], got '{item}'")
        if any(v < 0 or v != int(v) for v in vals):
            raise SpecError(INPUT_SHAPES, f"{{{INPUT_SHAPES}}} {name}: dimensions must be non-negative integers")
        out[name] = [int(v) for v in vals]
    return out


def generate_samples(
    model: Model,
    n: int,
    seed: int = 0,
    val_ranges: dict[str | None, tuple[float, float]] | None = None,
) -> list[Sample]:
    """`n` seeded samples: uniform in the value range ([0,1] by default), dynamic dims = 1."""
    if n < 1:
        raise SpecError("inputs.samples", "{inputs.samples} must be at least 1")
    specs = model_inputs(model)
    ranges = val_ranges or {}
    unknown = [k for k in ranges if k is not None and k not in specs]
    if unknown:
        raise SpecError(VAL_RANGES, f"{{{VAL_RANGES}}} names unknown input '{unknown[0]}'; inputs are: {', '.join(specs)}")
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(n):
        s = {}
        for name, spec in specs.items():
            shape = tuple(DEFAULT_DIM if d is None else d for d in spec.shape)
            lo, hi = ranges.get(name, ranges.get(None, (0.0, 1.0)))
            if spec.dtype == np.bool_:
                s[name] = rng.integers(0, 2, shape).astype(bool)
            elif np.issubdtype(spec.dtype, np.integer):
                s[name] = rng.integers(int(lo), int(hi) + 1, shape).astype(spec.dtype)
            else:
                s[name] = rng.uniform(lo, hi, shape).astype(spec.dtype)
        samples.append(s)
    return samples


def load_samples(paths: Sequence[str | Path]) -> list[Sample]:
    """Samples from files: .npz (one sample), polygraphy JSON (a list of samples), HDF5 (one sample)."""
    samples: list[Sample] = []
    for p in map(Path, paths):
        if not p.is_file():
            raise UserError(f"inputs file not found: {p}")
        suffix = p.suffix.lower()
        try:
            if suffix == ".npz":
                with np.load(p, allow_pickle=False) as z:
                    samples.append({k: z[k] for k in z.files})
            elif suffix == ".json":
                samples.extend(_load_polygraphy_json(p))
            elif suffix in (".h5", ".hdf5"):
                samples.append(_load_h5(p))
            else:
                raise UserError(f"inputs file {p}: unknown format (use .npz, polygraphy .json or .h5)")
        except UserError:
            raise
        except Exception as exc:
            raise UserError(f"cannot read inputs file {p}: {type(exc).__name__}: {str(exc)[:150]}") from exc
    return samples


def _load_polygraphy_json(path: Path) -> list[Sample]:
    from polygraphy.json import load_json

    data = load_json(str(path))
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise UserError(f"{path}: not a polygraphy inputs file (expected a list of feed dicts)")
    return [{k: np.asarray(v) for k, v in d.items()} for d in data]


def _load_h5(path: Path) -> Sample:
    out = {}
    with h5py.File(path, "r") as f:
        for key, ds in f.items():
            if isinstance(ds, h5py.Dataset):
                out[str(ds.attrs.get("onnx_name", key))] = ds[()]
    return out


def save_npz(path: Path, sample: Sample) -> None:
    np.savez(path, **sample)


def validate_samples(model: Model, samples: list[Sample], allow_nonfinite: bool = False) -> None:
    """Refuse samples that name unknown inputs, miss one, or have the wrong dtype, shape or NaN/Inf."""
    if not samples:
        raise UserError("no input samples")
    specs = model_inputs(model)
    for i, s in enumerate(samples):
        where = f"sample {i}"
        unknown = sorted(set(s) - set(specs))
        if unknown:
            raise UserError(f"{where}: unknown input '{unknown[0]}'; model inputs are: {', '.join(specs)}")
        missing = sorted(set(specs) - set(s))
        if missing:
            raise UserError(f"{where}: missing input '{missing[0]}'")
        for name, spec in specs.items():
            arr = s[name]
            if arr.dtype != spec.dtype:
                if np.can_cast(arr.dtype, spec.dtype, casting="same_kind") and arr.dtype.kind == spec.dtype.kind:
                    s[name] = arr = arr.astype(spec.dtype)
                else:
                    raise UserError(f"{where}: input '{name}' has dtype {arr.dtype}, the model expects {spec.dtype}")
            if len(arr.shape) != len(spec.shape) or any(
                d is not None and d != a for d, a in zip(spec.shape, arr.shape)
            ):
                shown = [("?" if d is None else d) for d in spec.shape]
                raise UserError(f"{where}: input '{name}' has shape {list(arr.shape)}, the model expects {shown}")
            if not allow_nonfinite and arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
                raise SpecError(
                    "inputs.allow_nonfinite",
                    f"{where}: input '{name}' contains NaN or Inf (pass {{inputs.allow_nonfinite}} to accept)",
                )
