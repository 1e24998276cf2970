"""Perturbed copies in the search, and the probe after it: will the answer hold on the user's next inputs?

A minimal FP32 set sits at the edge of the tolerance on the samples it was searched on, and which output
elements are worst changes with every input (docs/BENCHMARKS.md, "Generalization"). So:

- `perturbed_copies`: the oracle checks `search.augment` perturbed copies of each search sample besides
  the sample itself (data/augment.py: 1% noise on continuous float inputs, integer inputs untouched), so
  the search cannot tune its answer to one rounding pattern. The copies are made here, where the oracle's
  samples are assembled, never captured; strategies see only the oracle.
- the probe: after the search, PROBE_COPIES fresh copies of each search sample (another seed, never
  searched) plus the held-out samples say how far the answer is from the tolerance on unseen inputs
  (`expected_headroom`, a typed part of report.json). When one of them fails, pipeline/diagnose.py
  searches once more with the failing ones included; if the probe still fails, the verdict says the
  answer is predicted not to hold on new inputs.
"""

from __future__ import annotations

from collections.abc import Callable

from precision_doctor.data.augment import Augment, augment, perturbable
from precision_doctor.data.inputs import Sample
from precision_doctor.measure.headroom import SampleShare
from precision_doctor.results.report import ExpectedHeadroom, Validation

NOISE = 0.01  # noise std, as a share of each input's own std in that sample
SEARCH_SEED = 0  # the oracle's copies
PROBE_SEED = 1  # the probe's copies: never the oracle's
PROBE_COPIES = 4  # fresh copies per search sample in the probe (with search.augment > 0)


def perturbed_copies(samples: list[Sample], copies: int, seed: int,
                     reference: Callable[[Sample], dict]) -> tuple[list[Sample], list[dict]]:
    """`copies` perturbed copies of each sample (sample 0's first) and their FP32 reference outputs
    (`reference`); none when `copies` is 0 or no input is a continuous float (all integer, masks)."""
    ranges = perturbable(samples) if copies and samples else {}
    if not ranges:
        return [], []
    out = augment(samples, Augment(copies, NOISE, seed), ranges)
    return out, [reference(s) for s in out]


def expected_headroom(*, searched: int, search_copies: int, share_searched: float | None,
                      probe: list[SampleShare], validation: Validation | None, held_out_unseen: bool,
                      held_out_from_user: bool, researched: bool, backend: str | None = None) -> ExpectedHeadroom:
    """report.json's figures: the answer's shares on the probe's copies and (while the search has not
    seen them, `held_out_unseen`) on the held-out samples, and whether it is predicted to hold."""
    shares = [p.share for p in probe]
    failing_held = 0
    if validation is not None and held_out_unseen:
        shares += [o.tol_used for o in validation.outputs.values() if o.tol_used is not None]
        failing_held = len(validation.failing_samples)
    held = validation.samples if validation is not None else 0
    unseen = max(shares, default=None)
    failing_copies = sum(not p.passed for p in probe)
    return ExpectedHeadroom(
        searched=searched, search_copies=search_copies, perturbed_copies=len(probe), held_out=held,
        held_out_from_user=held_out_from_user, share_searched=share_searched, share_unseen=unseen,
        headroom=None if unseen is None else 1.0 - unseen, failing_copies=failing_copies,
        failing_held_out=failing_held, researched=researched,
        holds=failing_copies == 0 and (failing_held == 0 if held_out_unseen else True), backend=backend,
    )
