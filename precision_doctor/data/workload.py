"""A model and its samples, ready to run: what `compare`, `diagnose` and `batch` start from."""

from __future__ import annotations

from dataclasses import dataclass, field

from precision_doctor.data.inputs import (
    Sample,
    generate_samples,
    input_bounds,
    load_samples,
    parse_input_shapes,
    parse_val_ranges,
    validate_samples,
)
from precision_doctor.data.references import Outputs, load_reference_outputs
from precision_doctor.errors import UserError
from precision_doctor.graph.model import Model, load_model
from precision_doctor.spec import InputSpec, RunSpec


@dataclass
class Workload:
    """The loaded model, its search samples, and how the samples were obtained. `references` are the FP32
    outputs of `inputs.reference_outputs` (None: ONNX Runtime computes them), one per sample of the files;
    once held-out samples are split off (`pipeline.heldout`), `held_references` pairs with those."""

    model: Model
    samples: list[Sample]
    inputs: InputSpec = field(default_factory=InputSpec)
    references: list[Outputs] | None = None
    held_references: list[Outputs] | None = None


def load_workload(spec: RunSpec) -> Workload:
    """Load and validate the spec's model and samples; raises UserError with a one-line reason."""
    opts = spec.inputs
    shapes = parse_input_shapes(opts.input_shapes)
    model = load_model(spec.model, input_shapes=shapes or None)
    if not any(n.is_candidate for n in model.nodes):
        raise UserError(f"{spec.model}: the model has no floating-point tensors to run in low precision")
    samples = load_samples(opts.files, input_bounds(model)) if opts.files else generate_samples(
        model, opts.samples, opts.seed, parse_val_ranges(opts.val_ranges)
    )
    validate_samples(model, samples, opts.allow_nonfinite)
    refs = load_reference_outputs(opts.reference_outputs, model) if opts.reference_outputs else None
    return Workload(model, samples, opts, refs)
