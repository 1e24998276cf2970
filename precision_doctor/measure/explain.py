"""Why a node hurts in low precision, in words, from the facts the analysis measured for it.

Each reason has a kind (what goes wrong) and a sentence: overflow of values above the format's largest
value (in the output, or in an input that rounding turns into inf), cancellation (a subtraction of
nearly equal values, so its inputs' rounding becomes a large relative error; its producers named),
amplified input rounding (other ops whose error comes from their rounded inputs), accumulated
rounding (a sum over many rounded inputs: MatMul, Conv, reductions), underflow (values below the
smallest normal lose their digits), no error of its own (its low-precision result equals the FP32 one: it is
in FP32 for its neighbours' sake), and otherwise a small error of its own that adds up downstream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from precision_doctor.measure.analysis import INPUT_SENSITIVITY

ACCUMULATING_OPS = frozenset({
    "MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "ReduceSum", "ReduceMean", "ReduceL2", "ReduceSumSquare",
    "ReduceLogSumExp", "GlobalAveragePool", "AveragePool", "LayerNormalization", "Softmax", "LogSoftmax",
    "CumSum", "MatMulInteger", "LpNormalization", "InstanceNormalization", "GroupNormalization",
})
CANCELLING_OPS = frozenset({"Sub", "Add", "Sum"})
UNDERFLOW_SHARE = 0.1  # this share of outputs below the smallest normal makes underflow a reason
ACCUMULATION_FACTOR = 10.0  # local error this many times the rounding of the output alone


class LayerFacts(Protocol):
    """What the analysis measured for one node (analysis.LayerRow and report.Layer both have it)."""

    op_type: str
    local_rel_l2: float
    rounding_rel_l2: float
    ref_absmax: float
    input_ref_absmax: float
    frac_above_max: float
    frac_below_normal: float
    input_sensitive: bool


@dataclass(frozen=True)
class Limits:
    """The low-precision format: its name and range."""

    name: str  # "FP16"
    max: float
    smallest_normal: float


@dataclass(frozen=True)
class Reason:
    """One reason a node hurts: `kind` is overflow, input_overflow, nonfinite, cancellation, input_rounding,
    accumulation, underflow, exact or small_error; `text` says it in words."""

    kind: str
    text: str


def _num(v: object) -> float:
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def _g(x: float) -> str:
    return f"{x:.3g}"


def explain(layer: LayerFacts, limits: Limits, producers: list[str] | tuple[str, ...] = ()) -> list[Reason]:
    """The reasons `layer` hurts in `limits`' format, most serious first (at least one). `producers` are
    the nodes that compute its inputs (named in a cancellation)."""
    fmt = limits.name
    local, rounding = _num(layer.local_rel_l2), _num(layer.rounding_rel_l2)
    above, below = _num(layer.frac_above_max), _num(layer.frac_below_normal)
    out_max, in_max = _num(layer.ref_absmax), _num(layer.input_ref_absmax)
    out: list[Reason] = []
    if above > 0 or (math.isfinite(limits.max) and out_max > limits.max):
        share = f"{100 * above:.3g}% of its outputs reach" if above > 0 else "its outputs reach"
        out.append(Reason("overflow", f"overflow: {share} |{_g(out_max)}|, above {fmt}'s largest value "
                                      f"{_g(limits.max)}, and become inf in {fmt}"))
    if math.isfinite(limits.max) and in_max > limits.max:
        out.append(Reason("input_overflow", f"overflow of an input: it reads values up to |{_g(in_max)}|, above "
                                            f"{fmt}'s largest value {_g(limits.max)}; rounded to {fmt} they become inf"))
    if not out and (math.isinf(local) or math.isnan(local)):
        out.append(Reason("nonfinite", f"its {fmt} result is not finite (inf or NaN) although the FP32 one is"))
    ratio = local / rounding if rounding > 0 and math.isfinite(local) else math.inf
    fed = f" (fed by {', '.join(f'`{p}`' for p in producers)})" if producers else ""
    overflowing = any(r.kind in ("overflow", "input_overflow") for r in out)
    if overflowing or not math.isfinite(local):
        pass  # overflow (or a non-finite result) says it all; a ratio to the rounding means nothing there
    elif layer.input_sensitive and layer.op_type in CANCELLING_OPS:
        out.append(Reason("cancellation", f"cancellation: it adds or subtracts values that nearly cancel{fed}, so "
                                          f"the rounding of its inputs becomes a large relative error ({_ratio(ratio)} "
                                          f"the rounding of its own output)"))
    elif layer.input_sensitive:
        out.append(Reason("input_rounding", f"its inputs' rounding{fed} is amplified: its error is {_ratio(ratio)} "
                                            f"the rounding of its own output (more than {INPUT_SENSITIVITY:g}x)"))
    elif layer.op_type in ACCUMULATING_OPS and ratio > ACCUMULATION_FACTOR and math.isfinite(local):
        out.append(Reason("accumulation", f"accumulated rounding: it sums over many rounded inputs, and its error "
                                          f"({_g(local)} relative) is {_ratio(ratio)} the rounding of its output alone"))
    if below >= UNDERFLOW_SHARE:
        out.append(Reason("underflow", f"underflow: {100 * below:.3g}% of its outputs are below {fmt}'s smallest "
                                       f"normal value {_g(limits.smallest_normal)}, where {fmt} keeps fewer digits or "
                                       "flushes them to zero"))
    if not out and local == 0:
        out.append(Reason("exact", f"no error of its own: its {fmt} result equals its FP32 one on the captured "
                                   "samples; it is in FP32 with its neighbours, not for its own rounding"))
    if not out:
        err = f" ({_g(local)} relative)" if math.isfinite(local) and local > 0 else ""
        out.append(Reason("small_error", f"a small error of its own{err} that adds up with the others' downstream: "
                                         "the search found the tolerance is not met without it in FP32"))
    return out


def _ratio(r: float) -> str:
    return f"{r:.0f}x" if math.isfinite(r) else "many times"
