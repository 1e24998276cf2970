"""Feeds: loaded from .npz, polygraphy JSON (`--save-inputs` files) and HDF5, or generated (seeded)."""

from __future__ import annotations

import ast
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from onnx import helper

from precision_doctor.data.arrayfiles import Bounds, unknown_input
from precision_doctor.data.input_spec import MAX_ELEMENTS, InputSpec
from precision_doctor.data.input_spec import MAX_ELEMENTS_SHOWN as MAX_SHOWN
from precision_doctor.data.samples import FileSample, Sample, SampleSet
from precision_doctor.data.sources import expand_inputs, file_entries
from precision_doctor.errors import SpecError, UserError
from precision_doctor.graph.model import Model, declared_dims

__all__ = ["FileSample", "Sample", "SampleSet"]  # where the rest of the code has always found them

DEFAULT_DIM = 1  # polygraphy's value for dynamic dimensions
VAL_RANGES, INPUT_SHAPES = "inputs.val_ranges", "inputs.input_shapes"  # the settings parsed here


def sample_name(sample: Sample, index: int) -> str:
    """How messages name a sample: its file, else its position."""
    return getattr(sample, "source", None) or f"sample {index}"


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
        shape = declared_dims(tt.shape)
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
        if any(not np.isfinite(v) or v < 1 or v != int(v) for v in vals):
            raise SpecError(INPUT_SHAPES, f"{{{INPUT_SHAPES}}} {item.strip()}: every dimension must be a positive integer")
        dims = [int(v) for v in vals]
        if math.prod(dims) > MAX_ELEMENTS:
            raise SpecError(INPUT_SHAPES, f"{{{INPUT_SHAPES}}} {item.strip()}: {math.prod(dims):,} elements, more than "
                            f"the limit of {MAX_SHOWN} for one input")
        out[name] = dims
    return out


@dataclass(frozen=True)
class InputValues:
    """What the settings strings of a RunSpec's `inputs` section mean, parsed once where the settings are checked
    (pipeline/spec_check.py): the value range of generated samples by input (None: every input) and the shapes of
    dynamic inputs. What `load_workload` and the held-out samples take."""

    val_ranges: dict[str | None, tuple[float, float]] = field(default_factory=dict)
    input_shapes: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def parse(cls, inputs: InputSpec) -> InputValues:
        """`inputs.val_ranges` and `inputs.input_shapes` parsed; SpecError naming the setting."""
        return cls(parse_val_ranges(inputs.val_ranges), parse_input_shapes(inputs.input_shapes))


def generate_samples(
    model: Model,
    n: int,
    seed: int = 0,
    val_ranges: dict[str | None, tuple[float, float]] | None = None,
) -> list[Sample]:
    """`n` seeded samples: uniform in the value range ([0,1] by default), dynamic dims = 1."""
    if n < 1:
        raise SpecError("inputs.samples", "{inputs.samples} must be at least 1")
    if seed < 0:
        raise SpecError("inputs.seed", f"{{inputs.seed}} must be a non-negative integer, got {seed}")
    specs = model_inputs(model)
    ranges = val_ranges or {}
    unknown = [k for k in ranges if k is not None and k not in specs]
    if unknown:
        raise SpecError(VAL_RANGES, f"{{{VAL_RANGES}}} names unknown input '{unknown[0]}'; inputs are: {', '.join(specs)}")
    for name, spec in specs.items():
        _check_generable(spec, ranges.get(name, ranges.get(None, (0.0, 1.0))))
        size = math.prod(DEFAULT_DIM if d is None else d for d in spec.shape)
        if size > MAX_ELEMENTS:
            raise UserError(f"input '{name}' of the model has {size:,} elements (shape {list(spec.shape)}), more than "
                            f"the limit of {MAX_SHOWN} for one input: samples this large cannot be generated")
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


def _check_generable(spec: ModelInput, value_range: tuple[float, float]) -> None:
    """Refuse inputs whose values cannot be generated: non-numeric types, ranges the type cannot hold."""
    dt = spec.dtype
    if dt.kind in "OSUc":
        raise SpecError("inputs.files", f"input '{spec.name}' has type {dt}: its values cannot be generated; "
                        "give samples with {inputs.files}")
    if dt.kind not in "iuf":
        return  # bool; ml_dtypes formats are rounded from float32 values
    lo, hi = value_range
    info = np.finfo(dt) if dt.kind == "f" else np.iinfo(dt)
    low, high = float(info.min), float(info.max)
    if not (low <= lo and hi <= high):
        raise SpecError(VAL_RANGES, f"{{{VAL_RANGES}}} {spec.name}:[{lo:g},{hi:g}] does not fit input '{spec.name}' "
                        f"({dt}: {low:g} to {high:g})")


def input_bounds(model: Model) -> Bounds:
    """How large each sample array may be and of which kind, by the model's inputs (a static input's element
    count; dynamic dimensions: `input_spec.MAX_ELEMENTS`; its type's kind), known before a file is read; with a
    fresh budget of the run's samples and bytes (one Bounds per run: its search and held-out files share it)."""
    specs = model_inputs(model)
    return Bounds({name: None if any(d is None for d in spec.shape) else math.prod(spec.shape)
                   for name, spec in specs.items()}, {name: spec.dtype for name, spec in specs.items()})


def load_samples(paths: Sequence[str | Path], bounds: Bounds | None = None, model: Model | None = None,
                 setting: str = "inputs.files") -> SampleSet:
    """The samples of `paths` (files, directories, globs: data/sources.py), found from the files' headers and
    loaded on demand, each array checked against `bounds` before it is read (default `input_bounds(model)`;
    `data/arrayfiles.py`; a run passes its own, whose budget counts every file it reads). With `model`,
    multi-sample .npz/.npy files are recognised by the model's input ranks and each sample is cast to the model's
    dtypes where numpy casts within a kind (float64 -> float32). An unreadable file is a UserError naming it and
    what it holds (`setting`: the setting `paths` came from)."""
    if bounds is None:
        bounds = input_bounds(model) if model is not None else Bounds()
    inputs = model_inputs(model) if model is not None else None
    entries = file_entries(expand_inputs(paths, setting), bounds, {n: s.shape for n, s in inputs.items()} if inputs else None)
    return SampleSet(entries, conform_to(inputs) if inputs else None)


def conform_to(inputs: dict[str, ModelInput]):
    """A sample's arrays cast to the model's dtypes where numpy casts within one kind (float64 -> float32);
    anything else is left for `validate_samples` to refuse."""

    def conform(sample) -> dict[str, np.ndarray]:
        out = dict(sample)
        for name, arr in out.items():
            spec = inputs.get(name)
            if spec is not None and arr.dtype != spec.dtype and arr.dtype.kind == spec.dtype.kind and \
                    np.can_cast(arr.dtype, spec.dtype, casting="same_kind"):
                out[name] = arr.astype(spec.dtype)
        return out

    return conform


def sample_digest(sample: Sample) -> str:
    """A digest of a sample's contents (each input's name, dtype, shape and bytes): equal samples, equal digests."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(sample):
        arr = np.ascontiguousarray(sample[name])
        h.update(f"{name}\0{arr.dtype.str}\0{arr.shape}\0".encode())
        h.update(repr(arr.tolist()).encode() if arr.dtype.kind == "O" else np.atleast_1d(arr).view(np.uint8))
    return h.hexdigest()


def first_of_each(digests: Sequence[str]) -> tuple[list[int], list[tuple[int, int]]]:
    """The index of each digest's first sample, in order, and each later sample that repeats one (with the index it
    repeats)."""
    first: dict[str, int] = {}
    repeats = []
    for i, d in enumerate(digests):
        if d in first:
            repeats.append((i, first[d]))
        else:
            first[d] = i
    return list(first.values()), repeats


def validate_samples(model: Model, samples: Sequence[Sample], allow_nonfinite: bool = False) -> list[str]:
    """Refuse samples that name unknown inputs, miss one, or have the wrong dtype, shape or NaN/Inf. Each sample
    is loaded once (a SampleSet: one at a time, already cast by its `conform`); a list's samples are cast in place
    where numpy casts within a kind. Returns each sample's `sample_digest`, read in the same pass."""
    if not len(samples):
        raise UserError("no input samples")
    specs = model_inputs(model)
    digests = []
    for i in range(len(samples)):
        s = samples[i]
        where = samples.label(i) if isinstance(samples, SampleSet) else sample_name(s, i)
        unknown = sorted(set(s) - set(specs))
        if unknown:
            raise UserError(unknown_input(where, unknown[0], list(specs)))
        missing = sorted(set(specs) - set(s))
        if missing:
            raise UserError(f"{where}: missing input '{missing[0]}'")
        for name, spec in specs.items():
            arr = s[name]
            if arr.dtype != spec.dtype:
                if np.can_cast(arr.dtype, spec.dtype, casting="same_kind") and arr.dtype.kind == spec.dtype.kind \
                        and not isinstance(samples, SampleSet):
                    s[name] = arr = arr.astype(spec.dtype)
                else:
                    raise UserError(f"{where}: input '{name}' has dtype {arr.dtype}, the model expects {spec.dtype}")
            if len(arr.shape) != len(spec.shape) or any(
                d is not None and d != a for d, a in zip(spec.shape, arr.shape)
            ):
                shown = [("?" if d is None else d) for d in spec.shape]
                raise UserError(f"{where}: input '{name}' has shape {list(arr.shape)}, the model expects {shown}")
            if arr.size == 0:
                raise UserError(f"{where}: input '{name}' is empty (shape {list(arr.shape)}); every dimension must be >= 1")
            if not allow_nonfinite and arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
                raise SpecError(
                    "inputs.allow_nonfinite",
                    f"{where}: input '{name}' contains NaN or Inf (pass {{inputs.allow_nonfinite}} to accept)",
                )
        digests.append(sample_digest(s))
    return digests
