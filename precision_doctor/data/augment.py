"""Cheap augmentation of few samples: small perturbations of the user's own inputs.

Why it works here (docs/BENCHMARKS.md, "Generalization"): how much of the tolerance an FP16 answer
uses is an extreme over many output elements, and which elements are worst depends on the rounding
of every intermediate value, so it changes from one input to the next even when the inputs barely
differ. Gaussian noise of 1% of an input's own standard deviation moves the share of a fixed answer
as much as a new image, crop or audio chunk does (nudenet's YOLOv8n: 0.99 on the searched image,
1.1-1.5 on its perturbed copies, 1.0-1.65 on ten new images). A search that sees perturbed copies
cannot tune its answer to one rounding pattern; a check on fresh copies measures how far the answer
is from the tolerance on inputs it has not seen.

Only floating inputs with more than a few distinct values are perturbed: integer inputs (token ids,
sample rates), booleans and float masks or one-hot inputs (few distinct values) are copied as they
are. Perturbed values stay within the range the user's samples span for that input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Sample = dict[str, np.ndarray]
CATEGORICAL_LEVELS = 8  # a float input with at most this many distinct values (over all samples) is a mask


@dataclass(frozen=True)
class Augment:
    """`copies` perturbed copies of each sample; noise std = `noise` x the input's std in that sample."""

    copies: int = 3
    noise: float = 0.01
    seed: int = 0

    def key(self) -> str:
        return f"n{self.noise:g}s{self.seed}"


def perturbable(samples: Sequence[Sample]) -> dict[str, tuple[float, float]]:
    """Inputs to perturb, with the [min, max] the samples span: floating, finite, more than
    CATEGORICAL_LEVELS distinct values and not constant."""
    out = {}
    for name in samples[0]:
        arrays = [np.asarray(s[name]) for s in samples]
        if not all(np.issubdtype(a.dtype, np.floating) for a in arrays):
            continue
        flat = np.concatenate([a.ravel() for a in arrays])
        if not np.isfinite(flat).all() or np.unique(flat[: 1 << 20]).size <= CATEGORICAL_LEVELS:
            continue
        lo, hi = float(flat.min()), float(flat.max())
        if hi > lo:
            out[name] = (lo, hi)
    return out


def perturb(sample: Sample, ranges: dict[str, tuple[float, float]], noise: float, rng: np.random.Generator) -> Sample:
    """One perturbed copy: Gaussian noise of `noise` x each perturbable input's std, clipped to its range."""
    out = {}
    for name, x in sample.items():
        if name not in ranges:
            out[name] = x
            continue
        lo, hi = ranges[name]
        scale = noise * float(np.std(x)) or noise * (hi - lo)
        y = x + rng.normal(0.0, scale, x.shape)
        out[name] = np.clip(y, lo, hi).astype(x.dtype)
    return out


def augment(samples: Sequence[Sample], spec: Augment, ranges: dict[str, tuple[float, float]] | None = None,
            ids: Sequence[int] | None = None) -> list[Sample]:
    """`spec.copies` perturbed copies of each sample, in order (sample 0's copies first). Copy c of
    the sample with id i (its index unless `ids` says otherwise) is the same whatever else is asked
    for (its generator is seeded with (seed, i, c)). `ranges` default to what `samples` span."""
    ranges = perturbable(samples) if ranges is None else ranges
    ids = range(len(samples)) if ids is None else ids
    return [perturb(s, ranges, spec.noise, np.random.default_rng([spec.seed, i, c]))
            for s, i in zip(samples, ids) for c in range(spec.copies)]
