"""What a diagnose run keeps of its capture (activations.h5) once its report is written: `capture.keep`.

`all` keeps every captured tensor of every sample (the reference, low-precision, local and fixed runs: about
4 x samples x the model's activations). `summary` (the default) keeps the file's attributes, the analysis kept
in it (`measure/analysis.keep_analysis`: per-layer rows and per-tensor error statistics) and the graph outputs
of every run: a size that grows with the node count, not with the activations. `none` removes the file.

Nothing after the report reads the capture: `report`/`rerender` read report.json, `compare` writes its own
capture. A run that was cut off (interrupted: Ctrl-C, a stop, a daemon's shutdown) keeps it all, so that
`--resume` goes on without capturing again; any other resumed run whose capture is a summary or gone (one whose
budget ran out, say, continued with a larger one) captures again (pipeline/diagnose.py) and replays its search
from the checkpoint: no evaluation is repeated.
"""

from __future__ import annotations

from precision_doctor.data.activations import ExtraRun, summarize, summary_path
from precision_doctor.outcome import RunStatus
from precision_doctor.pipeline.compare import ACTIVATIONS, FixedRun
from precision_doctor.runfiles import RunDir

CONTINUABLE = (RunStatus.INTERRUPTED,)  # runs cut off: the ones resumed as a rule (a service job given back)
ARTIFACT_KEYS = {"all": "activations", "summary": "activations_summary"}  # report.json's `artifacts` key per kept form


def kept(keep: str, status: RunStatus | str | None) -> str:
    """What a run that ended in `status` keeps of its capture under `capture.keep` = `keep`."""
    return "all" if status in CONTINUABLE else keep


def capture_artifact(keep: str, status: RunStatus | str | None) -> dict[str, str]:
    """report.json's `artifacts` entry for the capture ({} when none is kept)."""
    key = ARTIFACT_KEYS.get(kept(keep, status))
    return {key: ACTIVATIONS} if key else {}


def keep_capture(run: RunDir, keep: str, status: RunStatus | str | None, outputs: list[str],
                 unstored: dict[str, FixedRun] | None = None) -> None:
    """Reduce `out_dir`'s activations.h5 to what `keep` keeps (`outputs`: the graph outputs); `unstored`: runs
    computed without being stored in it (the fixed run), whose graph outputs a summary keeps as if they were."""
    path = run.root / ACTIVATIONS
    what = kept(keep, status)
    if what == "all" or not path.is_file():
        return
    if what == "none":
        path.unlink()
        return
    run.written(summary_path(path))
    extra = {run: ExtraRun(r.outputs or {}, r.attrs) for run, r in (unstored or {}).items()}
    summarize(path, outputs, extra)
