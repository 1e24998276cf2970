"""`precision-doctor emit DIR`: print the commands of a run (trtexec, polygraphy, AutoCast, JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from precision_doctor.cli import app, console, fail

FORMATS = {
    "trtexec": ["trtexec_trt10", "trtexec_trt11"], "trtexec10": ["trtexec_trt10"], "trtexec11": ["trtexec_trt11"],
    "polygraphy": ["polygraphy", "polygraphy_trt10"], "autocast": ["autocast"],
}


@app.command()
def emit(
    run_dir: Path = typer.Argument(..., help="A diagnose run directory."),
    format: str = typer.Option("trtexec", "--format", help="trtexec, trtexec10, trtexec11, polygraphy, autocast or json."),
) -> None:
    """Print what to paste: trtexec flags, the polygraphy check, AutoCast's exclusions, or JSON."""
    from precision_doctor.results.report import Report

    rep = Report.load(run_dir)
    cmds = rep.commands
    if format == "json":
        console.print_json(json.dumps({"fallback_nodes": rep.fallback_nodes, "precision": rep.precision, **cmds}))
        return
    if format not in FORMATS:
        fail(f"--format must be one of: {', '.join([*FORMATS, 'json'])}")
    if not cmds:
        fail(f"{run_dir}: the run found no passing set, so there is nothing to emit")
    for k in FORMATS[format]:
        if k in cmds:
            print(cmds[k])
