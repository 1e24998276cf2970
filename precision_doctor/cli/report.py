"""`precision-doctor report DIR`: render report.md and report.html again from report.json."""

from __future__ import annotations

from pathlib import Path

import typer

from precision_doctor.cli.diagnose import print_outcome
from precision_doctor.cli.shared import app


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A diagnose run directory.")) -> None:
    """Render report.md and report.html again from the stored report.json."""
    from precision_doctor import api
    from precision_doctor.results.report import run_dir_of

    run_dir = run_dir_of(run_dir)
    print_outcome(api.rerender(run_dir), run_dir)
