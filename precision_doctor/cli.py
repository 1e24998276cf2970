"""The typer app: parses options, calls the API, prints. Nothing else lives here."""

from __future__ import annotations

import math
import sys
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from precision_doctor.errors import UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Find which layers lose accuracy in FP16/BF16, and the smallest set to keep in FP32.",
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
console = Console(width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True)

# -- shared options -----------------------------------------------------------------------------
InputsOpt = typer.Option(None, "--inputs", help="Input sample file (.npz, polygraphy JSON, .h5); repeatable.")
SamplesOpt = typer.Option(4, "--samples", help="Number of generated samples when no --inputs are given.")
SeedOpt = typer.Option(0, "--seed", help="Seed for generated samples.")
ValRangeOpt = typer.Option(None, "--val-range", help="Value range of generated inputs: NAME:[lo,hi] or [lo,hi].")
ShapesOpt = typer.Option(None, "--input-shapes", help="Shape for dynamic inputs: NAME:[d0,d1,...].")
NonfiniteOpt = typer.Option(False, "--allow-nonfinite-inputs", help="Accept NaN/Inf in input samples.")
PrecisionOpt = typer.Option("fp16", "--precision", help="Low precision to diagnose: fp16 or bf16.")
AtolOpt = typer.Option(1e-5, "--atol", help="Absolute tolerance (polygraphy's default 1e-5).")
RtolOpt = typer.Option(1e-5, "--rtol", help="Relative tolerance (polygraphy's default 1e-5).")
StatOpt = typer.Option("elemwise", "--check-error-stat", help="elemwise, max, mean or median (as polygraphy).")
CosineOpt = typer.Option(None, "--cosine-floor", help="Also require cosine similarity >= this per output.")
ConfirmOpt = typer.Option(
    None, "--confirm-backend",
    help="Carry the answer over to this backend (ort-cuda, trt, ort-cpu) on every sample: kept if it passes "
    "there, else grown until it does, then pruned to 1-minimal there. Search with the fast emulator, "
    "finish on the GPU.",
)
MarginOpt = typer.Option(
    0.0, "--margin",
    help="Search for a set that uses at most 1 - MARGIN of the tolerance (0.2: 20% to spare); held-out samples "
    "are checked at the full tolerance. Room to spare, no guarantee on other hardware (--confirm-backend checks there).",
)
OutOpt = typer.Option(None, "--out", help="Run directory (default: reports/<model>-<command>-<time>).")
ForceOpt = typer.Option(False, "--force", help="Write into a non-empty --out (replaces our files only).")


def _fail(msg: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {msg}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _input_options(inputs, samples, seed, val_range, input_shapes, allow_nonfinite):
    from precision_doctor.workload import InputOptions

    return InputOptions(
        files=list(inputs or []),
        samples=samples,
        seed=seed,
        val_ranges=list(val_range or []),
        input_shapes=list(input_shapes or []),
        allow_nonfinite=allow_nonfinite,
    )


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description:<12}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )


def _fmt(v: float) -> str:
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
        return str(v)
    return f"{v:.3g}"


def print_layer_table(analysis, top: int) -> None:
    from precision_doctor.precision.formats import get_format

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


def verdict_line(analysis, tol) -> str:
    worst = max(analysis.verdict.items(), key=lambda kv: (not kv[1].passed, kv[1].max_abs), default=None)
    where = f"; first diverging tensor: {analysis.first_divergence}" if analysis.first_divergence else ""
    if analysis.passed:
        return f"PASS: all outputs within atol={tol.atol:g} rtol={tol.rtol:g} ({tol.check_error_stat}){where}"
    name, c = worst
    return (
        f"FAIL: output '{name}' max abs err {_fmt(c.max_abs)}, max rel err {_fmt(c.max_rel)}, "
        f"{c.mismatches} of {c.size} elements outside atol={tol.atol:g} rtol={tol.rtol:g}{where}"
    )


@app.command()
def compare(
    model: Path = typer.Argument(..., help="ONNX model."),
    inputs: list[Path] | None = InputsOpt,
    samples: int = SamplesOpt,
    seed: int = SeedOpt,
    val_range: list[str] | None = ValRangeOpt,
    input_shapes: list[str] | None = ShapesOpt,
    allow_nonfinite_inputs: bool = NonfiniteOpt,
    precision: str = PrecisionOpt,
    atol: float = AtolOpt,
    rtol: float = RtolOpt,
    check_error_stat: str = StatOpt,
    cosine_floor: float | None = CosineOpt,
    out: Path | None = OutOpt,
    force: bool = ForceOpt,
    top: int = typer.Option(10, "--top", help="Rows of the offenders table."),
    group_mb: float = typer.Option(256.0, "--group-mb", help="Memory budget of one capture group (MiB)."),
) -> None:
    """Run FP32 and emulated low precision layer by layer; rank the layers that introduce error."""
    from precision_doctor.capture import CaptureSettings
    from precision_doctor.compare import run_compare
    from precision_doctor.precision.formats import get_format
    from precision_doctor.rundir import default_run_dir, prepare_run_dir
    from precision_doctor.tolerance import Tolerance
    from precision_doctor.workload import load_workload

    tol = Tolerance(atol, rtol, check_error_stat, cosine_floor)
    get_format(precision)
    work = load_workload(model, _input_options(inputs, samples, seed, val_range, input_shapes, allow_nonfinite_inputs))
    _announce_renamed(work.model)
    out_dir = prepare_run_dir(out or default_run_dir(model, "compare"), force=force)
    with _stops_on_interrupt(out_dir, "run it again to start over"), _progress() as prog:
        tasks: dict[str, int] = {}

        def cb(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = prog.add_task(stage, total=total)
            prog.update(tasks[stage], completed=done)

        result = run_compare(work, precision, tol, out_dir, CaptureSettings(group_mb=group_mb), progress=cb)
    print_layer_table(result.analysis, top)
    console.print(verdict_line(result.analysis, tol), highlight=False)
    console.print(f"wrote {out_dir}/activations.h5, layers.csv, layers.json", highlight=False)
    raise typer.Exit(0 if result.analysis.passed else 1)


@contextmanager
def _stops_on_interrupt(out_dir: Path, hint: str):
    """A Ctrl-C outside the search (which reports it itself) ends with one line and exit 130."""
    try:
        yield
    except KeyboardInterrupt:
        err.print(f"interrupted; what was written so far is in {out_dir} ({hint})", highlight=False, soft_wrap=True)
        raise typer.Exit(130) from None


def _announce_renamed(model) -> None:
    if model.renamed_nodes:
        shown = ", ".join(model.renamed_nodes[:5]) + (" ..." if len(model.renamed_nodes) > 5 else "")
        err.print(f"note: {len(model.renamed_nodes)} unnamed nodes were given names: {shown}", highlight=False)


@app.command()
def env() -> None:
    """Versions of ONNX Runtime (and providers), polygraphy, TensorRT, and GPUs."""
    from precision_doctor.environment import describe

    for key, value in describe().items():
        console.print(f"[bold]{key}[/]: {value}", highlight=False)


def main() -> None:
    from precision_doctor import cli_batch, cli_service, interrupt  # noqa: F401  (register batch, zoo; serve, submit, ...)

    interrupt.install()
    try:
        app()
    except UserError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted", highlight=False)
        sys.exit(130)


@app.command()
def diagnose(
    model: Path = typer.Argument(..., help="ONNX model."),
    inputs: list[Path] | None = InputsOpt,
    samples: int = SamplesOpt,
    seed: int = SeedOpt,
    val_range: list[str] | None = ValRangeOpt,
    input_shapes: list[str] | None = ShapesOpt,
    allow_nonfinite_inputs: bool = NonfiniteOpt,
    validate_inputs: list[Path] | None = typer.Option(
        None, "--validate-inputs", help="Held-out sample files to confirm the answer on; repeatable."
    ),
    validation_split: float | None = typer.Option(
        None, "--validation-split",
        help="Hold out this fraction of the samples for confirmation (default: 0.25 of --inputs files; "
        "generated runs draw as many held-out samples with another seed).",
    ),
    precision: str = PrecisionOpt,
    atol: float = AtolOpt,
    rtol: float = RtolOpt,
    check_error_stat: str = StatOpt,
    cosine_floor: float | None = CosineOpt,
    margin: float = MarginOpt,
    strategy: str = typer.Option("auto", "--strategy", help="auto, bisect, bisect-reverse, linear, ddmin, segment."),
    backend: str = typer.Option("emulate", "--backend", help="emulate, ort-cuda, ort-cpu, trt, or auto (best here)."),
    confirm_backend: str | None = ConfirmOpt,
    cost: str = typer.Option("nodes", "--cost", help="Smallest means fewest nodes, or least FP32 'flops'."),
    max_evaluations: int | None = typer.Option(None, "--max-evaluations", help="Stop after this many evaluations."),
    time_budget: float | None = typer.Option(None, "--time-budget", help="Stop the search after this many seconds."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run in --out without repeating work."),
    keep_io_types: bool = typer.Option(True, "--keep-io-types/--no-keep-io-types", help="fixed.onnx keeps FP32 I/O."),
    out: Path | None = OutOpt,
    force: bool = ForceOpt,
    group_mb: float = typer.Option(256.0, "--group-mb", help="Memory budget of one capture group (MiB)."),
) -> None:
    """Find the smallest set of nodes to keep in FP32; write the fixed model, commands and report."""
    from precision_doctor.capture import CaptureSettings
    from precision_doctor.diagnose import DiagnoseOptions, held_out_samples, run_diagnose
    from precision_doctor.rundir import default_run_dir, prepare_run_dir
    from precision_doctor.search.oracle import Budget
    from precision_doctor.tolerance import Tolerance
    from precision_doctor.workload import load_workload

    opts = DiagnoseOptions(
        precision=precision, backend=backend, strategy=strategy, cost=cost,
        tolerance=Tolerance(atol, rtol, check_error_stat, cosine_floor), margin=margin, confirm_backend=confirm_backend,
        budget=Budget(max_evaluations, time_budget), resume=resume, keep_io_types=keep_io_types,
        capture=CaptureSettings(group_mb=group_mb),
    )
    opts.check()
    if resume and out is None:
        _fail("--resume needs --out DIR of the run to continue")
    in_opts = _input_options(inputs, samples, seed, val_range, input_shapes, allow_nonfinite_inputs)
    work = load_workload(model, in_opts)
    _announce_renamed(work.model)
    validation = held_out_samples(work, validate_inputs or [], validation_split)
    out_dir = prepare_run_dir(out or default_run_dir(model, "diagnose"), force=force, resume=resume)

    with _stops_on_interrupt(out_dir, f"to continue: the same command with --resume --out {out_dir}"), \
            _progress() as prog:
        task = prog.add_task("capture", total=None)

        def on_stage(name: str) -> None:
            prog.update(task, description=name)

        def on_eval(ev) -> None:
            prog.update(task, description=f"search ({ev.phase})", completed=ev.step)

        outcome = run_diagnose(work, validation, opts, out_dir, on_stage=on_stage, on_evaluation=on_eval)
    print_outcome(outcome.report, out_dir)
    if outcome.interrupted:
        raise typer.Exit(130)
    raise typer.Exit(0 if outcome.passed else 1)


def print_outcome(report: dict, out_dir: Path) -> None:
    from precision_doctor.report.markdown import confirm_sentence, headroom_sentence

    fb = report["fallback_nodes"]
    tol = report["tolerance"]
    head = (
        f"{report['precision']} on {report['backend']}, strategy {report['strategy']}: "
        f"{report['evaluations']} evaluations in {report['elapsed_s']:.1f} s"
    )
    console.print(head, highlight=False)
    if report["first_divergence"]:
        console.print(f"first diverging tensor (all {report['precision']}): {report['first_divergence']}", highlight=False)
    if report["passed"]:
        share = 100 * report["fp32_flop_share"]
        if fb:
            console.print(
                f"[bold green]PASS[/] keeping {len(fb)} node(s) in FP32 ({share:.2f}% of FLOPs) meets "
                f"atol={tol['atol']:g} rtol={tol['rtol']:g} ({tol['check_error_stat']}):", highlight=False,
            )
            for name in fb:
                console.print(f"  {name}", highlight=False)
        else:
            console.print(f"[bold green]PASS[/] the whole model in {report['precision']} already meets the tolerance",
                          highlight=False)
        val = report.get("validation")
        if val:
            state = "holds" if val["passed"] else "FAILED first; searched again with them included"
            console.print(f"held-out samples ({val['samples']}): {state}", highlight=False)
        for note in (confirm_sentence(report), headroom_sentence(report)):
            if note:
                console.print(note.replace("`", ""), highlight=False)
    else:
        console.print(f"[bold red]NO PASSING SET[/]: {report.get('reason') or report['status']}", highlight=False)
    if report["status"] not in ("complete", "no_solution"):
        console.print(f"status: {report['status']}: {report.get('reason')}", highlight=False)
    console.print(f"report: {out_dir}/report.html  (report.json, report.md, fixed.onnx, trtexec.sh)", highlight=False)


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A diagnose run directory.")) -> None:
    """Render report.md and report.html again from the stored report.json."""
    from precision_doctor.diagnose import rerender

    rep = rerender(run_dir)
    print_outcome(rep, run_dir)


@app.command()
def emit(
    run_dir: Path = typer.Argument(..., help="A diagnose run directory."),
    format: str = typer.Option("trtexec", "--format", help="trtexec, trtexec10, trtexec11, polygraphy, autocast or json."),
) -> None:
    """Print what to paste: trtexec flags, the polygraphy check, AutoCast's exclusions, or JSON."""
    import json

    from precision_doctor.jsonio import read_json

    path = run_dir / "report.json"
    if not path.exists():
        _fail(f"{run_dir} holds no report.json (is it a diagnose run directory?)")
    rep = read_json(path)
    cmds = rep.get("commands") or {}
    if format == "json":
        console.print_json(json.dumps({"fallback_nodes": rep["fallback_nodes"], "precision": rep["precision"], **cmds}))
        return
    keys = {
        "trtexec": ["trtexec_trt10", "trtexec_trt11"], "trtexec10": ["trtexec_trt10"], "trtexec11": ["trtexec_trt11"],
        "polygraphy": ["polygraphy", "polygraphy_trt10"], "autocast": ["autocast"],
    }
    if format not in keys:
        _fail(f"--format must be one of: {', '.join([*keys, 'json'])}")
    if not cmds:
        _fail(f"{run_dir}: the run found no passing set, so there is nothing to emit")
    for k in keys[format]:
        if k in cmds:
            print(cmds[k])
