"""The report in brief, for a page that embeds it (the service's job page): the verdict, the key figures,
what the held-out samples said, the FP32 nodes and the next steps, in the words of report.html (the same
functions make both), as plain strings."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from precision_doctor.render.commands import next_steps
from precision_doctor.render.files import files
from precision_doctor.render.wording import Figure, figures, headline_text, held_out_sentence, status_line, verdict, verdict_of
from precision_doctor.results.report import Report

SHOWN_NODES = 12  # FP32 nodes named in a digest; the report lists them all


@dataclass(frozen=True)
class Step:
    """A next step: what and why, and the command (None: none)."""

    text: str
    command: str | None = None


@dataclass(frozen=True)
class Digest:
    """`label`/`tone`: the verdict's badge; `sentence`: what the run found (and the whole model in low precision
    as a multiple of the tolerance); `status`: the run's status and reason when it did not simply complete;
    `artifacts`: file name -> what it is."""

    verdict: str
    label: str
    tone: str
    sentence: str
    figures: list[Figure]
    held_out: str | None = None
    status: str | None = None
    fallback_nodes: list[str] = field(default_factory=list)
    fallback_size: int = 0
    next_steps: list[Step] = field(default_factory=list)
    artifacts: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def digest(report: Report) -> Digest:
    label, tone = verdict(report)
    return Digest(
        verdict=str(verdict_of(report)), label=label, tone=str(tone),
        sentence=headline_text(report),
        figures=figures(report), held_out=held_out_sentence(report), status=status_line(report),
        fallback_nodes=[str(n) for n in report.fallback_nodes[:SHOWN_NODES]], fallback_size=int(report.fallback_size),
        next_steps=[Step(text, cmd) for text, cmd in next_steps(report)],
        artifacts=files(report),
    )
