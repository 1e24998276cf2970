"""The tolerance against what the low-precision format can represent at the model's outputs.

Rounding the FP32 reference outputs to FP16 (or BF16) and back changes them by up to half a unit in the last place
(a relative 2**-11 for FP16): no computation in that format can do better where it writes an output. Checked under
the user's tolerance like any output (`measure/tolerance.check`), that rounding uses a share of it; above 1 the
tolerance is tighter than the format can represent there, and every answer that leaves an output's node in low
precision fails, and upstream errors usually keep most other nodes in FP32 too (polygraphy's default atol = rtol = 1e-5 is
such a tolerance for FP16: its rounding alone uses about 49x it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from precision_doctor.graph.formats import Format
from precision_doctor.measure.tolerance import Tolerance, check

HEADROOM = 2.0  # a realistic tolerance leaves the computation at least this multiple of the rounding's share


@dataclass(frozen=True)
class RoundingFloor:
    """What rounding the FP32 reference outputs to `precision` alone uses of the tolerance: `shares`, per output, the
    largest share (min(abs/atol, rel/rtol) of the worst element, or of the check's statistic) over `samples`
    samples; inf where an output holds values beyond the format's range. `allowed`: the share the search allows
    (1 - its margin: the search asks for that much of the tolerance; 1: the tolerance itself)."""

    precision: str
    samples: int
    shares: dict[str, float] = field(default_factory=dict)
    allowed: float = 1.0

    @property
    def worst(self) -> tuple[str | None, float]:
        """The output whose rounding uses the most of the tolerance, and that share (None, 0.0: no floating output)."""
        if not self.shares:
            return None, 0.0
        name = max(self.shares, key=lambda n: (math.isnan(self.shares[n]), self.shares[n]))
        return name, self.shares[name]

    @property
    def below(self) -> bool:
        """Whether the tolerance (as the search asks for it: `allowed`) is tighter than the format can represent at
        some output (its rounding alone fails it)."""
        share = self.worst[1]
        return math.isnan(share) or share > self.allowed

    def needs(self, tol: Tolerance) -> Tolerance | None:
        """The tolerance the rounding alone needs: `tol` scaled by the worst share (None: beyond the format's range,
        or a tolerance of 0, which no scale helps)."""
        share = self.worst[1] / self.allowed
        if not math.isfinite(share) or share <= 1.0 or not (tol.atol or tol.rtol):
            return None
        return tol.scaled(share, digits=3)

    def realistic(self, tol: Tolerance) -> Tolerance | None:
        """A tolerance to suggest: `tol` scaled by the power of ten that leaves at least HEADROOM x the rounding's
        share (1e-5 -> 1e-3 for FP16); None where `needs` is None."""
        if self.needs(tol) is None:
            return None
        return tol.scaled(10.0 ** math.ceil(math.log10(HEADROOM * self.worst[1] / self.allowed)), digits=3)


def rounding_floor(references: Iterable[dict[str, np.ndarray]], fmt: Format, tol: Tolerance,
                   allowed: float = 1.0) -> RoundingFloor:
    """Each floating output's reference rounded to `fmt` and checked against itself under `tol` (each output with
    its own tolerance; the cosine floor is not a share; finite elements only), over every sample of `references`."""
    shares: dict[str, float] = {}
    n = 0
    for ref in references:
        n += 1
        for name, value in ref.items():
            value = np.asarray(value)
            if not np.issubdtype(value.dtype, np.floating):
                continue
            value = value[np.isfinite(value)]  # an inf or NaN of FP32 itself is no rounding's doing
            with np.errstate(over="ignore", invalid="ignore"):
                used = check(fmt.round(value), value, tol.for_output(name)).tol_used
            shares[name] = max(shares.get(name, 0.0), float(used), key=lambda v: (math.isnan(v), v))
    return RoundingFloor(fmt.name, n, shares, allowed)
