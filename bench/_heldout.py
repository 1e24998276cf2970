"""Machinery of bench/generalization.py: cases with many samples, a check cache shared by every
candidate's oracle, and the candidates' searches.

One emulator session and one reference per sample serve every search of a case. A configuration's
check on a sample is computed once, at the case's tolerance, and kept: an oracle searching with a
margin m reads the same check (an `elemwise` check without a cosine floor passes at the tolerance
scaled by 1 - m exactly when its share of the full tolerance is at most 1 - m). Each candidate
still gets a fresh oracle (its own memo, failing-first order and evaluation count), so counts are
what the candidate would have spent alone; only the machine's time is shared.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.data.activations import ActivationStore
from precision_doctor.data.augment import Augment, augment, perturbable
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.model import Model
from precision_doctor.measure.analysis import analyse
from precision_doctor.measure.capture import capture
from precision_doctor.measure.headroom import margin_from_spread, predicted_share
from precision_doctor.measure.tolerance import OutputCheck, Tolerance, check_all, merge
from precision_doctor.search import STRATEGIES
from precision_doctor.search.auto import repair
from precision_doctor.search.oracle import Oracle, Verdict
from precision_doctor.search.space import SearchSpace, build_space
from precision_doctor.spec import CaptureSpec


@dataclass
class Case:
    """A model, N samples of one distribution, a tolerance."""

    name: str
    model: Model
    samples: list[dict]
    tol: Tolerance
    kind: str  # "planted" or "zoo"
    samples_id: str = ""  # cases with the same model and samples_id have the same samples


_CAPTURES: dict[tuple, Path] = {}


class Runs:
    """The emulator, references and per-sample checks of one case, shared by every oracle."""

    def __init__(self, case: Case, workdir: Path):
        tol = case.tol
        if tol.check_error_stat != "elemwise" or tol.cosine_floor is not None:
            raise ValueError("the shared check cache needs an elemwise tolerance without a cosine floor")
        self.case = case
        self.backend = EmulateBackend(case.model)
        self.reference = ReferenceRunner(case.model)
        self.workdir = workdir
        self._refs: dict[str, dict] = {}
        self._checks: dict[tuple[frozenset, str], dict[str, OutputCheck]] = {}
        self.runs = 0  # model runs actually made (cache misses)

    def ref(self, key: str, sample: dict) -> dict:
        if key not in self._refs:
            self._refs[key] = self.reference.run(sample)
        return self._refs[key]

    def checks(self, fb: frozenset[str], key: str, sample: dict) -> dict[str, OutputCheck]:
        """The check of configuration `fb` on one sample, at the case's (full) tolerance."""
        k = (fb, key)
        if k not in self._checks:
            ref = self.ref(key, sample)
            self._checks[k] = check_all(self.backend.prepare(fb).run(sample, list(ref)), ref, self.case.tol)
            self.runs += 1
        return self._checks[k]

    def share(self, fb: frozenset[str], key: str, sample: dict) -> float:
        """The share of the full tolerance the worst output element uses on this sample."""
        return max(c.tol_used for c in self.checks(fb, key, sample).values())

    def space(self, keys: tuple[int, ...], samples: list[dict]) -> SearchSpace:
        """Capture + analysis on the search samples (cached per sample set), the space `auto` searches."""
        fmt = get_format("fp16")
        key = (self.case.model.model_hash, self.case.samples_id, keys)  # cases that differ in tolerance share it
        if key not in _CAPTURES:
            path = Path(tempfile.mkdtemp(dir=self.workdir)) / "activations.h5"
            settings = CaptureSpec()  # the defaults
            capture(self.case.model, samples, fmt, path, group_mb=settings.group_mb, compression=settings.compression)
            _CAPTURES[key] = path
        with ActivationStore(_CAPTURES[key]) as store:
            analysis = analyse(store, tolerance=self.case.tol, model=self.case.model)
        return build_space(self.case.model, analysis, fmt)


def _scaled(c: OutputCheck, factor: float) -> OutputCheck:
    return replace(c, passed=bool(c.tol_used <= factor), tol_used=c.tol_used / factor)


class SharedOracle(Oracle):
    """An Oracle whose per-sample checks come from `Runs` (see the module docstring)."""

    def __init__(self, runs: Runs, keys: list[str], samples: list[dict], margin: float, space: SearchSpace):
        super().__init__(runs.backend, samples, [], runs.case.tol.scaled(1 - margin), cost_of=space.cost)
        self.runs, self.keys, self.factor = runs, list(keys), 1.0 - margin

    def add(self, keys: list[str], samples: list[dict]) -> None:
        """More samples (checked first); passing verdicts are forgotten, failing ones stay valid."""
        self.samples = samples + self.samples
        self.keys = keys + self.keys
        self.order = list(range(len(self.samples)))
        self.memo = {k: v for k, v in self.memo.items() if not v.passed}

    def evaluate(self, fallback, phase: str | None = None) -> Verdict:
        fb = frozenset(fallback)
        if fb in self.memo:
            self.memo_hits += 1
            return self.memo[fb]
        self.check_budget()
        t0 = time.monotonic()
        per_output: dict[str, list[OutputCheck]] = {}
        failed = None
        for i in list(self.order):
            checks = {k: _scaled(c, self.factor) for k, c in self.runs.checks(fb, self.keys[i], self.samples[i]).items()}
            for k, c in checks.items():
                per_output.setdefault(k, []).append(c)
            if not all(c.passed for c in checks.values()):
                failed = i
                self.order.remove(i)
                self.order.insert(0, i)
                break
        verdict = Verdict(failed is None, {k: merge(v) for k, v in per_output.items()}, failed, time.monotonic() - t0)
        self._record(fb, verdict, phase if phase is not None else self.phase)
        return verdict


@dataclass(frozen=True)
class Candidate:
    """A way to search: a margin (fixed, or sized from the spread of the shares at the first
    evaluation), perturbed copies in the oracle, and a check on fresh copies followed, when they
    show the answer will not hold, by a search again grown from the answer."""

    name: str
    margin: float = 0.0
    spread: bool = False  # margin = max(margin, headroom.margin_from_spread(all-low-precision shares))
    aug: int = 0  # perturbed copies of each search sample in the oracle
    noise: float = 0.01
    check: int = 0  # fresh perturbed copies of each search sample the answer is checked on (0: none)
    research: str = ""  # "fixed": if a fresh copy fails, search again at research_margin; "predict": if the
    research_margin: float = 0.0  # share predicted for new inputs (headroom.predicted_share) exceeds 1, search
    about: str = ""  # again at the margin that brings it to 1


FRESH_SEED = 1  # perturbed copies never searched (the oracle's copies use seed 0)
PROBE_COPIES = 4  # fresh copies per search sample measured for every answer (the expected-headroom probe)
MAX_MARGIN = 0.8
RISK = 0.005  # the risk per new input these candidates were measured at (docs/BENCHMARKS.md, "Generalization")


def run_candidate(runs: Runs, split: str, idx: tuple[int, ...], cand: Candidate) -> dict:
    """Search as `cand` says on the user samples `idx`; returns the answer and what it cost."""
    case = runs.case
    user = [case.samples[i] for i in idx]
    user_keys = [f"u{i}" for i in idx]
    ranges = perturbable(user)
    keys, samples = list(user_keys), list(user)
    if cand.aug:
        spec = Augment(cand.aug, cand.noise, seed=0)
        samples += augment(user, spec, ranges, ids=idx)
        keys += [f"{split}:{spec.key()}:{i}:{c}" for i in idx for c in range(cand.aug)]
    margin = cand.margin
    if cand.spread:  # the first evaluation (everything in low precision) on every oracle sample
        first = [runs.share(frozenset(), k, s) for k, s in zip(keys, samples)]
        margin = max(margin, margin_from_spread(first, len(samples), RISK) or 0.0)
    space = runs.space(idx, user)
    oracle = SharedOracle(runs, keys, samples, margin, space)
    t0 = time.monotonic()
    found = STRATEGIES["auto"](oracle, space)
    info = {"margin": margin}
    if found is not None and cand.check:
        spec = Augment(cand.check, cand.noise, seed=FRESH_SEED + 1)
        fresh = augment(user, spec, ranges, ids=idx)
        fkeys = [f"{split}:{spec.key()}:{i}:{c}" for i in idx for c in range(cand.check)]
        shares = [runs.share(found, k, s) for k, s in zip(fkeys, fresh)]
        again = None
        if cand.research == "fixed" and max(shares) > 1.0:
            again = cand.research_margin
        elif cand.research == "predict":
            predicted = predicted_share(shares, RISK)
            top = max(runs.share(found, k, s) for k, s in zip(oracle.keys, oracle.samples))
            info["predicted"] = predicted
            if predicted is not None and predicted > 1.0:
                again = min(MAX_MARGIN, max(margin, 1.0 - top / predicted))
        info.update({"fresh": len(fresh), "fresh_failing": sum(v > 1.0 for v in shares), "first_answer": len(found)})
        if again is not None:
            add = [j for j, v in enumerate(shares) if v > 1.0 - again]
            oracle.add([fkeys[j] for j in add], [fresh[j] for j in add])
            if again < margin:
                oracle.memo = {}  # a looser check: failing verdicts need not fail any more
            oracle.factor = 1.0 - again
            info["research_margin"] = again
            found = repair(oracle, space, found)
    wall = time.monotonic() - t0
    return {"found": None if found is None else sorted(found), "evaluations": oracle.evaluations,
            "oracle_samples": len(oracle.samples), "wall_s": wall, **info}


def measure(runs: Runs, split: str, idx: tuple[int, ...], found: list[str] | None) -> dict:
    """How the answer does: its share on the searched user samples, on fresh perturbed copies of them
    (the probe), and on every unseen user sample of the case."""
    case = runs.case
    if found is None:
        return {"holds": False}
    fb = frozenset(found)
    unseen = [i for i in range(len(case.samples)) if i not in idx]
    user = [case.samples[i] for i in idx]
    spec = Augment(PROBE_COPIES, 0.01, seed=FRESH_SEED)
    probe = augment(user, spec, perturbable(user), ids=idx)
    pkeys = [f"{split}:{spec.key()}:{i}:{c}" for i in idx for c in range(PROBE_COPIES)]
    unseen_shares = [runs.share(fb, f"u{i}", case.samples[i]) for i in unseen]
    flops = {n.name: n.flops for n in case.model.nodes}
    return {
        "size": len(fb),
        "flop_share": sum(flops.get(n, 0) for n in fb) / max(case.model.total_flops, 1),
        "search_shares": [runs.share(fb, f"u{i}", case.samples[i]) for i in idx],
        "probe_shares": [runs.share(fb, k, s) for k, s in zip(pkeys, probe)],
        "unseen_shares": unseen_shares,
        "holds": bool(max(unseen_shares, default=0.0) <= 1.0),
        "unseen_pass": float(np.mean([s <= 1.0 for s in unseen_shares])) if unseen_shares else 1.0,
    }
