"""The shapes a run's samples give a model's inputs, against the shapes the model file declares.

A dimension is dynamic where the file says so: a symbolic `dim_param`, no value, or a value of 0 or below
(exporters write -1; `graph.model.declared_dim`). For each input the samples span a range, `min` <= `opt` <=
`max` per dimension (`opt`: the shape most samples have): what TensorRT's optimization profile needs
(trtexec `--minShapes/--optShapes/--maxShapes`, polygraphy `--trt-min-shapes` ...) and what a run's numbers
are about. Samples can also be far from the model's use: polygraphy fills every dynamic dimension with 1 when
it makes inputs itself (`polygraphy run --save-inputs` on a model with dynamic height and width gives a
1x3x1x1 image), and an FP16 verdict on such inputs says nothing about real ones (`InputShape.concern`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

# An image-like input (4-D, 1, 3 or 4 channels first or last) whose dynamic sides are below this is far from any
# image a vision model is used on (data/augment.py treats sides from 16 on as images).
SMALLEST_IMAGE_SIDE = 16
IMAGE_CHANNELS = (1, 3, 4)


class ShapeConcern(str, Enum):
    """Why the samples' shape of an input is far from the model's use."""

    PLACEHOLDER = "placeholder"  # every dynamic dimension after the first is 1 (polygraphy's default fill)
    TINY_IMAGE = "tiny_image"  # an image-like input with a dynamic side below SMALLEST_IMAGE_SIDE


@dataclass(frozen=True)
class InputShape:
    """One model input: the dimensions the model file declares (None: dynamic) and the range the run's samples
    give it (`min`, `opt`, `max`, elementwise; `opt` is the most common shape, the first seen of those as common:
    `opt_samples` of the `samples` have it; 0: a report written before they were counted)."""

    name: str
    declared: tuple[int | None, ...]
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]
    opt_samples: int = 0
    samples: int = 0

    @property
    def dynamic(self) -> bool:
        """Whether the model leaves a dimension of this input open."""
        return None in self.declared

    @property
    def varies(self) -> bool:
        """Whether the samples give this input more than one shape."""
        return self.min != self.max

    @property
    def concern(self) -> ShapeConcern | None:
        """Why the samples' shape is far from the model's use; None when nothing says so."""
        open_dims = [i for i, d in enumerate(self.declared) if d is None]
        later = [i for i in open_dims if i > 0]  # the first dimension is usually the batch: 1 is normal there
        if later and all(self.max[i] == 1 for i in later):
            return ShapeConcern.PLACEHOLDER
        if len(self.declared) == 4 and self._channels_fixed():
            sides = [i for i in later if i in (self._sides())]
            if any(self.max[i] < SMALLEST_IMAGE_SIDE for i in sides):
                return ShapeConcern.TINY_IMAGE
        return None

    def _channels_fixed(self) -> bool:
        return self.declared[1] in IMAGE_CHANNELS or self.declared[3] in IMAGE_CHANNELS

    def _sides(self) -> tuple[int, int]:
        return (2, 3) if self.declared[1] in IMAGE_CHANNELS else (1, 2)

    def to_json(self) -> dict:
        return {"name": self.name, "declared": list(self.declared), "min": list(self.min), "opt": list(self.opt),
                "max": list(self.max), "opt_samples": self.opt_samples, "samples": self.samples}


def input_shapes(declared: Mapping[str, Sequence[int | None]], samples: Sequence[Mapping[str, object]]) -> list[InputShape]:
    """Each declared input's shape range over `samples` (inputs no sample holds are left out)."""
    out = []
    for name, dims in declared.items():
        shapes = [tuple(int(d) for d in np.shape(s[name])) for s in samples if name in s]
        if not shapes or any(len(s) != len(shapes[0]) for s in shapes):
            continue
        counts = Counter(shapes)
        opt = max(counts, key=lambda s: (counts[s], -shapes.index(s)))
        out.append(InputShape(name, tuple(dims), tuple(map(min, zip(*shapes))) if shapes[0] else (), opt,
                              tuple(map(max, zip(*shapes))) if shapes[0] else (), counts[opt], len(shapes)))
    return out


def dims_text(dims: Sequence[int], sep: str = "x") -> str:
    """`1x3x48x192` (trtexec) or, with sep ",", `1,3,48,192` (polygraphy's brackets go around it)."""
    return sep.join(str(int(d)) for d in dims)
