"""The report in brief, for a page that embeds it (the service's job page): the verdict, the key figures,
what the held-out samples said, the FP32 nodes and the next steps, in the words of report.html (the same
functions make both), as plain strings."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from precision_doctor.outcome import RunStatus
from precision_doctor.render.markdown import artifact_title, next_steps
from precision_doctor.render.wording import (
    fmt_pct,
    fmt_rate,
    fmt_time,
    headline_text,
    held_out_sentence,
    precision_name,
    tolerance_text,
    verdict,
    verdict_of,
)
from precision_doctor.results.report import Report

SHOWN_NODES = 12  # FP32 nodes named in a digest; the report lists them all


@dataclass(frozen=True)
class Figure:
    """One key figure: its value and what it is."""

    value: str
    label: str


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


def figures(report: Report) -> list[Figure]:
    """The key figures, as report.html's header shows them."""
    model = report.model
    cands = model.candidates if model is not None else None
    v = report.validation
    if v is not None and not v.passed and v.passed_after_research:
        val = f"first answer failed, second holds ({v.samples} samples)"
    elif v is not None:
        val = f"{'passed' if v.passed else 'FAILED'} ({v.samples} samples)"
    else:
        val = "not run"
    if (b := report.held_out_bound) is not None:
        val += f" · {b.failures}/{b.samples} failed · ≤ {fmt_rate(b.failure_rate)} of inputs ({b.confidence:.0%})"
    tol_txt = tolerance_text(report.tolerance, sep=" · ")
    memo = report.memo_hits
    return [
        Figure(f"{int(report.fallback_size)}" + (f" / {cands}" if cands is not None else ""),
               "nodes kept in FP32 (of candidates)"),
        Figure(fmt_pct(report.fp32_flop_share), "FP32 share of FLOPs"),
        Figure(f"{report.evaluations}", "evaluations" + (f" (+{memo} memo hits)" if memo else "")),
        Figure(fmt_time(report.elapsed_s), "search time"),
        Figure(val, "held-out validation"),
        Figure(f"{precision_name(report)} · {report.backend}", "precision · backend"),
        Figure(f"{report.strategy} · {report.cost}", "strategy · cost"),
        Figure(tol_txt, "tolerance"),
    ]


def status_line(report: Report) -> str | None:
    """"Status <status>: <reason>" when the run did not simply complete (as report.html says it)."""
    if not report.reason and report.status in (None, RunStatus.COMPLETE):
        return None
    return f"Status {report.status}" + (f": {report.reason}" if report.reason else "")


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


FIRST = ("report_html", "fixed_onnx")  # the files a reader wants first
OTHER_FILES = {"report.json": "this report's data: the verdict, the FP32 nodes and every figure, as JSON",
               "run_settings.json": "the run's settings (what --resume continues with)",
               "references.h5": "the FP32 reference outputs of the samples, computed once (HDF5)",
               "loader_samples.h5": "the samples your --data-loader-script yielded, kept so that --resume reads the same"}


def files(report: Report) -> dict[str, str]:
    """The run directory's files the report knows, file name -> what it is: the report and fixed.onnx first."""
    keys = sorted(report.artifacts, key=lambda k: (FIRST.index(k) if k in FIRST else len(FIRST)))
    named = {str(report.artifacts[k]): artifact_title(k) for k in keys if report.artifacts[k]}
    folders = {f"{name.rstrip('/')}/": about for name, about in named.items() if "." not in Path(name).name}
    return {**named, **folders, **OTHER_FILES}
