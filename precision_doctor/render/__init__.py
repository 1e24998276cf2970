"""Human-readable renderings of a run's typed Report: `markdown.render_markdown`, `html.render_html`
(with `plots`), and the batch summary (`summary`), in the words of `wording` (sentences) and `numbers` (number
formats). `write_reports` writes report.md and report.html."""

from __future__ import annotations

from pathlib import Path

from precision_doctor.results.report import Report
from precision_doctor.runfiles import RunDir


def report_files(report: Report) -> dict[str, str]:
    """The file names of report.md and report.html (`report.artifacts` may name them); UserError for a name
    that is not a plain file name in the run directory (a report.json from elsewhere must not write elsewhere)."""
    from precision_doctor.errors import UserError

    out = {}
    for key, default in (("report_md", "report.md"), ("report_html", "report.html")):
        name = report.answer.artifacts.get(key, default)
        if Path(name).name != name or name in ("", ".", "..") or "\\" in name:
            raise UserError(f"report.json: artifacts.{key} must be a file name in the run directory, got {name!r}")
        out[key] = name
    return out


def write_reports(report: Report, run: RunDir) -> dict[str, Path]:
    """Render report.md and report.html into `run` (names from `report.artifacts`; its manifest lists them);
    returns the paths."""
    from precision_doctor.jsonio import write_text_atomic
    from precision_doctor.render.html import render_html
    from precision_doctor.render.markdown import render_markdown

    paths = {key: run.root / name for key, name in report_files(report).items()}
    write_text_atomic(paths["report_md"], render_markdown(report), writer=run)
    write_text_atomic(paths["report_html"], render_html(report), writer=run)
    return paths
