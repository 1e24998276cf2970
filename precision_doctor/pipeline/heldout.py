"""Held-out samples: the answer is confirmed on samples the search did not see."""

from __future__ import annotations

from precision_doctor.data.inputs import Sample, generate_samples, load_samples, parse_val_ranges, validate_samples
from precision_doctor.data.references import check_count
from precision_doctor.data.workload import Workload
from precision_doctor.errors import SpecError

HELD_OUT_SEED_OFFSET = 7919  # generated held-out samples use seed + this


def split_validation(samples: list[Sample], fraction: float) -> tuple[list[Sample], list[Sample]]:
    """Hold out the last `fraction` of the samples (at least one sample stays for the search)."""
    if not 0 <= fraction < 1:
        raise SpecError("inputs.validation_split", "{inputs.validation_split} must lie in [0, 1)")
    k = int(round(len(samples) * fraction))
    k = min(k, len(samples) - 1)
    return (samples[: len(samples) - k], samples[len(samples) - k :]) if k > 0 else (samples, [])


def held_out_samples(work: Workload) -> list[Sample]:
    """Held-out samples, by the workload's InputSpec: from `validate_files`, split off the sample files
    (`validation_split`, 0.25 by default), or generated with another seed (`validation_split` times as
    many as the search samples, half by default). `work.samples` may shrink."""
    inputs = work.inputs
    split = inputs.validation_split
    if inputs.validate_files:
        held = load_samples(inputs.validate_files)
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
        n_all = len(work.samples)
        work.samples, held = split_validation(work.samples, 0.25 if split is None else split)
        if work.references is not None:
            k = n_all - len(held)
            work.references, work.held_references = work.references[:k], work.references[k:]
        return held
    if split == 0:
        return []
    n = max(1, int(round(len(work.samples) * (split or 0.5))))
    return generate_samples(work.model, n, inputs.seed + HELD_OUT_SEED_OFFSET, parse_val_ranges(inputs.val_ranges))
