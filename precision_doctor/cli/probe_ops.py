"""`precision-doctor probe-ops`: every node of the model alone in FP16/BF16 on this machine's GPU (ONNX Runtime
CUDA) against the emulation rule; which op types the emulator underestimates here."""

from __future__ import annotations

from pathlib import Path

import typer

from precision_doctor.cli.options import CAPTURE, EMULATION, INPUTS, PRECISION, RUN_DIR, Options, with_options
from precision_doctor.cli.shared import announce_renamed, app, console, stops_on_interrupt, uses_run_dir
from precision_doctor.control import LoadedEvent, PhaseEvent, ProgressEvent, StopToken, signals_stop


@app.command("probe-ops")
@with_options(INPUTS, PRECISION, EMULATION, RUN_DIR, CAPTURE)
def probe_ops(
    model: Path = typer.Argument(..., help="ONNX model."),
    provider: str = typer.Option("cuda", "--provider", help="cuda (ONNX Runtime's CUDA provider, TF32 off) or cpu "
                                 "(a plumbing check: ONNX Runtime's CPU provider computes FP16 in FP32)."),
    threshold: float | None = typer.Option(None, "--threshold", min=1.0, help="Flag op types whose error on the "
                                           "provider exceeds the rule's by more than this (default 1.1)."),
    options: Options = None,
) -> None:
    """Run every node alone in low precision on the GPU and compare it with the emulation rule."""
    from precision_doctor import api
    from precision_doctor.measure.opprobe import table
    from precision_doctor.pipeline.spec_check import validate_spec
    from precision_doctor.results.rundir import default_run_dir

    spec = validate_spec(options.spec(model))
    out_dir = options["out"] if options["out"] is not None else default_run_dir(model, "probe-ops")
    uses_run_dir(out_dir)
    token, started = StopToken(), [False]

    def sink(ev: ProgressEvent) -> None:
        if isinstance(ev, LoadedEvent):
            announce_renamed(ev.renamed_nodes)
        elif isinstance(ev, PhaseEvent):
            started[0] = True

    with signals_stop(token), stops_on_interrupt(out_dir, "run it again to start over", started):
        result = api.probe_ops(spec, out_dir, provider=provider, threshold=threshold, progress=sink, stop=token,
                               force=options["force"])
    console.print(table(result), soft_wrap=True)
    console.print(f"wrote {out_dir}/probe_ops.json, probe_ops.md", soft_wrap=True)
    raise typer.Exit(1 if result.exceeding else 0)
