"""Human-readable renderings of a run's `report.json`: `markdown.render_markdown`, `html.render_html`.

Both take the parsed JSON dict (non-finite floats as the strings "inf", "-inf", "nan") and return text;
`write_reports` writes both next to `report.json`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_reports(report: dict[str, Any], run_dir: Path) -> dict[str, Path]:
    """Render report.md and report.html into `run_dir` (names from `report["artifacts"]`); returns the paths."""
    from precision_doctor.render.html import render_html
    from precision_doctor.render.markdown import render_markdown
    from precision_doctor.results.jsonio import write_text_atomic

    run_dir = Path(run_dir)
    artifacts = report.get("artifacts") or {}
    paths = {
        "report_md": run_dir / artifacts.get("report_md", "report.md"),
        "report_html": run_dir / artifacts.get("report_html", "report.html"),
    }
    write_text_atomic(paths["report_md"], render_markdown(report))
    write_text_atomic(paths["report_html"], render_html(report))
    return paths
