"""What a diagnose run keeps of its capture (activations.h5) once its report is written: `capture.keep`.

The streaming capture already wrote only what `capture.keep` keeps (data/keep_plan.py): every tensor's error
statistics and the run's analysis, the graph outputs of every run and, with `summary`/`top:N`/names, the tensors of
the top layers and of the names (`all`: every tensor). Once the report is written the fixed run's graph outputs are
added to it (the run is not stored unless `all`), and `none` removes the file.

`--resume` reads the statistics, so it never captures again while the file is there: a run that was cut off
(interrupted: Ctrl-C, a stop, a daemon's shutdown) keeps it whatever `capture.keep` says; a resumed run whose
file is gone (`none`, after it completed) captures again and replays its search from the checkpoint: no evaluation is
repeated.
"""

from __future__ import annotations

from precision_doctor.data.activations import ExtraRun, append_runs, summary_path
from precision_doctor.data.keep_plan import KeepPlan
from precision_doctor.outcome import RunStatus
from precision_doctor.pipeline.compare import ACTIVATIONS, FixedRun
from precision_doctor.runfiles import RunDir

CONTINUABLE = (RunStatus.INTERRUPTED,)  # runs cut off: the ones resumed as a rule (a service job given back)
ARTIFACT_KEYS = {"all": "activations", "summary": "activations_summary"}  # report.json's `artifacts` key per kept form


def kept(keep: str, status: RunStatus | str | None) -> str:
    """What a run that ended in `status` keeps of its capture under `capture.keep` = `keep`: "all" (every tensor),
    "summary" (the statistics, graph outputs and the tensors named) or "none"."""
    plan = KeepPlan.parse(keep)
    if plan.every:
        return "all"
    return "none" if plan.remove and status not in CONTINUABLE else "summary"


def capture_artifact(keep: str, status: RunStatus | str | None) -> dict[str, str]:
    """report.json's `artifacts` entry for the capture ({} when none is kept)."""
    key = ARTIFACT_KEYS.get(kept(keep, status))
    return {key: ACTIVATIONS} if key else {}


def keep_capture(run: RunDir, keep: str, status: RunStatus | str | None, outputs: list[str],
                 unstored: dict[str, FixedRun] | None = None) -> None:
    """Bring `run`'s activations.h5 to what `keep` keeps: removed (`none`), or with the graph outputs (`outputs`) of
    the runs computed without being stored in it (`unstored`: the fixed run) added as if they had been."""
    path = run.root / ACTIVATIONS
    what = kept(keep, status)
    if not path.is_file():
        return
    if what == "none":
        path.unlink()
        return
    extra = {name: ExtraRun({o: r.outputs[o] for o in outputs if r.outputs and r.outputs.get(o)}, r.attrs)
             for name, r in (unstored or {}).items()}
    if any(e.values for e in extra.values()):
        run.written(summary_path(path))
        append_runs(path, extra)
