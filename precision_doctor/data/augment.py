"""Cheap augmentation of few samples: small perturbations of the user's own inputs.

Why it works here (docs/BENCHMARKS.md, "Generalization"): how much of the tolerance an FP16 answer
uses is an extreme over many output elements, and which elements are worst depends on the rounding
of every intermediate value, so it changes from one input to the next even when the inputs barely
differ. Gaussian noise of 1% of an input's own standard deviation moves the share of a fixed answer
as much as a new image, crop or audio chunk does (nudenet's YOLOv8n: 0.99 on the searched image,
1.1-1.5 on its perturbed copies, 1.0-1.65 on ten new images). A search that sees perturbed copies
cannot tune its answer to one rounding pattern; a check on fresh copies measures how far the answer
is from the tolerance on inputs it has not seen.

Image-like inputs (4-D floating tensors with 1, 3 or 4 channels first or last, at least 16 x 16) are also
changed as a new photo differs from the last in exposure and white balance, before the noise: contrast
x U(0.8, 1.2) about the image's mean, then per channel a gain U(0.7, 1.1) and an offset of U(-0.1, 0.1)
of the input's range. Noise alone does not show how much more of the tolerance such a photo can use:
nudenet's detector at atol = rtol = 1e-3, searched on two images with noise copies, failed (1.06x) on a
darker image with little blue among ten new ones; with these copies its answer held on all ten
(docs/BENCHMARKS.md, "Stop 18").

Only floating inputs with more than a few distinct values are perturbed: integer inputs (token ids,
sample rates), booleans and float masks or one-hot inputs (few distinct values) are copied as they
are. Perturbed values stay within the range the user's samples span for that input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Sample = dict[str, np.ndarray]
CATEGORICAL_LEVELS = 8  # a float input with at most this many distinct values (over all samples) is a mask
IMAGE_CHANNELS = (1, 3, 4)  # grey, RGB/BGR, RGBA: 2 channels are a sampling grid or a flow field, not an image
IMAGE_MIN_SIDE = 16  # a 4-D input with such channels is an image when both its sides are at least this long
CONTRAST = (0.8, 1.2)  # photometric change of an image-like input: contrast about its mean,
GAIN = (0.7, 1.1)  # a gain per channel,
OFFSET = (-0.1, 0.1)  # and an offset per channel, as a share of the input's range


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
    CATEGORICAL_LEVELS distinct values (among the first UNIQUE_SCAN elements) and not constant. One pass over
    the samples, one at a time (a SampleSet loads them on demand)."""
    names = list(samples[0])
    stats = {name: _Span() for name in names}
    for i in range(len(samples)):
        s = samples[i]
        for name in names:
            stats[name].add(np.asarray(s[name]))
    return {name: span.range for name, span in stats.items() if span.range is not None}


UNIQUE_SCAN = 1 << 20  # elements whose distinct values decide whether a float input is a mask


class _Span:
    """A float input's range over the samples, whether all its values are finite, and its distinct values
    among the first UNIQUE_SCAN elements."""

    def __init__(self):
        self.floating, self.finite, self.lo, self.hi = True, True, math.inf, -math.inf
        self.seen, self.levels = 0, np.empty(0)

    def add(self, a: np.ndarray) -> None:
        if not (self.floating and np.issubdtype(a.dtype, np.floating)):
            self.floating = False
            return
        flat = a.ravel()
        if not np.isfinite(flat).all():
            self.finite = False
            return
        if self.seen < UNIQUE_SCAN:
            self.levels = np.unique(np.concatenate([self.levels, flat[: UNIQUE_SCAN - self.seen]]))
            self.seen += min(flat.size, UNIQUE_SCAN - self.seen)
        if flat.size:
            self.lo, self.hi = min(self.lo, float(flat.min())), max(self.hi, float(flat.max()))

    @property
    def range(self) -> tuple[float, float] | None:
        if not (self.floating and self.finite) or self.levels.size <= CATEGORICAL_LEVELS or not self.hi > self.lo:
            return None
        return self.lo, self.hi


def channel_axis(x: np.ndarray) -> int | None:
    """The channel axis of an image-like input (NCHW: 1, NHWC: 3), None for any other input."""
    if x.ndim != 4:
        return None
    if x.shape[1] in IMAGE_CHANNELS and min(x.shape[2:]) >= IMAGE_MIN_SIDE:
        return 1
    if x.shape[3] in IMAGE_CHANNELS and min(x.shape[1:3]) >= IMAGE_MIN_SIDE:
        return 3
    return None


def recipe(samples: Sequence[Sample]) -> str:
    """How the copies of these samples are made: "photometric+noise" when an input is image-like, else
    "noise" (run_settings.json records it: a resume must make the copies its checkpoint's verdicts were of)."""
    ranges = perturbable(samples) if samples else {}
    images = any(channel_axis(np.asarray(samples[0][name])) is not None for name in ranges)
    return "photometric+noise" if images else "noise"


def photometric(sample: Sample, ranges: dict[str, tuple[float, float]], rng: np.random.Generator) -> Sample:
    """The sample with each perturbable image-like input's contrast, per-channel gain and offset changed
    (CONTRAST, GAIN, OFFSET), clipped to its range; other inputs as they are."""
    out = dict(sample)
    for name, x in sample.items():
        axis = channel_axis(np.asarray(x)) if name in ranges else None
        if axis is None:
            continue
        lo, hi = ranges[name]
        shape = [1] * x.ndim
        shape[axis] = x.shape[axis]
        xf = x.astype(np.float64)
        mean = xf.mean()
        y = mean + rng.uniform(*CONTRAST) * (xf - mean)
        y = y * rng.uniform(*GAIN, size=shape) + rng.uniform(*OFFSET, size=shape) * (hi - lo)
        out[name] = np.clip(y, lo, hi).astype(x.dtype)
    return out


def perturb(sample: Sample, ranges: dict[str, tuple[float, float]], noise: float, rng: np.random.Generator) -> Sample:
    """One perturbed copy: image-like inputs changed as `photometric` says, then Gaussian noise of `noise` x
    each perturbable input's std, clipped to its range."""
    sample = photometric(sample, ranges, rng)
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
