"""A report's layer rows as the reports show them: in topological order, by name, the top offenders."""

from __future__ import annotations

import math

from precision_doctor.render.numbers import num
from precision_doctor.results.report import Layer, Report

TOP_OFFENDERS = 15


def layers_in_order(report: Report) -> list[Layer]:
    """The report's layer rows in topological order."""
    return sorted(report.layers, key=lambda lay: num(lay.index))


def layers_by_name(report: Report) -> dict[str, Layer]:
    return {str(lay.name): lay for lay in report.layers}


def top_offenders(report: Report, n: int = TOP_OFFENDERS) -> list[Layer]:
    """Layers by rank (1 = worst); layers without a rank last, by score."""

    def key(lay: Layer) -> tuple[float, float]:
        r = num(lay.rank)
        s = num(lay.score)
        return (r if math.isfinite(r) else math.inf, -s if not math.isnan(s) else math.inf)

    return sorted(report.layers, key=key)[:n]
