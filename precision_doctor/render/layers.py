"""A report's layer rows as the reports show them: in topological order, by name, and ranked as they run (the top
offenders of report.md, `compare`'s table)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from precision_doctor.render.numbers import num
from precision_doctor.results.report import Layer, Report

TOP_OFFENDERS = 15


class _Row(Protocol):
    """What a ranking reads of a layer row (`results.report.Layer`, `measure.analysis.LayerRow`)."""

    name: str
    op_type: str
    rank: int | None
    score: float | None
    folded_into: str | None


R = TypeVar("R", bound=_Row)


@dataclass(frozen=True)
class Ranked(Generic[R]):
    """One row of a ranking, named after what runs: `row` holds the numbers; `name` and `op` are the node that
    computes them ("Conv@1", "Conv+BatchNormalization" for a BatchNormalization folded into its Conv, whose name
    is then `folded`)."""

    row: R
    name: str
    op: str
    folded: str | None = None


# what a ranking with folded rows says under it (compare's table, report.md's top offenders)
FOLDED_NOTE = ("{rows} Conv+BatchNormalization: ONNX Runtime folds the BatchNormalization into the Conv's "
               "low-precision weights and bias (the conv-bn-fold rule of the emulation rules), so the Conv with the "
               "folded weights is what runs and what errs: the row is named after it and holds the folded kernel's "
               "error (layers.csv: the BatchNormalization's row, folded_into the Conv; the Conv's own row there, whose "
               "rank is skipped here, is its error unfolded, which happens only with the BatchNormalization in FP32). "
               "Keeping either node in FP32 stops the folding.")


def layers_in_order(report: Report) -> list[Layer]:
    """The report's layer rows in topological order."""
    return sorted(report.analysis.layers, key=lambda lay: num(lay.index))


def layers_by_name(report: Report) -> dict[str, Layer]:
    return {str(lay.name): lay for lay in report.analysis.layers}


def _rank_key(row: _Row) -> tuple[float, float]:
    """By rank (1 = worst); rows without a rank last, by score."""
    r, s = num(row.rank), num(row.score)
    return (r if math.isfinite(r) else math.inf, -s if not math.isnan(s) else math.inf)


def ranking(rows: Iterable[R], n: int | None = None) -> list[Ranked[R]]:
    """The first `n` rows by rank, each as what runs: a node folded into another (`folded_into`: a
    BatchNormalization into the Conv before it) is shown as that node, with its own numbers (the folded kernel's
    error, at the folded node's rank), and that node's own row (its error unfolded, which happens only where the
    folded one is FP32) is left out, so the node that runs is ranked once, by what it computes when it runs."""
    rows = sorted(rows, key=_rank_key)
    ops = {r.name: r.op_type for r in rows}
    hosts = {r.folded_into for r in rows if r.folded_into}
    out: list[Ranked[R]] = []
    for r in rows:
        if r.folded_into:
            out.append(Ranked(r, r.folded_into, f"{ops.get(r.folded_into, '?')}+{r.op_type}", r.name))
        elif r.name not in hosts:
            out.append(Ranked(r, r.name, r.op_type))
    return out[:n]


def top_offenders(report: Report, n: int = TOP_OFFENDERS) -> list[Ranked[Layer]]:
    """The report's worst layers as they run (`ranking`)."""
    return ranking(report.analysis.layers, n)
