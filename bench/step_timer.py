"""Where a diagnose's seconds go, step by step, without a profiler (cProfile sees only the main thread and
misreads ONNX Runtime's): the named functions are wrapped where the pipeline looks them up, their wall time
summed (a step inside another counts in both).

    with StepTimer() as timer:
        api.diagnose(...)
    print(timer.table())
"""

from __future__ import annotations

import functools
import importlib
import time
from collections import defaultdict

# module whose namespace the pipeline reads the name from -> the names
STEPS = {
    "precision_doctor.pipeline.diagnose": [
        "make_backend", "ReferenceRunner", "start_loop", "capture_and_analyse", "write_layer_tables", "run_cost_model",
        "build_space", "run_loop", "check_unseen", "confirm", "two_answers", "capture_fixed", "write_artifacts",
        "tensorrt_steps", "price", "build_report", "write_report", "keep_capture", "search_headroom",
        "confirmed_headroom"],
    "precision_doctor.pipeline.compare": ["capture", "analyse", "fixed_errors"],
    "precision_doctor.pipeline.pricing": ["tradeoff"],
    "precision_doctor.measure.latency": ["deploy_latency"],
    "precision_doctor.render": ["write_reports"],
    "precision_doctor.pipeline.artifacts": ["build_mixed", "save_polygraphy_io", "model_for_tools", "place_model",
                                            "write_trtexec_io", "forced_fp32_nodes"],
    "precision_doctor.results.emit": ["emit_all"],
}


class StepTimer:
    """Wraps STEPS for the length of a `with` block; `seconds[name]`, `calls[name]`."""

    def __init__(self, steps: dict[str, list[str]] | None = None):
        self.steps = steps or STEPS
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._undo: list[tuple[object, str, object]] = []

    def _wrap(self, name: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t0 = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.monotonic() - t0
                self.calls[name] += 1
        return timed

    def __enter__(self) -> StepTimer:
        for module_name, names in self.steps.items():
            module = importlib.import_module(module_name)
            for name in names:
                fn = getattr(module, name, None)
                if fn is None:
                    continue
                self._undo.append((module, name, fn))
                setattr(module, name, self._wrap(name, fn))
        return self

    def __exit__(self, *exc) -> None:
        for module, name, fn in reversed(self._undo):
            setattr(module, name, fn)
        self._undo.clear()

    def table(self) -> dict[str, list[float]]:
        """name -> [seconds, calls], largest first."""
        return {k: [round(v, 2), self.calls[k]] for k, v in sorted(self.seconds.items(), key=lambda kv: -kv[1])}
