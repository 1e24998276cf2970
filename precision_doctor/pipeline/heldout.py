"""Held-out samples: the answer is confirmed on samples the search did not see."""

from __future__ import annotations

from precision_doctor.data.inputs import first_of_each, generate_samples, load_samples, validate_samples
from precision_doctor.data.references import check_count
from precision_doctor.data.samples import SampleSet
from precision_doctor.data.workload import Workload
from precision_doctor.errors import SpecError
from precision_doctor.pipeline.heldout_policy import plan_held_out
from precision_doctor.results.report import HeldOutChoice
from precision_doctor.words import counted, repeat_words

HELD_OUT_SEED_OFFSET = 7919  # generated held-out samples use seed + this


def held_out_samples(work: Workload) -> SampleSet:
    """Held-out samples, by the workload's InputSpec: from `validate_files`, split off the sample files
    as heldout_policy.plan_held_out says (a fifth, at least 2, at least 10 where that is at most a quarter,
    spread over the list, from 4 files on; none below; `validation_split` overrides), or generated with another
    seed (`validation_split` times as many as the search samples, half by default). `work.samples` may shrink;
    `work.held` is set."""
    held = _held_out(work)
    work.held = held
    return held


def _held_out(work: Workload) -> SampleSet:
    inputs = work.inputs
    split = inputs.validation_split
    if inputs.validate_files:
        held = load_samples(inputs.validate_files, work.bounds, model=work.model, setting="inputs.validate_files")
        digests = validate_samples(work.model, held, inputs.allow_nonfinite)
        if work.references is not None:
            n = len(work.samples)
            check_count(inputs.reference_outputs, work.references, n + len(held),
                        "{inputs.files} and {inputs.validate_files}")
            work.references, work.held_references = work.references[:n], work.references[n:]
        _unseen(work, held, digests)
        once, _ = first_of_each(digests)
        if len(once) < len(held):  # a held-out sample given twice would count twice in the bound
            work.held_repeated = len(held) - len(once)
            held = held.subset(once)
            if work.held_references is not None:
                work.held_references = [work.held_references[i] for i in once]
        return held
    if inputs.files or inputs.data_loader_script:
        if work.references is not None:
            check_count(inputs.reference_outputs, work.references, len(work.samples), "{inputs.files}")
        plan = plan_held_out(len(work.samples), generated=False, split=split)
        held = work.samples.subset(plan.held_out)
        work.samples = work.samples.subset(plan.search)
        if work.digests:
            work.digests = [work.digests[i] for i in plan.search]
        if work.references is not None:
            refs = work.references
            work.references, work.held_references = [refs[i] for i in plan.search], [refs[i] for i in plan.held_out]
        return held
    if split == 0:
        return SampleSet.of([])
    n = max(1, int(round(len(work.samples) * (split or 0.5))))
    generated = generate_samples(work.model, n, inputs.seed + HELD_OUT_SEED_OFFSET, work.values.val_ranges)
    return SampleSet.of(generated, "held-out sample")


def _unseen(work: Workload, held: SampleSet, digests: list[str]) -> None:
    """Refuse --validate-inputs samples that are search samples too (the same contents): the search saw them, so they
    would validate nothing."""
    search = {d: i for i, d in enumerate(work.digests)}
    seen = [(i, search[d]) for i, d in enumerate(digests) if d in search]
    if seen:
        i, j = seen[0]
        raise SpecError("inputs.validate_files", (
            f"{{inputs.validate_files}}: {len(seen)} of its {counted(len(held), 'sample')} {'is' if len(seen) == 1 else 'are'} "
            f"also among the search samples ({repeat_words(held.label(i), work.samples.label(j))}): held-out samples "
            "must be ones the search does not see"))


def held_out_choice(work: Workload, held: SampleSet) -> HeldOutChoice:
    """What `held_out_samples` chose and why, for the report (after it split `held` off `work.samples`)."""
    inputs = work.inputs
    read = bool(inputs.files or inputs.data_loader_script)
    if inputs.validate_files:
        plan = plan_held_out(len(work.samples), generated=False, n_validate=len(held))
    else:
        n = len(work.samples) + len(held) if read else len(work.samples)
        plan = plan_held_out(n, generated=not read, split=inputs.validation_split)
    return HeldOutChoice(plan.source, len(held), plan.reason)
