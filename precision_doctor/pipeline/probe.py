"""Perturbed copies in the search, and the probe after it: will the answer hold on the user's next inputs?

A minimal FP32 set sits at the edge of the tolerance on the samples it was searched on, and which output
elements are worst changes with every input (docs/BENCHMARKS.md, "Generalization"). So:

- `perturbed_copies`: the oracle checks `search.augment` perturbed copies of each search sample besides
  the sample itself (data/augment.py: 1% noise on continuous float inputs, integer inputs untouched), so
  the search cannot tune its answer to one rounding pattern. The copies are made here, where the oracle's
  samples are assembled, never captured; strategies see only the oracle.
- the probe: after the search, PROBE_COPIES fresh copies of each search sample (another seed, never
  searched) plus the held-out samples say how far the answer is from the tolerance on unseen inputs
  (`expected_headroom`, a typed part of report.json). Not only the largest of those shares counts: a
  log-normal fitted to them predicts the share a new input exceeds with probability `search.risk`
  (measure/headroom.py, `predicted_share`); the answer is predicted to hold when no unseen sample fails
  and that prediction is within the tolerance. The largest share alone let answers through that failed
  on the next crop or audio chunk (docs/BENCHMARKS.md, "Generalization").
- when the probe says the answer will not hold, a second search runs with the failing (and nearly
  failing) copies added and a margin sized from the prediction (the margin that brings the predicted
  share to PREDICT_TARGET, at most MAX_MARGIN); where that margin is STEP_MIN or more above the first
  search's and there are copies to decide it, it searches halfway there first and goes on to the whole margin
  (from the halfway answer) only when HALFWAY copies (their own seed) predict that the halfway answer will not
  hold. The final answer is judged on RECHECK copies (yet another seed), which neither chose it nor were
  searched, and the held-out samples. If they still predict a failure, the verdict says the answer is
  predicted not to hold on new inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from precision_doctor.backends.base import Backend
from precision_doctor.data.augment import Augment, augment, perturbable
from precision_doctor.data.inputs import Sample
from precision_doctor.measure.headroom import (
    SampleShare,
    predicted_share,
    sample_checks,
    sample_shares,
    shares_of,
)
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.outcome import Outcome, RunStatus
from precision_doctor.pipeline.context import StepContext, UnseenCheck
from precision_doctor.pipeline.search_loop import Loop, grow_from, polish_for, run_loop
from precision_doctor.pipeline.strategy import run_strategy
from precision_doctor.pipeline.validation import validation_of
from precision_doctor.results.report import ExpectedHeadroom, Validation
from precision_doctor.search import Oracle
from precision_doctor.spec import RunSpec

NOISE = 0.01  # noise std, as a share of each input's own std in that sample
SEARCH_SEED = 0  # the oracle's copies
PROBE_SEED = 1  # the probe's copies: never the oracle's
PROBE_COPIES = 4  # fresh copies per search sample in the probe (with search.augment > 0)
RECHECK_SEED = 2  # the copies that check the second search's answer: seen by no search
HALFWAY_SEED = 3  # the copies that decide whether a halfway second search's answer is enough: not the verdict's
PREDICT_FLOOR = 1e-3  # shares below this (saturated outputs) stay out of the prediction's fit
PREDICT_TARGET = 0.85  # the second search aims the predicted share here, not at the edge of the tolerance
MAX_MARGIN = 0.8  # the second search's margin is at most this
STEP_MIN = 0.2  # a second search whose margin grows by this much or more stops halfway first
RESEARCH_CHECKPOINT = "search-again.jsonl"  # the second search's evaluations (stricter checks, more samples)


def perturbed_copies(samples: Sequence[Sample], copies: int, seed: int, reference: Callable[[Sample], dict],
                     ids: Sequence[int] | None = None,
                     ranges: dict[str, tuple[float, float]] | None = None) -> tuple[list[Sample], list[dict]]:
    """`copies` perturbed copies of each sample (the first sample's first) and their FP32 reference outputs
    (`reference`); none when `copies` is 0 or no input is a continuous float (all integer, masks). Copy c of the
    sample with id i (`ids`: the search samples' indices; default their positions) is the same whichever others
    are asked for; `ranges`: what the perturbed values are clipped to (default: what `samples` span)."""
    if ranges is None:
        ranges = perturbable(samples) if copies and samples else {}
    if not copies or not samples or not ranges:
        return [], []
    out = augment(samples, Augment(copies, NOISE, seed), ranges, ids=ids)
    return out, [reference(s) for s in out]


def copy_maker(samples: Sequence[Sample], copies: int, seed: int,
               reference: Callable[[Sample], dict]) -> Callable[[list[int], list[int]], tuple[list[Sample], list[dict]]]:
    """`make(indices, start)`: `copies` perturbed copies of the search samples `indices` (ids: those indices),
    clipped to the ranges that the samples `start` (the working set the search started with) span, so a sample's
    copies are the same whenever it joins the working set."""
    ranges: dict[tuple[int, ...], dict[str, tuple[float, float]]] = {}

    def make(indices: list[int], start: list[int]) -> tuple[list[Sample], list[dict]]:
        key = tuple(start)
        if key not in ranges:
            ranges[key] = perturbable([samples[i] for i in start]) if copies and start else {}
        return perturbed_copies([samples[i] for i in indices], copies, seed, reference, ids=indices, ranges=ranges[key])

    return make


def expected_headroom(*, searched: int, search_copies: int, share_searched: float | None,
                      probe: list[SampleShare], held: list[SampleShare], validation: Validation | None,
                      held_out_unseen: bool, held_out_from_user: bool, researched: bool, risk: float,
                      research_margin: float | None = None, backend: str | None = None,
                      first: tuple[int, float | None] | None = None) -> ExpectedHeadroom:
    """report.json's figures: the answer's shares on the probe's copies and (while the search has not
    seen them, `held_out_unseen`) on the held-out samples (`held`, one share per sample), the share a new
    input is predicted to exceed with probability `risk`, and whether it is predicted to hold; `first`:
    the first answer's size and predicted share, after a second search."""
    unseen = probe + (held if held_out_unseen else [])
    shares = [p.share for p in unseen]
    failing_held = len(validation.failing_samples) if validation is not None and held_out_unseen else 0
    failing_copies = sum(not p.passed for p in probe)
    predicted = predicted_share(shares, risk, PREDICT_FLOOR)
    worst = max(shares, default=None)
    return ExpectedHeadroom(
        searched=searched, search_copies=search_copies, perturbed_copies=len(probe),
        held_out=validation.samples if validation is not None else 0, held_out_from_user=held_out_from_user,
        share_searched=share_searched, share_unseen=worst, headroom=None if worst is None else 1.0 - worst,
        failing_copies=failing_copies, failing_held_out=failing_held, researched=researched,
        holds=failing_copies == 0 and failing_held == 0 and (predicted is None or predicted <= 1.0),
        backend=backend, predicted_share=predicted, risk=risk, research_margin=research_margin,
        first_answer_size=None if first is None else first[0], first_predicted_share=None if first is None else first[1],
    )


@dataclass
class Unseen:
    """What the search does not see: the held-out samples and the probe's fresh copies, with references;
    `recheck` makes the copies (and references) that check a second search's answer, only when one ran; `halfway`
    those that decide whether a halfway second search's answer is enough (another seed: the verdict's copies never
    chose the answer they judge)."""

    held_out: list[Sample]
    held_out_refs: list[dict]
    copies: list[Sample]
    copy_refs: list[dict]
    recheck: Callable[[], tuple[list[Sample], list[dict]]] = lambda: ([], [])
    halfway: Callable[[], tuple[list[Sample], list[dict]]] = lambda: ([], [])


def research_margin(margin: float, share_searched: float | None, predicted: float | None) -> float:
    """The second search's margin: at least the first one's; when a predicted share above 1 says the
    answer will not hold, the margin that scales the answer's share on the searched samples down so
    that the predicted share lands on PREDICT_TARGET (shares scale together), at most MAX_MARGIN."""
    if predicted is None or predicted <= 1.0 or not share_searched:
        return margin
    return float(min(MAX_MARGIN, max(margin, 1.0 - PREDICT_TARGET * share_searched / predicted)))


def check_unseen(ctx: StepContext, outcome: Outcome, *, backend: Backend, oracle: Oracle,
                 unseen: Unseen, loop: Loop | None = None) -> UnseenCheck:
    """Check the answer of `outcome` on the held-out samples and the probe's copies (on `backend`; `oracle`:
    the search's, which a second search continues with). When it is predicted not to hold
    (a sample fails, or the predicted share exceeds 1) and the search had completed, search again once:
    the failing held-out samples and every copy above the new search tolerance join the oracle, whose
    margin grows as `research_margin` says, and the first answer grows until it passes there (with `auto`: what
    it added pruned, then every member's removal tried: `grow_from`, the loop's polish; other strategies search
    from nothing); the second answer is checked on
    fresh recheck copies. With `loop`
    (the counterexample-guided search's), the second search is such a loop too: its answers are checked on
    every search sample at the new margin. Its
    evaluations go to their own checkpoint (RESEARCH_CHECKPOINT): a resumed run replays the first search
    from the first one unchanged by the second's stricter verdicts."""
    spec, stop, found = ctx.spec, ctx.stop, outcome.found
    margin = spec.search.margin
    if found is None or not (unseen.held_out or unseen.copies):
        return UnseenCheck(outcome, margin)
    tol = spec.tolerance
    validation, held = _held_out(backend, found, unseen, tol)
    shares = sample_shares(backend, found, unseen.copies, unseen.copy_refs, tol)
    held_failed = validation is not None and not validation.passed
    predicted = predicted_share([p.share for p in shares + held], spec.search.risk, PREDICT_FLOOR)
    failing = any(not p.passed for p in shares) or (predicted is not None and predicted > 1.0)
    share = _share(oracle, found, margin)
    done = UnseenCheck(outcome, margin, share, validation, shares, held, unseen.copies, unseen.copy_refs, ran=True)
    if not (held_failed or failing) or not outcome.complete:
        return done
    if stop is not None and stop.stopped:  # asked to stop after the search: the run ends here, and resumes here
        stop.handled()
        return replace(done, outcome=outcome.but(
            status=RunStatus.INTERRUPTED,
            reason="interrupted before the second search the probe asked for; resume continues there"))
    # Not presented as the answer: search again, stricter, with the unseen samples it missed: first halfway to the
    # margin the prediction asks for, and on to all of it only if the recheck copies say the halfway answer will
    # not hold (the prediction assumes shares scale together, and overshoots: on ppocr-v4-det a 1-node answer
    # became 78 nodes where the search on all 150 samples needed 21)
    again = research_margin(margin, share, predicted)
    decide, decide_refs = (unseen.halfway() if again - margin >= STEP_MIN and not held_failed else ([], []))
    halfway = margin + (again - margin) / 2 if decide else None  # only where copies of its own can decide it
    limit = 1.0 - (halfway if halfway is not None else again)
    added = [(s, r) for s, r, p in zip(unseen.copies, unseen.copy_refs, shares) if not p.passed or p.share > limit]
    if held_failed:
        added = list(zip(unseen.held_out, unseen.held_out_refs)) + added
    # a failure stays one (stricter, more samples); the added samples are checked first
    oracle.tighten([s for s, _ in added], [r for _, r in added], tol.scaled(limit) if limit < 1.0 else tol)
    if loop is not None and held_failed:
        loop.user_samples += len(unseen.held_out)
    if oracle.checkpoint is not None:
        oracle.switch_checkpoint(oracle.checkpoint.with_name(RESEARCH_CHECKPOINT), ctx.resume)
    first = sorted(found)
    again_outcome = _search_again(ctx, oracle, loop, grow_from(spec.search.strategy, outcome.found), "second")
    searched_margin, halfway_share = halfway if halfway is not None else again, None
    if halfway is not None and again_outcome.found is not None and again_outcome.complete:
        decided = sample_shares(backend, again_outcome.found, decide, decide_refs, tol)
        if not _predicted_to_hold(decided, None, spec.search.risk):
            halfway_share = _share(oracle, again_outcome.found, halfway)  # before the memo forgets its passes
            again_outcome, searched_margin = _stricter(ctx, oracle, loop, again_outcome, halfway, again)
    found = again_outcome.found
    if found is None and not again_outcome.complete:  # stopped before any set passed: the first answer stays, flagged
        return replace(done, outcome=outcome.but(status=again_outcome.status, reason=again_outcome.reason))
    copies, refs = unseen.recheck() if found is not None else ([], [])
    held = []  # after a search with them, the held-out samples are not unseen: their shares do not count
    if found is not None and not held_failed:  # still unseen: the new answer is checked on them afresh
        validation, held = _held_out(backend, found, unseen, tol)
    if held_failed:
        validation.first_candidate = first
        validation.research = "searched again with the held-out samples included"
        validation.passed_after_research = found is not None
    share_found = None if found is None else (
        halfway_share if halfway_share is not None and searched_margin == halfway else _share(oracle, found, searched_margin))
    return UnseenCheck(
        again_outcome, searched_margin, share_found,
        validation, sample_shares(backend, found, copies, refs, tol), held,
        copies, refs, researched=True, research_margin=searched_margin, held_out_unseen=not held_failed, ran=True,
        first=(len(first), None if held_failed else predicted), first_answer=frozenset(first))


def _stricter(ctx: StepContext, oracle: Oracle, loop: Loop | None, halfway_outcome: Outcome, halfway: float,
              again: float) -> tuple[Outcome, float]:
    """On from the halfway answer to the whole margin `again` (a "stricter" search growing it); the answer and
    the margin it was searched at. Where nothing passes there (or it stops first) the halfway answer stays, with
    the status that ended the stricter search and the loop's record of the halfway answer."""
    oracle.tighten([], [], ctx.spec.tolerance.scaled(1.0 - again))
    checked_halfway = None if loop is None else (loop.verified, loop.failing, loop.stopped)
    whole = _search_again(ctx, oracle, loop, grow_from(ctx.spec.search.strategy, halfway_outcome.found), "stricter")
    if whole.found is not None:
        return whole, again
    if loop is not None and checked_halfway is not None:
        loop.verified, loop.failing, loop.stopped = checked_halfway
    return halfway_outcome.but(status=whole.status, reason=whole.reason), halfway


def _search_again(ctx: StepContext, oracle: Oracle, loop: Loop | None, strategy, search: str) -> Outcome:
    """A search after the first on the tightened `oracle` (`strategy`: a name or a StrategyFn), as the first one
    ran: in the counterexample-guided loop when there is one (its answers checked on every search sample)."""
    if loop is not None:
        name = ctx.spec.search.strategy
        return run_loop(loop, oracle, ctx.space, strategy, lambda prev: grow_from(name, prev), search=search,
                        stop=ctx.stop, polish=polish_for(name))
    return run_strategy(oracle, ctx.space, strategy, ctx.stop)


def _predicted_to_hold(shares: list[SampleShare], validation: Validation | None, risk: float) -> bool:
    """No unseen sample fails and the share a new input is predicted to exceed (with probability `risk`) is within
    the tolerance."""
    predicted = predicted_share([p.share for p in shares], risk, PREDICT_FLOOR)
    return all(p.passed for p in shares) and (validation is None or validation.passed) and \
        (predicted is None or predicted <= 1.0)


def _held_out(backend: Backend, found: frozenset[str], unseen: Unseen,
              tol: Tolerance) -> tuple[Validation | None, list[SampleShare]]:
    """The answer on the held-out samples, run once: their Validation (None without any) and shares."""
    checks = sample_checks(backend, found, unseen.held_out, unseen.held_out_refs, tol)
    return (validation_of(checks) if unseen.held_out else None), shares_of(checks)


def _share(oracle: Oracle, found: frozenset[str], margin: float) -> float | None:
    """The answer's share of the user's (unscaled) tolerance on the samples the oracle searched."""
    verdict = oracle.known(found)
    return verdict.tol_used * (1.0 - margin) if verdict is not None else None


def search_headroom(check: UnseenCheck, searched: int, search_copies: int, held_out_from_user: bool,
                    risk: float) -> ExpectedHeadroom | None:
    """report.json's figures for the search's answer, predicted at `risk` (None: nothing was checked, or no answer)."""
    if not check.ran or check.outcome.found is None:
        return None
    return expected_headroom(
        searched=searched, search_copies=search_copies, share_searched=check.share_searched, probe=check.shares, held=check.held,
        validation=check.validation, held_out_unseen=check.held_out_unseen, held_out_from_user=held_out_from_user,
        researched=check.researched, research_margin=check.research_margin, risk=risk, first=check.first)


def confirmed_headroom(searched: ExpectedHeadroom, backend: Backend, final: frozenset[str], check: UnseenCheck,
                       validation: Validation | None, spec: RunSpec, share_confirmed: float | None) -> ExpectedHeadroom:
    """The same figures with the probe's copies of the final answer run on the confirm backend (the GPU),
    which has the last word on them too; the held-out samples are not unseen there (it confirmed on them)."""
    return expected_headroom(
        searched=searched.searched, search_copies=searched.search_copies, share_searched=share_confirmed,
        probe=sample_shares(backend, final, check.copies, check.copy_refs, spec.tolerance), held=[],
        validation=validation, held_out_unseen=False, held_out_from_user=searched.held_out_from_user,
        researched=searched.researched, research_margin=searched.research_margin, risk=spec.search.risk,
        backend=backend.name, first=check.first)
