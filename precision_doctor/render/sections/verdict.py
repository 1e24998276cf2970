"""The verdict section: the statement's label as a badge and its headline sentence (render/verdict.py)."""

from __future__ import annotations

from precision_doctor.render.sections import Section, Verdict
from precision_doctor.render.verdict import headline_text, tone
from precision_doctor.results.report import Report


def build(report: Report) -> Section:
    st = report.statement
    return Section("verdict", None, (Verdict(st.label, str(tone(st)), headline_text(report)),))
