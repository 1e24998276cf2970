"""A model and its samples, ready to run: what `compare`, `diagnose` and `batch` start from."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from precision_doctor.data.inputs import (
    Sample,
    generate_samples,
    load_samples,
    parse_input_shapes,
    parse_val_ranges,
    validate_samples,
)
from precision_doctor.errors import UserError
from precision_doctor.graph.model import Model, load_model


@dataclass
class InputOptions:
    """How to obtain samples: files, or generated ones."""

    files: list[str] = field(default_factory=list)
    samples: int = 4
    seed: int = 0
    val_ranges: list[str] = field(default_factory=list)
    input_shapes: list[str] = field(default_factory=list)
    allow_nonfinite: bool = False

    def describe(self) -> dict:
        if self.files:
            return {"files": [str(f) for f in self.files]}
        return {"generated": self.samples, "seed": self.seed, "val_ranges": self.val_ranges}


@dataclass
class Workload:
    model: Model
    samples: list[Sample]
    inputs: InputOptions


def load_workload(model_path: str | Path, opts: InputOptions) -> Workload:
    """Load and validate the model and its samples; raises UserError with a one-line reason."""
    shapes = parse_input_shapes(opts.input_shapes)
    model = load_model(model_path, input_shapes=shapes or None)
    if not any(n.is_candidate for n in model.nodes):
        raise UserError(f"{model_path}: the model has no floating-point tensors to run in low precision")
    samples = load_samples(opts.files) if opts.files else generate_samples(
        model, opts.samples, opts.seed, parse_val_ranges(opts.val_ranges)
    )
    validate_samples(model, samples, opts.allow_nonfinite)
    return Workload(model, samples, opts)
