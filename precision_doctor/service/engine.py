"""The service's one call into the core: run a job's RunSpec in its run directory with a progress sink, a
stop token and the shared capture cache (`api.diagnose`), and sum up its Report as a `Result`."""

from __future__ import annotations

import shutil
import time
from contextlib import AbstractContextManager
from pathlib import Path

from precision_doctor import api
from precision_doctor.control import PhaseEvent, ProgressEvent, ProgressSink, StopToken
from precision_doctor.outcome import RunStatus
from precision_doctor.pipeline.capture_cache import CaptureCache
from precision_doctor.pipeline.settings import RUN_SETTINGS
from precision_doctor.results.report import Report, ServiceJob
from precision_doctor.service.schema import Result
from precision_doctor.spec import RunSpec


class _JobCache:
    """The shared cache as one job sees it: remembers whether the job's capture came from there."""

    def __init__(self, shared: CaptureCache):
        self.shared, self.reused = shared, False

    def lock(self, key: str) -> AbstractContextManager[object]:
        return self.shared.lock(key)

    def get(self, key: str, dest: Path) -> bool:
        self.reused = self.shared.get(key, dest)
        return self.reused

    def put(self, key: str, path: Path) -> None:
        self.shared.put(key, path)


class _PhaseClock:
    """A progress sink in front of another that times the capture phase (capture + analysis, or the copy)."""

    def __init__(self, sink: ProgressSink):
        self.sink, self.started, self.capture_s = sink, None, None

    def __call__(self, event: ProgressEvent) -> None:
        if isinstance(event, PhaseEvent):
            now = time.monotonic()
            if self.started is not None and self.capture_s is None:
                self.capture_s = now - self.started
            if event.phase == "capture":
                self.started, self.capture_s = now, None
        self.sink(event)


def can_resume(out_dir: Path) -> bool:
    """Whether `out_dir` holds a run that `resume` can continue."""
    return (out_dir / RUN_SETTINGS).is_file()


def run_job(spec_json: dict, out_dir: Path, *, progress: ProgressSink, stop: StopToken, resume: bool = False,
            cache: CaptureCache | None = None, job: ServiceJob | None = None) -> Result:
    """Diagnose the job (`spec_json`: the RunSpec's JSON, as stored) into `out_dir`. `resume` continues the
    run there from its checkpoint; otherwise `out_dir` is emptied first. A stop ends the run at a safe point:
    status "interrupted" (the search reports its best set so far) or "stopped" (outside the search).
    `job`: the job as submitted (report.json's `service_job`). UserError for bad input, as the core."""
    spec = RunSpec.from_json(spec_json)
    if not resume and out_dir.exists():
        shutil.rmtree(out_dir)
    job_cache = _JobCache(cache) if cache is not None else None
    clock = _PhaseClock(progress)
    try:
        report = api.diagnose(spec, out_dir, progress=clock, stop=stop, resume=resume, capture_cache=job_cache,
                              origin="service", service_job=job)
    except KeyboardInterrupt:  # control.Stopped outside the search
        if not stop.stopped:
            raise
        return Result(RunStatus.STOPPED, False, reason=f"stopped ({stop.reason}) outside the search")
    return summary(report, reused=bool(job_cache and job_cache.reused), capture_s=clock.capture_s)


def summary(report: Report, reused: bool, capture_s: float | None) -> Result:
    """The job's Result, cut from the report's brief (render/brief.py)."""
    from precision_doctor.render.brief import brief

    b = brief(report)
    return Result(
        status=report.status, passed=b.passed, fallback_size=report.answer.fallback_size,
        fp32_flop_share=report.answer.fp32_flop_share, evaluations=report.search.evaluations, elapsed_s=report.search.elapsed_s,
        reason=report.reason, capture_reused=reused, capture_s=None if capture_s is None else round(capture_s, 4),
        verdict=b.verdict, label=b.label, tone=b.tone, headline=b.headline, qualifiers=b.qualifiers,
    )
