"""Perturbed copies of the search samples (`--augment N`, none by default): the oracle checks each search sample's
copies besides the sample itself (data/augment.py: 1% noise on continuous float inputs, after a change of
exposure and white balance on image-like ones; integer inputs untouched), so the search cannot tune its answer
to one rounding pattern. The copies are made here, where the oracle's samples are assembled, never captured;
strategies see only the oracle. They are off by default: on trained models judged on the GPU (issue 33) they
grew answers where the unseen samples did not need it, and the held-out samples of the user's data are what
says whether an answer holds (pipeline/validate.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from precision_doctor.data.augment import Augment, augment, perturbable
from precision_doctor.data.inputs import Sample

NOISE = 0.01  # noise std, as a share of each input's own std in that sample
SEARCH_SEED = 0  # the oracle's copies


def perturbed_copies(samples: Sequence[Sample], copies: int, seed: int, reference: Callable[[Sample], dict],
                     ids: Sequence[int] | None = None,
                     ranges: dict[str, tuple[float, float]] | None = None) -> tuple[list[Sample], list[dict]]:
    """`copies` perturbed copies of each sample (the first sample's first) and their FP32 reference outputs
    (`reference`); none when `copies` is 0 or no input is a continuous float (all integer, masks). Copy c of the
    sample with id i (`ids`: the search samples' indices; default their positions) is the same whichever others
    are asked for; `ranges`: what the perturbed values are clipped to (default: what `samples` span)."""
    if ranges is None:
        ranges = perturbable(samples) if copies and samples else {}
    if not copies or not samples or not ranges:
        return [], []
    out = augment(samples, Augment(copies, NOISE, seed), ranges, ids=ids)
    return out, [reference(s) for s in out]


def copy_maker(samples: Sequence[Sample], copies: int, seed: int,
               reference: Callable[[Sample], dict]) -> Callable[[list[int], list[int]], tuple[list[Sample], list[dict]]]:
    """`make(indices, start)`: `copies` perturbed copies of the search samples `indices` (ids: those indices),
    clipped to the ranges that the samples `start` (the working set the search started with) span, so a sample's
    copies are the same whenever it joins the working set."""
    ranges: dict[tuple[int, ...], dict[str, tuple[float, float]]] = {}

    def make(indices: list[int], start: list[int]) -> tuple[list[Sample], list[dict]]:
        key = tuple(start)
        if key not in ranges:
            ranges[key] = perturbable([samples[i] for i in start]) if copies and start else {}
        return perturbed_copies([samples[i] for i in indices], copies, seed, reference, ids=indices, ranges=ranges[key])

    return make
