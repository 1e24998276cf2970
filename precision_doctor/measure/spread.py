"""The GPU's own spread: how far one graph's outputs move under the kernel choices a deployment may get.

cuDNN's convolution algorithm choice (ONNX Runtime's `cudnn_conv_algo_search`: EXHAUSTIVE, its default, HEURISTIC
or DEFAULT) changes FP16 roundings: on a detector it moved the all-FP16 outputs by up to 5x the tolerance on the
same inputs (docs/BENCHMARKS.md). Where ONNX Runtime CUDA has the last word, the answer runs on the samples under
each algorithm choice and the FP32 graph runs twice: `KernelSpread.share` is the largest change of a sample's share
of the tolerance between algorithm choices, `fp32_repeat` that between the two FP32 runs. Only the latter is noise
(the reference itself moves; the confirmation allows it). The FP16 spread is error a deployment gets, since
EXHAUSTIVE may pick another algorithm in another process: the report states it, and a held-out sample that fails
under the default choice but passes under another (`ties`) is named so, and still fails. Counting such samples as
passing (the first version) let a detector's answer pass with 0 of 6 held-out failures and fail 2 of 16 unseen
samples at up to 1.39x the tolerance (docs/history/gpu-truth.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from precision_doctor.backends import knobs
from precision_doctor.control import PhaseEvent, ProgressSink, notify
from precision_doctor.data.inputs import Sample
from precision_doctor.graph.model import Model
from precision_doctor.measure.headroom import SampleShare, sample_shares
from precision_doctor.measure.tolerance import Tolerance


@dataclass
class KernelSpread:
    """How far a graph's outputs move on `backend` under its kernel choices (`configs`), over `samples` samples:
    `share`, the largest change of a sample's share of the tolerance between the choices; `fp32_repeat`, between two
    runs of the FP32 graph."""

    backend: str
    configs: list[str] = field(default_factory=list)
    samples: int = 0
    share: float = 0.0
    fp32_repeat: float = 0.0


ALGOS = knobs.ORT_CUDA_KNOBS["cudnn_conv_algo_search"]  # the default (EXHAUSTIVE) first
ALGO = "cudnn_conv_algo_search"


def _config(algo: str) -> knobs.KnobConfig:
    settings = () if algo == knobs.ORT_CUDA_DEFAULTS[ALGO] else ((ALGO, algo),)
    return knobs.KnobConfig(knobs.ORT_CUDA, settings)


def shares_by_algo(model: Model, precision: str, fallback: frozenset[str], samples: Sequence[Sample],
                   refs: Sequence[dict], tol: Tolerance, algos: Sequence[str] = ALGOS,
                   family: str = knobs.ORT_CUDA, level: str | None = None,
                   progress: ProgressSink | None = None) -> dict[str, list[SampleShare]]:
    """Each sample's share of `tol` with `fallback` in FP32 on ONNX Runtime CUDA, per algorithm choice (a session
    each, at the graph optimization `level` of the backend whose verdicts it qualifies; `family` ort-cpu runs the same
    code on the CPU provider, where the choice changes nothing: plumbing)."""
    from precision_doctor.backends.ort import OrtBackend

    out = {}
    for algo in algos:
        notify(progress, PhaseEvent("spread", f"{len(samples)} samples with {ALGO}={algo}"))
        providers = knobs.ort_providers(_config(algo)) if family == knobs.ORT_CUDA else ["CPUExecutionProvider"]
        with contextlib.closing(OrtBackend(model, precision, providers=providers, level=level)) as b:
            out[algo] = sample_shares(b, fallback, samples, refs, tol)
    return out


def kernel_spread(model: Model, precision: str, fallback: frozenset[str], samples: Sequence[Sample],
                  refs: Sequence[dict], tol: Tolerance, family: str = knobs.ORT_CUDA,
                  level: str | None = None, progress: ProgressSink | None = None) -> KernelSpread:
    """The spread of `fallback`'s graph on ONNX Runtime CUDA over `samples` (see the module's docstring), at the graph
    optimization `level` of the backend it qualifies."""
    by = shares_by_algo(model, precision, fallback, samples, refs, tol, family=family, level=level, progress=progress)
    share = max((_span([by[a][i].share for a in by]) for i in range(len(samples))), default=0.0)
    everything = frozenset(n.name for n in model.candidates)
    twice = [shares_by_algo(model, precision, everything, samples, refs, tol, algos=ALGOS[:1], family=family,
                            level=level, progress=progress)[ALGOS[0]] for _ in range(2)]
    fp32 = max((abs(a.share - b.share) for a, b in zip(*twice)), default=0.0)
    return KernelSpread(backend="ort-cuda" if family == knobs.ORT_CUDA else "ort-cpu",
                        configs=[f"{ALGO}={a}" for a in by], samples=len(samples), share=share, fp32_repeat=fp32)


def ties(model: Model, precision: str, fallback: frozenset[str], samples: Sequence[Sample], refs: Sequence[dict],
         tol: Tolerance, level: str | None = None) -> list[bool]:
    """For samples that fail `fallback` under ONNX Runtime CUDA's default algorithm choice: whether another choice
    passes them (named so in the report; they fail all the same)."""
    if not samples:
        return []
    by = shares_by_algo(model, precision, fallback, samples, refs, tol, algos=ALGOS[1:], level=level)
    return [any(by[a][i].passed for a in by) for i in range(len(samples))]


def _span(values: Sequence[float]) -> float:
    finite = [v for v in values if v == v and v != float("inf")]
    if len(finite) < len(values):
        return float("inf") if finite else 0.0
    return max(finite) - min(finite) if finite else 0.0
