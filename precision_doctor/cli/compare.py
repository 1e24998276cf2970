"""`precision-doctor compare`: FP32 and emulated low precision, layer by layer; the offenders table."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import typer
from rich.table import Table

from precision_doctor.cli.options import CAPTURE, EMULATION, INPUTS, PRECISION, RUN_DIR, TOLERANCE, Options, with_options
from precision_doctor.cli.shared import announce_renamed, app, console, progress_bar, stops_on_interrupt, uses_run_dir
from precision_doctor.control import CaptureEvent, LoadedEvent, PhaseEvent, ProgressEvent, StopToken, sigint_stops
from precision_doctor.errors import UserError
from precision_doctor.graph.coverage import EmulationNote
from precision_doctor.measure.analysis import Analysis
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.storage import DiskFull


@app.command()
@with_options(INPUTS, PRECISION, TOLERANCE, EMULATION, RUN_DIR, CAPTURE)
def compare(
    model: Path = typer.Argument(..., help="ONNX model."),
    top: int = typer.Option(10, "--top", min=1, help="Rows of the offenders table."),
    options: Options = None,
) -> None:
    """Run FP32 and emulated low precision layer by layer; rank the layers that introduce error."""
    from precision_doctor import api
    from precision_doctor.pipeline.spec_check import validate_spec
    from precision_doctor.results.rundir import default_run_dir

    spec = validate_spec(options.spec(model))
    out_dir = options["out"] if options["out"] is not None else default_run_dir(model, "compare")
    uses_run_dir(out_dir)
    token, started = StopToken(), [False]
    with sigint_stops(token), stops_on_interrupt(out_dir, "run it again to start over", started), progress_bar() as prog:
        tasks: dict[str, int] = {}

        def sink(ev: ProgressEvent) -> None:
            if isinstance(ev, LoadedEvent):
                announce_renamed(ev.renamed_nodes, ev.unsafe_names)
            elif isinstance(ev, PhaseEvent):
                started[0] = True  # the run directory is prepared
            elif isinstance(ev, CaptureEvent):
                if ev.stage not in tasks:
                    tasks[ev.stage] = prog.add_task(ev.stage, total=ev.total)
                prog.update(tasks[ev.stage], completed=ev.done)

        try:
            result = api.compare(spec, out_dir, progress=sink, stop=token, force=options["force"])
        except DiskFull as exc:
            raise UserError(f"{exc}; {exc.advice}, then run the command again") from None
    print_layer_table(result.analysis, top)
    console.print(verdict_line(result.analysis, spec.tolerance, result.notes), soft_wrap=True)
    console.print(f"wrote {out_dir}/activations.h5, layers.csv, layers.json", soft_wrap=True)
    raise typer.Exit(0 if result.analysis.passed else 1)


def _fmt(v: float) -> str:
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
        return str(v)
    return f"{v:.3g}"


def print_layer_table(analysis: Analysis, top: int) -> None:
    from precision_doctor.graph.formats import get_format

    fmt_max = get_format(analysis.precision).max
    table = Table(title=f"Top {top} layers by local error ({analysis.precision})", title_justify="left")
    for col in ("rank", "node", "op", "local rel err", "rounding", "propagated", "ref |max|", "flags"):
        table.add_column(col, justify="right" if col not in ("node", "op", "flags") else "left")
    for r in sorted(analysis.layers, key=lambda r: r.rank)[:top]:
        flags = []
        if r.frac_above_max > 0 or r.input_ref_absmax > fmt_max:
            flags.append("overflow")
        if r.local_nonfinite:
            flags.append("inf/nan")
        if r.frac_below_normal > 0.01:
            flags.append("underflow")
        if r.input_sensitive:
            flags.append("input-sensitive")
        table.add_row(
            str(r.rank), r.name, r.op_type, _fmt(r.local_rel_l2), _fmt(r.rounding_rel_l2),
            _fmt(r.lowp_rel_l2), _fmt(r.ref_absmax), ",".join(flags),
        )
    console.print(table)


def verdict_line(analysis: Analysis, tol: Tolerance, notes: Iterable[EmulationNote] = ()) -> str:
    """PASS or FAIL of the emulated low-precision model; a PASS resting on nodes the emulator does not model on a
    GPU (`notes`) says so."""
    from precision_doctor.render.wording import notes_clause

    worst = max(analysis.verdict.items(), key=lambda kv: (not kv[1].passed, kv[1].max_abs), default=None)
    where = f"; first diverging tensor: {analysis.first_divergence}" if analysis.first_divergence else ""
    if analysis.passed:
        from precision_doctor.render.wording import tolerance_text

        caveat = notes_clause(notes, analysis.precision)
        lead = f"PASS on the emulator ({caveat}: confirm on the GPU)" if caveat else "PASS"
        return f"{lead}: all outputs within the tolerance ({tolerance_text(tol)}){where}"
    name, c = worst
    own = tol.for_output(name)
    return (
        f"FAIL: output '{name}' max abs err {_fmt(c.max_abs)}, max rel err {_fmt(c.max_rel)}, "
        f"{c.mismatches} of {c.size} elements outside atol={own.atol:g} rtol={own.rtol:g}{where}"
    )
