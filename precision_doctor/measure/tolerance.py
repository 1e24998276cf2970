"""Tolerance checks, in one place. The default is polygraphy's `elemwise` check.

An element fails when `(|out-ref| > atol or NaN) and (|out-ref|/|ref| > rtol or NaN)`, with
`ref == 0` replaced by 2.22e-16 in the division; an output fails when any element fails. The
`max`, `mean` and `median` statistics fail when both the absolute and the relative statistic
exceed their tolerance (or are NaN), as in polygraphy. `cosine_floor` adds a check that the
cosine similarity of output and reference is at least that value.

`tol_used` says how much of the tolerance the worst element (or statistic) uses: min(abs/atol,
rel/rtol), so an output passes the atol/rtol check exactly when it is at most 1. An answer at 0.999
passes on these samples and this machine and may fail on other hardware; a search `margin` m asks
for at most 1 - m (the same check with atol and rtol scaled by 1 - m). The cosine floor is outside
both: it is checked as given and does not count in `tol_used`.

Per-output tolerances are polygraphy's: `--atol 1e-3 --atol out:1e-2` is atol 1e-3 for every output but
`out`, which gets 1e-2 (`output_atol`, `output_rtol`: "NAME:VALUE" strings, as the other named settings;
`for_output(name)` is the tolerance one output is checked with). Intermediate tensors (the analysis' first
divergence) use the plain values.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from precision_doctor.errors import SpecError

EPSILON = 2.220446049250313e-16
ERROR_STATS = ("elemwise", "max", "mean", "median")


@dataclass(frozen=True)
class Tolerance:
    """What "close enough" means. Defaults are polygraphy's; `output_atol`/`output_rtol` ("NAME:VALUE") give
    single outputs their own (polygraphy's `--atol NAME:VALUE`)."""

    atol: float = 1e-5
    rtol: float = 1e-5
    check_error_stat: str = "elemwise"
    cosine_floor: float | None = None
    output_atol: tuple[str, ...] = ()
    output_rtol: tuple[str, ...] = ()

    def __post_init__(self):
        for key in ("output_atol", "output_rtol"):  # lists from JSON
            object.__setattr__(self, key, tuple(str(v) for v in getattr(self, key)))
        if self.check_error_stat not in ERROR_STATS:
            raise SpecError("tolerance.check_error_stat", "{tolerance.check_error_stat} must be one of "
                            f"{', '.join(ERROR_STATS)}, got '{self.check_error_stat}'")
        for setting, value in (("tolerance.atol", self.atol), ("tolerance.rtol", self.rtol)):
            if not (math.isfinite(value) and value >= 0):
                raise SpecError(setting, f"{{{setting}}} must be a non-negative finite number, got {value}")
        if self.cosine_floor is not None and not -1.0 <= self.cosine_floor <= 1.0:
            raise SpecError("tolerance.cosine_floor", f"{{tolerance.cosine_floor}} must lie in [-1, 1], "
                            f"got {self.cosine_floor}")
        self.per_output("atol")  # each "NAME:VALUE" checked here
        self.per_output("rtol")

    def to_dict(self) -> dict:
        """report.json's and run_settings.json's `tolerance` (the per-output keys only where given, so that
        files written before they existed still compare equal)."""
        out = asdict(self)
        for key in ("output_atol", "output_rtol"):
            if not out[key]:
                del out[key]
            else:
                out[key] = list(out[key])
        return out

    def per_output(self, kind: str) -> dict[str, float]:
        """{output name: its own atol (`kind` "atol") or rtol}; SpecError names the setting for a bad entry."""
        setting = f"tolerance.output_{kind}"
        out: dict[str, float] = {}
        for item in getattr(self, f"output_{kind}"):
            name, sep, value = str(item).rpartition(":")
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not sep or not name or not (math.isfinite(number) and number >= 0):
                raise SpecError(setting, f"{{{setting}}}: expected NAME:VALUE with a non-negative number (polygraphy's "
                                f"--{kind} out0:1e-3), got '{item}'")
            out[name] = number
        return out

    @property
    def outputs_named(self) -> list[str]:
        """The outputs with a tolerance of their own."""
        return list(dict.fromkeys([*self.per_output("atol"), *self.per_output("rtol")]))

    def for_output(self, name: str) -> Tolerance:
        """The tolerance `name` is checked with: its own atol/rtol where given, else the plain ones."""
        if not self.output_atol and not self.output_rtol:
            return self
        return replace(self, atol=self.per_output("atol").get(name, self.atol),
                       rtol=self.per_output("rtol").get(name, self.rtol), output_atol=(), output_rtol=())

    def scaled(self, factor: float, digits: int | None = None) -> Tolerance:
        """The same check with every atol and rtol multiplied by `factor` (a search margin is 1 - factor); `digits`:
        each rounded to that many significant digits (a tolerance to print as a flag, without float noise)."""
        def times(v: float) -> float:
            return v * factor if digits is None else float(f"{v * factor:.{digits}g}")

        def scale(kind: str) -> tuple[str, ...]:
            return tuple(f"{n}:{times(v)!r}" if digits is None else f"{n}:{times(v):g}"
                         for n, v in self.per_output(kind).items())

        return replace(self, atol=times(self.atol), rtol=times(self.rtol), output_atol=scale("atol"),
                       output_rtol=scale("rtol"))


@dataclass(frozen=True)
class OutputCheck:
    """Error metrics of one output against its reference, and the verdict."""

    passed: bool
    max_abs: float
    mean_abs: float
    median_abs: float
    max_rel: float
    mean_rel: float
    median_rel: float
    cosine: float
    mismatches: int
    size: int
    tol_used: float = float("nan")  # NaN: not recorded (checkpoints of earlier versions)

    def to_dict(self) -> dict:
        return asdict(self)


def diffs(out: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Absolute and relative differences, computed in float64."""
    o = np.asarray(out, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        absdiff = np.abs(o - r)
        denom = np.abs(np.where(r == 0, EPSILON, r))
        reldiff = absdiff / denom
    return absdiff, reldiff


def cosine_similarity(out: np.ndarray, ref: np.ndarray) -> float:
    o = np.asarray(out, dtype=np.float64).ravel()
    r = np.asarray(ref, dtype=np.float64).ravel()
    return _cosine(o, r)


def _cosine(o: np.ndarray, r: np.ndarray) -> float:
    """Cosine similarity of two flat float64 arrays, from numpy's own (pairwise) sums, not BLAS: OpenBLAS splits
    a long dot product over threads whose main thread spins until a core is free (8 ms for 65k elements on a
    busy machine, against 0.1 ms) and whose last bits depend on the number of cores."""
    with np.errstate(invalid="ignore", over="ignore"):
        no, nr = np.sqrt(np.add.reduce(o * o)), np.sqrt(np.add.reduce(r * r))
        if no == 0 and nr == 0:
            return 1.0
        if no == 0 or nr == 0:
            return 0.0
        return float(np.add.reduce(o * r) / (no * nr))


def _median(x: np.ndarray) -> float:
    """np.median of a float array, NaN if any element is NaN, from one partition (np.median's own NaN check and
    mean of the two middle elements cost as much again) of the elements between two values a strided sample puts
    around the median (`_middle`; a 2M-element output's median 3x faster), or of all of them where those miss it."""
    flat = x.ravel()
    n = flat.size
    if np.isnan(flat).any():
        return float("nan")
    k = n // 2
    ranks = (k,) if n % 2 else (k - 1, k)
    below, middle = _middle(flat, k)
    if not (below <= ranks[0] and ranks[-1] < below + middle.size):
        below, middle = 0, flat
    elif middle.min() == middle.max():  # one value covers the middle (most errors 0): no partition
        v = middle[:1]
        return float(v[0]) if n % 2 else float((v[0] + v[0]) / 2)
    part = np.partition(middle, [r - below for r in ranks])
    return float(part[k - below]) if n % 2 else float((part[k - 1 - below] + part[k - below]) / 2)


MEDIAN_SAMPLE = 4096  # elements of the strided sample that brackets the median of a large array


def _middle(flat: np.ndarray, k: int) -> tuple[int, np.ndarray]:
    """How many elements lie below a bracket around rank k, and the elements within it (all of them, and 0 below,
    for arrays too small to gain): the bracket is the sample's order statistics 4 standard errors either side."""
    n = flat.size
    if n < 16 * MEDIAN_SAMPLE:
        return 0, flat
    sample = np.sort(flat[:: n // MEDIAN_SAMPLE])
    m = sample.size
    at, spread = k * m // n, int(4 * np.sqrt(m)) + 1
    lo, hi = sample[max(at - spread, 0)], sample[min(at + spread, m - 1)]
    middle = flat[(flat >= lo) & (flat <= hi)]
    return int(np.count_nonzero(flat < lo)), middle


def _stat_failed(stat: float, tol: float) -> bool:
    return bool(np.isnan(stat) or stat > tol)


def _share(x: np.ndarray | float, tol: float) -> np.ndarray:
    """x / tol with NaN as infinity, and 0 / 0 as 0 (a zero tolerance allows only zero)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = x / tol if tol > 0 else np.where(x == 0, 0.0, np.inf)
    return np.where(np.isnan(x), np.inf, r)


def _used(absd: np.ndarray | float, reld: np.ndarray | float, tol: Tolerance) -> float:
    """The largest min(abs/atol, rel/rtol), NaN counting as infinity: how much of the tolerance the worst element
    uses. With both tolerances above 0, from `fmin` (which takes the other where one is NaN, as min(inf, x) does)
    and one NaN test of the maximum (an element NaN on both sides: infinity), without the arrays' NaN masks."""
    if not np.size(absd):
        return 0.0
    if tol.atol > 0 and tol.rtol > 0:
        with np.errstate(invalid="ignore", over="ignore"):
            worst = float(np.max(np.fmin(np.divide(absd, tol.atol), np.divide(reld, tol.rtol))))
        return float("inf") if np.isnan(worst) else worst
    return float(np.max(np.minimum(_share(absd, tol.atol), _share(reld, tol.rtol))))


def check(out: np.ndarray, ref: np.ndarray, tol: Tolerance) -> OutputCheck:
    """Compare one output with its reference under `tol`."""
    if np.shape(out) != np.shape(ref):
        nan = float("nan")
        return OutputCheck(False, nan, nan, nan, nan, nan, nan, nan, int(np.size(ref)), int(np.size(ref)), float("inf"))
    if not np.issubdtype(np.asarray(ref).dtype, np.floating):
        same = np.asarray(out) == np.asarray(ref)
        n_bad = int(np.size(same) - np.count_nonzero(same))
        v = float(n_bad > 0)
        return OutputCheck(n_bad == 0, v, v, v, v, v, v, 1.0 - v, n_bad, int(np.size(ref)), float("inf") if n_bad else 0.0)
    o = np.asarray(out, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        absdiff = np.abs(o - r)
        reldiff = absdiff / np.abs(np.where(r == 0, EPSILON, r))
    size = absdiff.size
    with np.errstate(invalid="ignore"):
        stats = {
            "max_abs": float(np.max(absdiff)) if size else 0.0,
            "mean_abs": float(np.mean(absdiff)) if size else 0.0,
            "median_abs": _median(absdiff) if size else 0.0,
            "max_rel": float(np.max(reldiff)) if size else 0.0,
            "mean_rel": float(np.mean(reldiff)) if size else 0.0,
            "median_rel": _median(reldiff) if size else 0.0,
        }
        bad = ((absdiff > tol.atol) | np.isnan(absdiff)) & ((reldiff > tol.rtol) | np.isnan(reldiff))
    mismatches = int(np.count_nonzero(bad))
    if tol.check_error_stat == "elemwise":
        passed = mismatches == 0
        used = _used(absdiff, reldiff, tol)
    else:
        s = tol.check_error_stat
        passed = not (_stat_failed(stats[f"{s}_abs"], tol.atol) and _stat_failed(stats[f"{s}_rel"], tol.rtol))
        used = _used(stats[f"{s}_abs"], stats[f"{s}_rel"], tol)
    cos = _cosine(o.ravel(), r.ravel())
    if tol.cosine_floor is not None and not (cos >= tol.cosine_floor):
        passed = False
    return OutputCheck(passed=passed, cosine=cos, mismatches=mismatches, size=size, tol_used=used, **stats)


def check_all(
    outs: dict[str, np.ndarray], refs: dict[str, np.ndarray], tol: Tolerance
) -> dict[str, OutputCheck]:
    """Check every reference output (each with its own tolerance, `Tolerance.for_output`); a missing output fails."""
    return {name: check(outs.get(name, np.empty(0)), ref, tol.for_output(name)) for name, ref in refs.items()}


def merge(checks: list[OutputCheck]) -> OutputCheck:
    """One output's checks over several samples: fails if any failed; worst maxima, average means."""
    if len(checks) == 1:
        return checks[0]
    size = sum(c.size for c in checks)

    def wmean(attr: str) -> float:
        return float(sum(getattr(c, attr) * c.size for c in checks) / max(size, 1))

    def worst(attr: str) -> float:
        vals = [getattr(c, attr) for c in checks]
        return float("nan") if any(np.isnan(v) for v in vals) else max(vals)

    return OutputCheck(
        passed=all(c.passed for c in checks),
        max_abs=worst("max_abs"),
        mean_abs=wmean("mean_abs"),
        median_abs=float(np.median([c.median_abs for c in checks])),
        max_rel=worst("max_rel"),
        mean_rel=wmean("mean_rel"),
        median_rel=float(np.median([c.median_rel for c in checks])),
        cosine=min(c.cosine for c in checks),
        mismatches=sum(c.mismatches for c in checks),
        size=size,
        tol_used=worst("tol_used"),
    )
