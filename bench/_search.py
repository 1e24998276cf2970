"""Driving search strategies side by side on one oracle setup (the way tests/search/test_search.py does)."""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from pathlib import Path

from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.data.activations import captured_shapes
from precision_doctor.data.workload import Workload
from precision_doctor.graph.cost import cost_model
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.model import Model
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline.compare import capture_and_analyse
from precision_doctor.search import STRATEGIES, Oracle
from precision_doctor.search.oracle import Budget, BudgetExhausted
from precision_doctor.search.space import build_space
from precision_doctor.spec import InputSpec


class SearchBench:
    """One model, its samples and tolerance: capture + analysis once, then any strategy on a fresh oracle
    (same backend session, same samples, same FP32 references, empty memo). `objective`: the search's
    (`search.cost`); FLOP shares, Casts and the deployment cost come from the cost model (the shapes that ran)."""

    def __init__(self, model: Model, samples: list, tol: Tolerance, precision: str = "fp16", workdir: Path | None = None,
                 objective: str = "nodes"):
        self.model = model
        self.samples = samples
        self.tol = tol
        self.precision = precision
        self.fmt = get_format(precision)
        self._tmp = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="pd-bench-")
            workdir = Path(self._tmp.name)
        workdir.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        work = Workload(model, samples, InputSpec())
        self.analysis = capture_and_analyse(work, precision, tol, workdir)
        self.capture_s = time.perf_counter() - t0
        self.cost = cost_model(model, precision, {k: v.shape for k, v in samples[0].items()},
                               captured_shapes(workdir / "activations.h5"))
        self.objective = objective
        self.space = build_space(model, self.analysis, self.fmt, objective, cost_model=self.cost)
        t0 = time.perf_counter()
        self.backend = EmulateBackend(model, precision)
        self.ref = ReferenceRunner(model)
        self.refs = [self.ref.run(s) for s in samples]
        self.setup_s = time.perf_counter() - t0

    def oracle(self, **kw) -> Oracle:
        return Oracle(self.backend, self.samples, self.refs, self.tol, cost_of=self.space.cost, **kw)

    def flop_share(self, fallback) -> float | None:
        """FP32 share of the FLOPs at the shapes that ran (forced FP32 nodes included, as fixed.onnx runs them)."""
        return None if fallback is None else self.cost.fp32_flop_share(fallback)

    def run(self, strategy: str, time_s: float | None = None, max_evaluations: int | None = None) -> dict:
        oracle = self.oracle(budget=Budget(max_evaluations=max_evaluations, time_s=time_s))
        t0 = time.perf_counter()
        c0 = time.process_time()
        capped = None
        refined = None
        try:
            found = STRATEGIES[strategy](oracle, self.space)
        except BudgetExhausted as exc:
            capped = str(exc)
            found = oracle.best()
        if found and self.space.grouping is not None and capped is None and self.space.refinements:
            refined = self.space.refinements[-1]  # the strategy's answer was refined (search/units.py)
            capped = refined.stopped
        wall = time.perf_counter() - t0
        cpu = time.process_time() - c0
        phases = Counter(e.phase for e in oracle.trajectory)
        phase_s: Counter = Counter()
        for e in oracle.trajectory:
            phase_s[e.phase] += e.verdict.elapsed_s
        return {
            "strategy": strategy,
            "evaluations": oracle.evaluations,
            "memo_hits": oracle.memo_hits,
            "wall_s": wall,
            "cpu_s": cpu,
            "eval_s_mean": (sum(e.verdict.elapsed_s for e in oracle.trajectory) / max(oracle.evaluations, 1)),
            "found": sorted(found) if found is not None else None,
            "size": len(found) if found is not None else None,
            "flop_share": self.flop_share(found),
            "casts_added": None if found is None else self.cost.answer_cost(found).casts_added,
            "deploy_us": None if found is None else self.cost.deploy_us(found),
            "splits": None if refined is None else [[s.kind, list(s.kept), list(s.released)] for s in refined.splits],
            "gaps_closed": None if refined is None else [list(g) for g in refined.gaps_closed],
            "one_minimal_checked": oracle.one_minimal_checked(found),
            "capped": capped,
            "phases": dict(phases),
            "phase_s": dict(phase_s),
            "trajectory": [
                {"step": e.step, "phase": e.phase, "size": len(e.fallback), "passed": e.verdict.passed,
                 "elapsed_s": e.verdict.elapsed_s}
                for e in oracle.trajectory
            ],
        }

    def one_minimal(self, found) -> tuple[bool, list[str]]:
        """Whether every member is needed (a separate oracle; these evaluations are not counted above)."""
        if not found:
            return True, []
        o = self.oracle()
        s = frozenset(found)
        removable = [x for x in sorted(s) if o.passes(s - {x})]
        return not removable, removable

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


def phase_text(phases: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in phases.items())
