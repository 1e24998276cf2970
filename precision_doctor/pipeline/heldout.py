"""Held-out samples: the answer is confirmed on samples the search did not see."""

from __future__ import annotations

from precision_doctor.data.inputs import (
    Sample,
    generate_samples,
    input_bounds,
    load_samples,
    parse_val_ranges,
    validate_samples,
)
from precision_doctor.data.references import check_count
from precision_doctor.data.workload import Workload
from precision_doctor.pipeline.heldout_policy import plan_held_out

HELD_OUT_SEED_OFFSET = 7919  # generated held-out samples use seed + this


def held_out_samples(work: Workload) -> list[Sample]:
    """Held-out samples, by the workload's InputSpec: from `validate_files`, split off the sample files
    as heldout_policy.plan_held_out says (a quarter, at least 2, spread over the list, from 4 files on;
    none below; `validation_split` overrides), or generated with another seed (`validation_split` times as
    many as the search samples, half by default). `work.samples` may shrink."""
    inputs = work.inputs
    split = inputs.validation_split
    if inputs.validate_files:
        held = load_samples(inputs.validate_files, input_bounds(work.model))
        validate_samples(work.model, held, inputs.allow_nonfinite)
        if work.references is not None:
            n = len(work.samples)
            check_count(inputs.reference_outputs, work.references, n + len(held),
                        "{inputs.files} and {inputs.validate_files}")
            work.references, work.held_references = work.references[:n], work.references[n:]
        return held
    if inputs.files:
        if work.references is not None:
            check_count(inputs.reference_outputs, work.references, len(work.samples), "{inputs.files}")
        plan = plan_held_out(len(work.samples), generated=False, split=split)
        held = [work.samples[i] for i in plan.held_out]
        work.samples = [work.samples[i] for i in plan.search]
        if work.references is not None:
            refs = work.references
            work.references, work.held_references = [refs[i] for i in plan.search], [refs[i] for i in plan.held_out]
        return held
    if split == 0:
        return []
    n = max(1, int(round(len(work.samples) * (split or 0.5))))
    return generate_samples(work.model, n, inputs.seed + HELD_OUT_SEED_OFFSET, parse_val_ranges(inputs.val_ranges))
