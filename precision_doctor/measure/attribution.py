"""A sample's error attributed to nodes: each candidate's local error on that sample.

The local error of a node on a sample is its output computed in low precision from the sample's exact FP32
inputs, against the FP32 output (measure/capture.py `local_errors`: streamed, nothing written); its score is
infinite where the node overflows the format (a non-finite output or values beyond the format's range), else its
relative L2 error, as the analysis ranks nodes (`measure.analysis.score`). The growth of a failing answer adds
nodes by this score (search/attributed.py).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

from precision_doctor.control import ProgressSink, StopToken
from precision_doctor.data.inputs import Sample
from precision_doctor.graph.formats import Format
from precision_doctor.graph.model import Model
from precision_doctor.measure.capture import CPU, local_errors_each
from precision_doctor.measure.stats import ErrorStats


def local_scores(model: Model, fmt: Format, samples: Sequence[Sample], *, rules: str | None, group_mb: float,
                 providers: Sequence = (CPU,), progress: ProgressSink | None = None,
                 stop: StopToken | None = None) -> list[dict[str, float]]:
    """Each candidate node's attributed score on each of `samples` (its local error under the emulation `rules`), in
    one pass over them on `providers` (`capture_providers`: the capture's device); `progress` hears of each group of
    layers run."""
    each = local_errors_each(model, fmt, samples, rules=rules, group_mb=group_mb, providers=providers,
                             progress=progress, stop=stop)
    return [{n: _score(e) for n, e in errors.items()} for errors in each]


def _score(local: ErrorStats) -> float:
    if local.nonfinite or local.frac_above_max > 0:
        return math.inf
    return float(local.rel_l2)


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
