"""Human-readable renderings of a run's typed Report: `markdown.render_markdown`, `html.render_html`
(with `plots`), and the batch summary (`summary`). `write_reports` writes report.md and report.html."""

from __future__ import annotations

from pathlib import Path

from precision_doctor.results.report import Report


def write_reports(report: Report, run_dir: Path) -> dict[str, Path]:
    """Render report.md and report.html into `run_dir` (names from `report.artifacts`); returns the paths."""
    from precision_doctor.render.html import render_html
    from precision_doctor.render.markdown import render_markdown
    from precision_doctor.results.jsonio import write_text_atomic

    run_dir = Path(run_dir)
    paths = {
        "report_md": run_dir / report.artifacts.get("report_md", "report.md"),
        "report_html": run_dir / report.artifacts.get("report_html", "report.html"),
    }
    write_text_atomic(paths["report_md"], render_markdown(report))
    write_text_atomic(paths["report_html"], render_html(report))
    return paths
