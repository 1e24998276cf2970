"""The next steps: the statement's one next step first, then the others that apply (render/commands.py), and the
note that the commands run from the run directory."""

from __future__ import annotations

from precision_doctor.render.commands import RUN_FROM_HERE, next_steps
from precision_doctor.render.sections import Section, Step, Steps, Text
from precision_doctor.results.report import Report


def build(report: Report) -> Section:
    steps = tuple(Step(text, cmd) for text, cmd in next_steps(report))
    return Section("next-steps", "Next steps", (Steps(steps), Text(RUN_FROM_HERE)))
