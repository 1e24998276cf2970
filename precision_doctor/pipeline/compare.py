"""`compare`: capture reference and low-precision runs, analyse them, write the layer table."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from precision_doctor.data.activations import ActivationStore
from precision_doctor.data.workload import Workload
from precision_doctor.graph.formats import get_format
from precision_doctor.measure.analysis import Analysis, analyse
from precision_doctor.measure.capture import CaptureSettings, Progress, capture
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.results.jsonio import write_json, write_text_atomic

ACTIVATIONS = "activations.h5"


@dataclass
class CompareResult:
    out_dir: Path
    analysis: Analysis


def capture_and_analyse(
    work: Workload,
    precision: str,
    tolerance: Tolerance,
    out_dir: Path,
    fallback: frozenset[str] = frozenset(),
    settings: CaptureSettings = CaptureSettings(),
    progress: Progress | None = None,
) -> Analysis:
    """Capture into `out_dir/activations.h5` (written under a temporary name, then renamed)."""
    fmt = get_format(precision)
    final = out_dir / ACTIVATIONS
    tmp = out_dir / f".{ACTIVATIONS}.partial"
    attrs = {"tolerance": tolerance.to_dict(), "input_source": work.inputs.describe()}
    capture(work.model, work.samples, fmt, tmp, fallback, settings, attrs=attrs, progress=progress)
    tmp.replace(final)
    with ActivationStore(final) as store:
        return analyse(store, tolerance=tolerance, model=work.model)


def write_layer_tables(out_dir: Path, analysis: Analysis) -> None:
    write_json(out_dir / "layers.json", analysis.to_dict())
    write_text_atomic(out_dir / "layers.csv", analysis.layers_csv())


def run_compare(
    work: Workload,
    precision: str,
    tolerance: Tolerance,
    out_dir: Path,
    settings: CaptureSettings = CaptureSettings(),
    progress: Progress | None = None,
) -> CompareResult:
    analysis = capture_and_analyse(work, precision, tolerance, out_dir, settings=settings, progress=progress)
    write_layer_tables(out_dir, analysis)
    return CompareResult(out_dir, analysis)


def reanalyse(activations: Path, tolerance: Tolerance | None = None) -> Analysis:
    """Analyse a stored capture again, without the model."""
    with ActivationStore(activations) as store:
        tol = tolerance or Tolerance(**store.attr("tolerance", {}))
        return analyse(store, tolerance=tol)
