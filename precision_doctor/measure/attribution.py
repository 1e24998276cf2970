"""A sample's error attributed to nodes: each candidate's local error on that sample.

The local error of a node on a sample is its output computed in low precision from the sample's exact FP32
inputs, against the FP32 output (the capture's `local` run, measure/capture.py); its score is the analysis's
(`measure.analysis.score`: infinite where the node overflows the format, else the relative L2 error). The
growth of a failing answer adds nodes by this score (search/attributed.py). The capture runs on the one sample
into a temporary store beside the run's files, deleted when the scores are read.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from precision_doctor.control import ProgressSink, StopToken
from precision_doctor.data.activations import ActivationStore
from precision_doctor.data.inputs import Sample
from precision_doctor.graph.formats import Format
from precision_doctor.graph.model import Model
from precision_doctor.measure.analysis import analyse
from precision_doctor.measure.capture import capture


def local_scores(model: Model, fmt: Format, sample: Sample, *, rules: str | None, workdir: Path, group_mb: float,
                 progress: ProgressSink | None = None, stop: StopToken | None = None) -> dict[str, float]:
    """Each candidate node's attributed score on `sample` (its local error under the emulation `rules`)."""
    with tempfile.TemporaryDirectory(prefix=".attribution-", dir=workdir) as tmp:
        path = Path(tmp) / "local.h5"
        capture(model, [sample], fmt, path, group_mb=group_mb, compression=None, progress=progress, stop=stop,
                rules=rules)
        with ActivationStore(path) as store:
            analysis = analyse(store, model=model)
    return {r.name: float(r.score) for r in analysis.layers}


def sample_key(sample: Sample) -> str:
    """A sample's identity for a cache: its inputs' names, dtypes, shapes and bytes."""
    h = hashlib.sha256()
    for name in sorted(sample):
        a = np.ascontiguousarray(sample[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def worst_scores(per_sample: Sequence[dict[str, float]]) -> dict[str, float]:
    """Per node, its largest score over the samples (a node matters if it matters on one)."""
    out: dict[str, float] = {}
    for scores in per_sample:
        for n, v in scores.items():
            out[n] = max(out.get(n, 0.0), v)
    return out
