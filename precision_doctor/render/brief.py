"""The run in brief, the one summary every front end draws from a Report: the verdict (its label, tone, one sentence
per field of the statement), the key figures, the FP32 nodes, the next steps and the files, as plain strings and
numbers. The service's job page shows it (`/jobs/ID/summary` is its JSON), the service's `Result` and the batch
summary's row are cut from it; the CLI draws the same words through render/sections."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from precision_doctor.render.commands import next_steps
from precision_doctor.render.files import files
from precision_doctor.render.verdict import (
    Figure,
    basis_sentence,
    benefit_sentence,
    claim_details,
    claim_sentence,
    figures,
    headline_text,
    status_sentence,
    tone,
)
from precision_doctor.render.wording import status_line
from precision_doctor.results.report import Report

SHOWN_NODES = 12  # FP32 nodes named in a brief; the report lists them all


@dataclass(frozen=True)
class Step:
    """A next step: what and why, and the command (None: none)."""

    text: str
    command: str | None = None


@dataclass(frozen=True)
class Brief:
    """`verdict`: the statement's status (passed, failed_held_out, incomplete, no_solution) and `qualifiers`;
    `label`/`tone`: the badge; `sentence`: the headline after the label (`headline`: both); `found`, `claim`,
    `benefit`, `basis`: its sentences one by one; `held_out`: the claim's long form; `status`: the run's status and
    reason when it did not simply complete (`run_status`, `reason`); `artifacts`: file name -> what it is. The job
    page's JSON keeps the keys it always had (verdict to artifacts) and adds the rest."""

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
    qualifiers: list[str] = field(default_factory=list)
    passed: bool = False
    exit_code: int = 1
    found: str = ""
    claim: str | None = None
    benefit: str | None = None
    basis: str = ""
    run_status: str = "complete"
    reason: str | None = None
    fp32_flop_share: float | None = None
    evaluations: int = 0
    elapsed_s: float = 0.0

    @property
    def headline(self) -> str:
        return f"{self.label}: {self.sentence}"

    def to_json(self) -> dict:
        return asdict(self)


def brief(report: Report) -> Brief:
    """The brief of `report`."""
    st = report.statement
    return Brief(
        verdict=str(st.status), label=st.label, tone=str(tone(st)), sentence=headline_text(report),
        figures=figures(report), held_out=claim_details(report), status=status_line(report),
        fallback_nodes=[str(n) for n in report.answer.fallback_nodes[:SHOWN_NODES]],
        fallback_size=int(report.answer.fallback_size),
        next_steps=[Step(text, cmd) for text, cmd in next_steps(report)], artifacts=files(report),
        qualifiers=[str(q) for q in st.qualifiers], passed=st.passed, exit_code=st.exit_code,
        found=status_sentence(st), claim=claim_sentence(st), benefit=benefit_sentence(st), basis=basis_sentence(st),
        run_status=str(report.status), reason=report.reason,
        fp32_flop_share=st.benefit.fp32_flop_share if st.benefit is not None else None,
        evaluations=int(report.search.evaluations), elapsed_s=float(report.search.elapsed_s),
    )
