"""`precision-doctor compare`: FP32 and emulated low precision, layer by layer; the offenders table."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from precision_doctor.cli.options import (
    CAPTURE,
    CAPTURE_DEVICE,
    EMULATION,
    INPUTS,
    KEEP,
    PRECISION,
    RUN_DIR,
    TARGET,
    TOLERANCE,
    Options,
    with_options,
)
from precision_doctor.cli.shared import (
    announce_capture_size,
    announce_renamed,
    app,
    console,
    heartbeat,
    plain_progress,
    progress_bar,
    stops_on_interrupt,
    uses_run_dir,
)
from precision_doctor.control import (
    CaptureEvent,
    CaptureSizeEvent,
    LoadedEvent,
    PhaseEvent,
    ProgressEvent,
    StopToken,
    signals_stop,
)
from precision_doctor.errors import UserError
from precision_doctor.measure.analysis import Analysis
from precision_doctor.storage import DiskFull


@app.command()
@with_options(INPUTS, PRECISION, TOLERANCE, TARGET, EMULATION, RUN_DIR, CAPTURE, CAPTURE_DEVICE, KEEP)
def compare(
    model: Path = typer.Argument(..., help="ONNX model."),
    top: int = typer.Option(10, "--top", min=1, help="Rows of the offenders table."),
    options: Options = None,
) -> None:
    """Run FP32 and emulated low precision layer by layer; rank the layers that introduce error."""
    from precision_doctor import api
    from precision_doctor.pipeline.spec_check import validate_spec
    from precision_doctor.render.wording import compare_verdict
    from precision_doctor.results.rundir import default_run_dir

    valid = validate_spec(options.spec(model))
    spec = valid.spec
    out_dir = options["out"] if options["out"] is not None else default_run_dir(model, "compare")
    uses_run_dir(out_dir)
    token, started = StopToken(), [False]
    plain = plain_progress()  # where the bars are off
    with (signals_stop(token), stops_on_interrupt(out_dir, "run it again to start over", started), progress_bar() as prog,
          heartbeat(plain)):
        tasks: dict[str, int] = {}

        def sink(ev: ProgressEvent) -> None:
            if plain is not None:
                plain(ev)
            if isinstance(ev, LoadedEvent):
                announce_renamed(ev.renamed_nodes, ev.unsafe_names)
            elif isinstance(ev, PhaseEvent):
                started[0] = True  # the run directory is prepared
            elif isinstance(ev, CaptureEvent):
                if ev.stage not in tasks:
                    tasks[ev.stage] = prog.add_task(ev.stage, total=ev.total)
                prog.update(tasks[ev.stage], completed=ev.done)
            elif isinstance(ev, CaptureSizeEvent):
                announce_capture_size(ev)

        try:
            result = api.compare(valid, out_dir, progress=sink, stop=token, force=options["force"])
        except DiskFull as exc:
            raise UserError(f"{exc}; {exc.advice}, then run the command again") from None
    print_layer_table(result.analysis, top)
    console.print(compare_verdict(result.analysis, spec.tolerance, result.notes, result.floor), soft_wrap=True)
    kept = Path(out_dir) / "activations.h5"
    wrote = f"activations.h5 ({capture_size(kept, spec.capture.keep)}), " if kept.is_file() else ""
    console.print(f"wrote {out_dir}/{wrote}layers.csv, layers.json", soft_wrap=True)
    raise typer.Exit(0 if result.analysis.passed else 1)


def capture_size(path: Path, keep: str) -> str:
    """The size of compare's activations.h5 and what it holds (`capture.keep`): "25.2 GB: every tensor of the
    captured samples" (all), "1.2 MB: every layer's error statistics, the graph outputs and the tensors of the top 3
    layers"."""
    from precision_doctor.render.numbers import fmt_decimal_bytes
    from precision_doctor.render.wording import kept_of_capture

    size = fmt_decimal_bytes(path.stat().st_size if path.is_file() else 0)
    if keep == "all":
        return f"{size}: every tensor of the captured samples; --capture-samples takes fewer"
    return f"{size}: {kept_of_capture(keep).removeprefix('it keeps ')}"


def print_layer_table(analysis: Analysis, top: int) -> None:
    """The `top` layers by local error as they run (`render.layers.ranking`: a BatchNormalization folded into its
    Conv is that Conv's row), with a note under the table where a row is such a pair."""
    from precision_doctor.graph.formats import get_format
    from precision_doctor.render.layers import FOLDED_NOTE, ranking
    from precision_doctor.render.numbers import counted, fmt_3g

    fmt_max = get_format(analysis.precision).max
    table = Table(title=f"Top {top} layers by local error ({analysis.precision})", title_justify="left")
    for col in ("rank", "node", "op", "local rel err", "rounding", "propagated", "ref |max|", "flags"):
        table.add_column(col, justify="right" if col not in ("node", "op", "flags") else "left")
    rows = ranking(analysis.layers, top)
    for t in rows:
        r = t.row
        flags = []
        if r.frac_above_max > 0 or r.input_ref_absmax > fmt_max:
            flags.append("overflow")
        if r.local_nonfinite:
            flags.append("inf/nan")
        if r.frac_below_normal > 0.01:
            flags.append("underflow")
        if r.input_sensitive:
            flags.append("input-sensitive")
        if t.folded:
            flags.append(f"folded: {t.folded}")
        table.add_row(
            str(r.rank), t.name, t.op, fmt_3g(r.local_rel_l2), fmt_3g(r.rounding_rel_l2),
            fmt_3g(r.lowp_rel_l2), fmt_3g(r.ref_absmax), ",".join(flags),
        )
    console.print(table)
    if folded := sum(1 for t in rows if t.folded):
        console.print(FOLDED_NOTE.format(rows=counted(folded, "row")), soft_wrap=True)
