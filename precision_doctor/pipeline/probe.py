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
from dataclasses import dataclass, field

from precision_doctor.backends.base import Backend
from precision_doctor.control import PhaseEvent, ProgressSink, StopToken, notify
from precision_doctor.data.augment import Augment, augment, perturbable
from precision_doctor.data.inputs import Sample
from precision_doctor.measure.headroom import SampleShare, sample_shares
from precision_doctor.pipeline.strategy import run_strategy, user_share
from precision_doctor.pipeline.validation import check_on_samples
from precision_doctor.results.report import ExpectedHeadroom, Validation
from precision_doctor.search import Oracle
from precision_doctor.search.oracle import Verdict
from precision_doctor.search.space import SearchSpace
from precision_doctor.spec import RunSpec

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


@dataclass
class Unseen:
    """What the search does not see: the held-out samples and the probe's fresh copies, with references."""

    held_out: list[Sample]
    held_out_refs: list[dict]
    copies: list[Sample]
    copy_refs: list[dict]


@dataclass
class UnseenCheck:
    """The search's answer after the check on unseen samples (and the one second search a failure sends
    them into). `ran`: there was something to check; `held_out_unseen`: no search has seen the held-out
    samples (a second search after one of them failed has)."""

    status: str
    reason: str | None
    found: frozenset[str] | None
    validation: Validation | None = None
    shares: list[SampleShare] = field(default_factory=list)
    researched: bool = False
    held_out_unseen: bool = True
    ran: bool = False


def check_unseen(backend: Backend, oracle: Oracle, space: SearchSpace, spec: RunSpec, status: str, reason: str | None,
                 found: frozenset[str] | None, unseen: Unseen, progress: ProgressSink | None = None,
                 stop: StopToken | None = None) -> UnseenCheck:
    """Check the answer on the held-out samples and the probe's copies; when one fails (and the search had
    completed), search again once with the failing ones added to the oracle (all held-out samples when one
    of them failed). The second answer is checked on the copies again."""
    if found is None or not (unseen.held_out or unseen.copies):
        return UnseenCheck(status, reason, found)
    notify(progress, PhaseEvent("validate"))
    tol = spec.tolerance
    validation = check_on_samples(backend, found, unseen.held_out, unseen.held_out_refs, tol) if unseen.held_out else None
    shares = sample_shares(backend, found, unseen.copies, unseen.copy_refs, tol)
    held_failed = validation is not None and not validation.passed
    failing = [i for i, p in enumerate(shares) if not p.passed]
    researched = (held_failed or bool(failing)) and status == "complete"
    if researched:
        # Not presented as the answer: search again (once) with the failing unseen samples included.
        added = ([*unseen.held_out], [*unseen.held_out_refs]) if held_failed else ([], [])
        oracle.samples = oracle.samples + added[0] + [unseen.copies[i] for i in failing]
        oracle.references = oracle.references + added[1] + [unseen.copy_refs[i] for i in failing]
        oracle.order = list(range(len(oracle.samples)))
        oracle.memo = {k: v for k, v in oracle.memo.items() if not v.passed}
        first = sorted(found)
        status, reason, found = run_strategy(oracle, space, spec.search.strategy, stop)
        if held_failed:
            validation.first_candidate = first
            validation.research = "searched again with the held-out samples included"
            validation.passed_after_research = found is not None
        if found is not None:
            shares = sample_shares(backend, found, unseen.copies, unseen.copy_refs, tol)
    return UnseenCheck(status, reason, found, validation, shares, researched, not (researched and held_failed), True)


def search_headroom(check: UnseenCheck, searched: int, search_copies: int, share_searched: float | None,
                    held_out_from_user: bool) -> ExpectedHeadroom | None:
    """report.json's figures for the search's answer (None: nothing was checked, or no answer)."""
    if not check.ran or check.found is None:
        return None
    return expected_headroom(
        searched=searched, search_copies=search_copies, share_searched=share_searched, probe=check.shares,
        validation=check.validation, held_out_unseen=check.held_out_unseen, held_out_from_user=held_out_from_user,
        researched=check.researched)


def confirmed_headroom(searched: ExpectedHeadroom, backend: Backend, final: frozenset[str], unseen: Unseen,
                       validation: Validation | None, spec: RunSpec, verdict: Verdict | None) -> ExpectedHeadroom:
    """The same figures with the probe's copies of the final answer run on the confirm backend (the GPU),
    which has the last word on them too; the held-out samples are not unseen there (it confirmed on them)."""
    return expected_headroom(
        searched=searched.searched, search_copies=searched.search_copies, share_searched=user_share(spec, verdict),
        probe=sample_shares(backend, final, unseen.copies, unseen.copy_refs, spec.tolerance), validation=validation,
        held_out_unseen=False, held_out_from_user=searched.held_out_from_user, researched=searched.researched,
        backend=backend.name)
