"""The report as sections of typed blocks: each `render/sections/<topic>.py` builds one `Section` from a Report
(`build(report) -> Section`), and one writer each draws any section: `markdown.py` (report.md), `html.py`
(report.html) and `terminal.py` (the CLI). A section says what to show once; the writers say how.

Blocks: `Verdict` (the label as a badge of a tone, and its sentence), `Text`, `Notes` (one fact a sentence), `Steps`
(an ordered list of what to do, each with its command). Built so far: the verdict (`verdict.py`), how the answer was
checked (`checks.py`) and the next steps (`next_steps.py`); the rest of report.md and report.html is still drawn by
render/markdown.py and render/html.py directly.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    """The verdict: its label, shown as a badge of `tone` (pass, warn, fail), and the sentence after it."""

    label: str
    tone: str
    sentence: str


@dataclass(frozen=True)
class Text:
    """A paragraph of plain text."""

    text: str


@dataclass(frozen=True)
class Notes:
    """Sentences that each say one fact (report.md's bullets, report.html's lines under the verdict); literal names
    in them are Markdown code, which the other writers show without the backticks."""

    lines: tuple[str, ...]


@dataclass(frozen=True)
class Step:
    """One thing to do: what and why, and the command that does it (None: none)."""

    text: str
    command: str | None = None


@dataclass(frozen=True)
class Steps:
    """What to do, in order."""

    steps: tuple[Step, ...]


Block = Verdict | Text | Notes | Steps


@dataclass(frozen=True)
class Section:
    """One part of the report: `key` (its HTML id), its title (None: none, as the verdict at the top) and blocks."""

    key: str
    title: str | None
    blocks: tuple[Block, ...]
