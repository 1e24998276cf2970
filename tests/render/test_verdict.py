"""The verdict as one typed statement (results/verdict.py) and its words (render/verdict.py): every status is rendered
by every front end (the headline, report.md, report.html, the brief of the job page, the service's Result, the batch
row, the CLI) in the same label and the same claim; no sentence contradicts another, and the only probability is the
held-out bound. README.md lists exactly the labels the program prints."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from report_parts import report_of, with_fields

from precision_doctor.costs import AnswerCost, Tradeoff, TradeoffPoint
from precision_doctor.graph.coverage import EmulationNote
from precision_doctor.measure.bound import failure_rate_upper
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.outcome import Growth, RunStatus
from precision_doctor.render.brief import brief
from precision_doctor.render.html import render_html
from precision_doctor.render.markdown import render_markdown
from precision_doctor.render.numbers import fmt_rate, fmt_short_pct
from precision_doctor.render.summary import summary_html
from precision_doctor.render.verdict import Tone, headline, tone
from precision_doctor.results.report import (
    AnswerSummary,
    Certification,
    Confirm,
    HeldOutChoice,
    Invocation,
    ModelInfo,
    Pricing,
    Report,
    SampleCounts,
    TwoAnswers,
    Validation,
)
from precision_doctor.results.verdict import NextKind, Qualifier, Status, Unvalidated, all_labels
from precision_doctor.spec import RunSpec

README = Path(__file__).resolve().parents[2] / "README.md"
SPLIT = HeldOutChoice("split", 6, "6 of the 30 --inputs samples are held out")


def _cost(share: float, kept: float | None) -> AnswerCost:
    return AnswerCost(share, 100, 1000, 4, 2, 64, 900, 1800, 700, 3.0, kept, 1, "capture", "h100-estimate")


def _pricing(share: float = 0.25, kept: float | None = 0.7, better: float | None = None) -> Pricing:
    points = [TradeoffPoint(1.0, True, 2, share), TradeoffPoint(2.0, True, 1 if better else 2, better or share)]
    return Pricing("deploy", "estimated time", answer=_cost(share, kept), tradeoff=Tradeoff(points))


def _report(**kw) -> Report:
    spec = RunSpec(model="m.onnx").with_settings({"inputs.files": [f"s{i}.npz" for i in range(30)],
                                                  "tolerance.atol": 1e-3, "tolerance.rtol": 1e-3})
    base = dict(status=RunStatus.COMPLETE, precision="fp16", tolerance=Tolerance(atol=1e-3, rtol=1e-3), backend="emulate",
                fallback_nodes=["a", "b"], fallback_size=2, fp32_flop_share=0.25, margin=0.1,
                model=ModelInfo(path="m.onnx", candidates=9), samples=SampleCounts(24, 6), inputs={"files": ["s0.npz"]},
                held_out_choice=SPLIT,
                validation=Validation(passed=True, samples=6), pricing=_pricing(),
                certified_by=Certification("emulate", "validation", 10, rules="ort-cuda", not_on_gpu="no CUDA GPU here"),
                invocation=Invocation(spec=spec, directory="run", origin="cli"),
                commands={"polygraphy": "polygraphy run fixed.onnx --trt"},
                artifacts={"fixed_onnx": "fixed.onnx"})
    return report_of(**{**base, **kw})


REPAIRED = Validation(passed=False, samples=6, failing_samples=[1], first_candidate=["a"],
                      research="searched again with the held-out samples included", passed_after_research=True)
STOPPED_REPAIR = Validation(passed=False, samples=6, failing_samples=[1], first_candidate=["a", "c"],
                            research="repaired with the failing held-out samples", passed_after_research=False)
UNMEASURED = dict(certified_by=Certification("emulate", "validation", 10, rules="ort-cuda", unconfirmed=["HardSwish"]),
                  emulation_notes=[EmulationNote("unmeasured-op", "HardSwish", 28, ["h0"], "never measured")])
TOO_FEW = dict(validation=None, samples=SampleCounts(3, 0), held_out_choice=HeldOutChoice("none", 0, "only 3 --inputs"))

# name: (the report's changes, the label, the exit code)
CASES = {
    "pass": (dict(), "PASSED", 0),
    "little benefit (latency)": (dict(pricing=_pricing(kept=0.1, better=0.05)), "PASSED, LITTLE FP16 BENEFIT", 0),
    "little benefit (flops)": (dict(pricing=_pricing(share=0.9, kept=0.5)), "PASSED, LITTLE FP16 BENEFIT", 0),
    "too few samples": (TOO_FEW, "PASSED, NOT VALIDATED", 0),
    "too few held out": (dict(validation=Validation(passed=True, samples=2), samples=SampleCounts(8, 2),
                              held_out_choice=HeldOutChoice("split", 2, "2 of the 10")), "PASSED, NOT VALIDATED", 0),
    "too few and little benefit": ({**TOO_FEW, "pricing": _pricing(kept=0.1)}, "PASSED, NOT VALIDATED, LITTLE FP16 BENEFIT",
                                   0),
    "split 0": (dict(validation=None, samples=SampleCounts(10, 0), held_out_choice=HeldOutChoice("none", 0, "split 0"),
                     invocation=Invocation(spec=RunSpec(model="m.onnx").with_settings(
                         {"inputs.files": ["s.npz"], "inputs.validation_split": 0.0}), directory="run", origin="cli")),
                "PASSED, NOT VALIDATED", 0),
    "generated": (dict(inputs={"generated": 4, "seed": 0}, held_out_choice=HeldOutChoice("generated", 2, "generated")),
                  "PASSED, NOT VALIDATED", 0),
    "repaired with held-out samples": (dict(validation=REPAIRED, answers=TwoAnswers(
        [Growth.HELD_OUT], AnswerSummary(["a"], 1, 0.1), AnswerSummary(["a", "b"], 2, 0.25))), "PASSED, NOT VALIDATED", 0),
    "emulator unconfirmed": (UNMEASURED, "PASSED, ON THE EMULATOR (CONFIRM ON A GPU)", 0),
    "all fp32": (dict(fallback_nodes=list("abcdefghi"), fallback_size=9, fp32_flop_share=1.0, everything_fp32=True,
                      pricing=_pricing(share=1.0, kept=0.0)), "PASSED, ALL IN FP32 (NO FP16 BENEFIT)", 0),
    "failed held-out": (dict(status=RunStatus.BUDGET_EXHAUSTED, reason="budget",
                             validation=Validation(passed=False, samples=5, failing_samples=[0]),
                             samples=SampleCounts(20, 5)), "INCOMPLETE (budget exhausted)", 1),
    "failed held-out, the repair found none": (dict(validation=replace(STOPPED_REPAIR, first_candidate=["a", "b"]),
                                                    samples=SampleCounts(20, 6)), "FAILED ON HELD-OUT SAMPLES", 1),
    "failed held-out, its repair stopped": (dict(status=RunStatus.BUDGET_EXHAUSTED, reason="budget",
                                                 validation=replace(STOPPED_REPAIR, first_candidate=["a", "b"])),
                                            "INCOMPLETE (budget exhausted)", 1),
    "repair stopped with a set so far": (dict(status=RunStatus.BUDGET_EXHAUSTED, reason="budget", validation=STOPPED_REPAIR,
                                              fallback_nodes=["a", "b", "c"], fallback_size=3),
                                         "INCOMPLETE (budget exhausted)", 1),
    "incomplete with a set": (dict(status=RunStatus.BUDGET_EXHAUSTED, reason="budget", validation=None),
                              "INCOMPLETE (budget exhausted)", 1),
    "incomplete without a set": (dict(status=RunStatus.INTERRUPTED, reason="Ctrl-C", validation=None, fallback_nodes=[],
                                      fallback_size=0, pricing=None, artifacts={}), "INCOMPLETE (interrupted)", 130),
    "no solution": (dict(status=RunStatus.NO_SOLUTION, validation=None, fallback_nodes=[], fallback_size=0, pricing=None,
                         artifacts={}, certified_by=None), "NO SOLUTION", 1),
}


def _percentages(text: str) -> list[str]:
    return re.findall(r"\d+(?:\.\d+)?%", text)


def _cli(report: Report, tmp_path) -> str:
    from precision_doctor.cli import shared
    from precision_doctor.cli.diagnose import print_outcome

    with shared.console.capture() as cap:
        print_outcome(report, tmp_path)
    return cap.get()


@pytest.mark.parametrize("name", list(CASES))
def test_every_status_is_said_in_the_same_words_everywhere(name, tmp_path):
    from precision_doctor.batch.jobs import row_from_report
    from precision_doctor.service.engine import summary

    changes, label, code = CASES[name]
    rep = _report(**changes)
    st = rep.statement
    assert (st.label, st.exit_code, rep.passed) == (label, code, label.startswith("PASSED"))
    assert label in all_labels()
    # read back from its JSON (what rerender and the service see), the report means the same
    data = json.loads(json.dumps(rep.to_json()))
    assert Report.from_json(data).statement == st and data["passed"] == rep.passed and data["verdict"]["label"] == label
    # the tone: green only for a plain PASSED
    assert tone(st) == (Tone.PASS if label == "PASSED" else Tone.WARN if rep.passed else Tone.FAIL)

    head, md, page, cli = headline(rep), render_markdown(rep), render_html(rep), _cli(rep, tmp_path)
    b, result, row = brief(rep), summary(rep, False, None), row_from_report("m", rep)
    assert head.startswith(f"{label}: ") and b.headline == head and result.headline == head and result.label == label
    assert row.message.startswith(head) and row.passed == rep.passed and result.passed == rep.passed
    assert row.verdict == label and f">{label}</td>" in summary_html([row])
    if rep.passed:
        assert ('class="ok"' in summary_html([row])) == (label == "PASSED")
    assert f"**Verdict: {label}.** {head[len(label) + 2:]}" in md and f'id="verdict">{label}<' in page.replace("&#x27;", "'")
    assert f"{label}: {b.sentence}" in cli

    # the one claim, in every front end; nothing else in the headline is a probability
    c = st.claim
    allowed = {"95%", "80%", "20%"}
    if c is not None and c.measured:
        assert c.bound == pytest.approx(failure_rate_upper(c.failures, c.samples))
        said = f"{c.failures} of {c.samples} held-out samples of your data failed on {c.backend}"
        assert said in head and fmt_rate(c.bound) in head and all(said in t for t in (md, page, cli))
        allowed.add(fmt_rate(c.bound))
    elif c is not None:
        assert "held-out samples of your data failed" not in head and "holds on" not in md + cli
        if c.unvalidated == Unvalidated.FEW_HELD_OUT:  # the bound they give, said as what it is: no validation
            assert fmt_rate(c.bound) in head and "too few to bound" in head and "Not validated" in head
            allowed |= {fmt_rate(c.bound), "50%"}
    if st.benefit is not None:
        allowed |= {fmt_short_pct(st.benefit.fp32_flop_share)}
        kept = st.benefit.speedup_kept
        allowed |= {fmt_short_pct(max(kept, 0.0))} if kept is not None else set()
        allowed |= {fmt_short_pct(st.benefit.better.fp32_flop_share)} if st.benefit.better else set()
    assert set(_percentages(head)) <= allowed, (head, allowed)
    for text in (head, md, page, cli):
        low = text.lower()
        assert "predicted" not in low and "probability" not in low and "--risk" not in low
    # no sentence contradicts another: "NOT VALIDATED" exactly where the claim says so, an earlier answer's failures
    # said with one count, nothing called safe
    assert ("Not validated" in head) == (c is not None and not c.measured and c.unvalidated not in (
        Unvalidated.GENERATED, None) and st.status != Status.NO_SOLUTION) or c.unvalidated == Unvalidated.GENERATED
    if st.status == Status.FAILED_HELD_OUT or not st.answered:  # no certificate of an answer that failed or is none
        assert "Certified by" not in md + page + cli
    for text in (head, md, cli):
        counts = set(re.findall(r"failed (\d+) of (\d+) held-out", text))
        assert len(counts) <= 1, counts
        assert "safe one" not in text
    # the next step: the CLI's, report.md's first and the brief's first are the statement's
    first = b.next_steps[0]
    # plain text in every front end (the job page and report.html show it as it is): no Markdown quotes
    assert "`" not in b.sentence and all("`" not in s.text for s in b.next_steps)
    assert f"1. {first.text}" in md and first.text in cli and "next:" in cli
    if first.command:
        assert first.command in md


def test_qualifiers_and_their_reasons():
    """Each qualifier comes with the sentence that says why, and the next step that answers it."""
    little = _report(**CASES["little benefit (latency)"][0])
    assert little.statement.benefit.little_by == ("latency",) and little.statement.next.kind == NextKind.KEEP_MORE_LOWP
    assert "the estimated latency keeps 10% of the FP16 speed-up: little FP16 benefit (under 20% of the speed-up kept). " \
        "At 2x this tolerance the answer would keep 5.0% of the FLOPs in FP32 (1 node)." in headline(little)
    assert "--atol 0.002 --rtol 0.002" in brief(little).next_steps[0].command
    flops = _report(**CASES["little benefit (flops)"][0])
    assert "little FP16 benefit (over 80% of the FLOPs in FP32)" in headline(flops)
    few = _report(**TOO_FEW)
    assert "Not validated: 3 samples, all used by the search (fewer than 4 --inputs: none could be held out)." \
        in headline(few) and few.statement.next.kind == NextKind.VALIDATE
    split = _report(**CASES["split 0"][0])
    assert split.statement.claim.unvalidated == Unvalidated.SPLIT_ZERO
    cmd = brief(split).next_steps[0].command
    assert cmd.startswith("precision-doctor diagnose m.onnx") and "--validation-split" not in cmd
    repaired = _report(**CASES["repaired with held-out samples"][0])
    assert ("Not validated: 30 samples, all used by the search: the first answer (1 node) failed 1 of 6 held-out "
            "samples on emulate, and a second search used them.") in headline(repaired)
    emu = _report(**UNMEASURED)
    assert Qualifier.ON_THE_EMULATOR in emu.statement.qualifiers and emu.statement.next.kind == NextKind.CONFIRM_ON_GPU
    assert "28 HardSwish nodes behave on a GPU in a way never measured" in headline(emu)
    on_gpu = _report(certified_by=Certification("ort-cuda", "confirmation", 30, gpu=True),
                     confirm=Confirm("ort-cuda", ["a", "b"], True, samples=30, searched_answer_passed=True))
    assert on_gpu.statement.label == "PASSED" and on_gpu.statement.claim.backend == "ort-cuda"
    assert "0 of 6 held-out samples of your data failed on ort-cuda" in headline(on_gpu)
    # a held-out sample that fails under ONNX Runtime's default kernel choice fails, also where another choice passes it
    said = _report(validation=Validation(passed=False, samples=6, failing_samples=[2], backend="ort-cuda", ties=[2]))
    assert "1 of 6 held-out samples of your data failed on ort-cuda (1 of them passes under another cuDNN algorithm " \
        "choice: which kernels the GPU picks decides it)" in headline(said)
    assert said.statement.claim.failures == 1 and not said.passed
    old = _report(validation=Validation(passed=True, samples=6, backend="ort-cuda", ties=[2]))  # an earlier version's
    assert "0 of 6 held-out samples of your data failed on ort-cuda:" in headline(old) and "cuDNN" not in headline(old)
    bf16 = _report(precision="bf16", pricing=_pricing(kept=0.1))
    assert bf16.statement.label == "PASSED, LITTLE BF16 BENEFIT" and bf16.statement.label in all_labels("BF16")


def test_incomplete_runs_are_never_a_pass():
    """A search stopped by its budget with a passing set so far is INCOMPLETE, exit 1, its next step continues it."""
    rep = _report(**CASES["incomplete with a set"][0])
    st = rep.statement
    assert st.status == Status.INCOMPLETE and not rep.passed and st.next.kind == NextKind.CONTINUE
    assert "the set found so far keeps 2 of 9 candidate nodes in FP32" in headline(rep)
    assert brief(rep).next_steps[0].command.endswith("--resume --out .")
    stopped = _report(**CASES["incomplete without a set"][0])
    assert "before any FP32 fallback set made the model meet the tolerance" in headline(stopped)
    assert stopped.statement.claim is None and stopped.statement.benefit is None


def test_a_run_stopped_with_failing_held_out_samples_says_what_its_set_is():
    """Held-out samples failed the answer and the run stopped before a set passing them was settled (issue 34's
    screenshots): the run is INCOMPLETE (its state first: two new users read FAILED as the model's verdict after a
    Ctrl-C); where the reported set is the one they failed, they measured it (its k of n); where a repair already
    moved on to a set that passes them, the failure is the earlier answer's."""
    failed = _report(**CASES["failed held-out, its repair stopped"][0])
    head = headline(failed)
    assert head.startswith("INCOMPLETE (budget exhausted): The run stopped (budget exhausted) before its answer was "
                           "settled: the set found so far (2 of 9 candidate nodes in FP32) meets the tolerance in FP16 on "
                           "the search samples it was checked on, not on held-out ones, and a set that passes them too was "
                           "not found yet. 1 of 6 held-out samples of your data failed on emulate")
    assert failed.statement.claim.measured and failed.statement.next.kind == NextKind.CONTINUE
    steps = brief(failed).next_steps  # continue it (or run it again); nothing to check or build
    assert failed.statement.held_out_failed and not any("fixed.onnx" in (x.command or "") for x in steps), steps
    done = _report(**CASES["failed held-out, the repair found none"][0])  # a complete run: FAILED, and why
    assert headline(done).startswith("FAILED ON HELD-OUT SAMPLES: The set found (2 of 9 candidate nodes in FP32) "
                                     "meets the tolerance in FP16 on the search samples, not on held-out ones.")
    steps = brief(done).next_steps
    assert done.statement.next.kind == NextKind.MORE_DATA and not any("fixed.onnx" in (x.command or "") for x in steps)
    moved = _report(**CASES["repair stopped with a set so far"][0])
    head = headline(moved)
    assert "the set found so far keeps 3 of 9 candidate nodes in FP32" in head and "not on held-out ones" not in head
    assert "the answer before the repair (2 nodes) failed 1 of 6 held-out samples on emulate" in head
    assert moved.statement.claim.unvalidated == Unvalidated.REPAIRED


def test_counts_agree_with_their_nouns_and_a_run_without_an_answer_shows_no_set():
    from precision_doctor.render.verdict import figures
    from precision_doctor.render.wording import status_line

    one = _report(fallback_nodes=["a"], fallback_size=1, model=ModelInfo(path="m.onnx", candidates=50))
    assert "with 1 of 50 candidate nodes kept in FP32" in headline(one)
    assert "with 1 node kept in FP32" in headline(_report(fallback_nodes=["a"], fallback_size=1, model=None))
    none = _report(**CASES["incomplete without a set"][0])
    shown = {f.label: f.value for f in figures(none)}
    assert shown["nodes kept in FP32 (of candidates)"] == "no answer" and shown["FP32 share of FLOPs"] == "–"
    assert status_line(none) == "Status interrupted: Ctrl-C"
    assert status_line(_report(**CASES["incomplete with a set"][0])) == "Status budget exhausted: budget"


def test_a_newer_schema_is_refused_in_one_line():
    from precision_doctor.results.report import SCHEMA_VERSION, ReportError

    data = _report().to_json()
    with pytest.raises(ReportError, match=rf"written by a newer precision-doctor \(schema_version {SCHEMA_VERSION + 1}; "
                                          rf"this one reads {SCHEMA_VERSION}\): read it with that one"):
        Report.from_json({**data, "schema_version": SCHEMA_VERSION + 1})
    # an older file is refused, not read with its `passed` derived again
    with pytest.raises(ReportError, match=r"written by an earlier precision-doctor \(schema_version 1;"):
        Report.from_json({**data, "schema_version": 1, "passed": True, "status": "budget_exhausted"})


def test_the_readme_lists_exactly_the_labels_the_program_prints():
    text = README.read_text(encoding="utf-8")
    block = text.split("Every label the program prints:")[1].split("```text\n")[1].split("```")[0]
    assert block.splitlines() == all_labels()


def test_every_qualified_pass_is_a_label_in_the_list():
    """Each combination of qualifiers a report can get is one of all_labels()."""
    for nv in (TOO_FEW, {}):
        for emu in (UNMEASURED, {}):
            for benefit in (dict(pricing=_pricing(kept=0.1)), dict(pricing=_pricing(kept=0.9)), CASES["all fp32"][0]):
                rep = _report(**{**nv, **emu, **benefit})
                assert rep.passed and rep.statement.label in all_labels(), rep.statement.label


def test_the_statement_reads_nothing_the_pipeline_may_leave_out():
    """A minimal report (an early interruption) and one without pricing or a held-out choice still have a statement."""
    bare = report_of(status="interrupted", reason="Ctrl-C", precision="bf16")
    assert bare.statement.label == "INCOMPLETE (interrupted)" and bare.statement.exit_code == 130
    plain = with_fields(_report(), pricing=None, held_out_choice=None, invocation=Invocation(), certified_by=None)
    assert plain.statement.label == "PASSED" and plain.statement.benefit.speedup_kept is None


def test_the_guide_shows_each_status_in_images_that_exist():
    """docs/guide.md's "What the verdict looks like" (made by bench/verdict_shots.py): one row per label, each a
    label the program prints, with its three images present and small."""
    guide = README.parent / "docs" / "guide.md"
    table = guide.read_text(encoding="utf-8").split("### What the verdict looks like")[1].split("\n\n")[2]
    rows = table.splitlines()[2:]
    labels = [re.match(r"\| `([^`]+)` \|", row).group(1) for row in rows]
    assert all(label in all_labels() for label in labels) and len(set(labels)) == len(labels) >= 5
    images = [guide.parent / link for row in rows for link in re.findall(r"\]\((img/verdicts/[^)]+\.png)\)", row)]
    assert len(images) == 3 * len(rows)
    for path in images:
        assert path.is_file() and path.stat().st_size < 150 << 10, path


def test_the_continue_step_raises_the_evaluation_budget_past_what_the_run_spent():
    """--resume keeps the run's budget, which counts the evaluations before the stop: the continue step of a run its
    --max-evaluations stopped gives a budget above everything it spent, the confirmation's too (it spends what the
    search left; a step that doubled only the search's count printed a resume that stopped again, forever); a run its
    --time-budget stopped has that budget again on resume and is told a larger one goes further."""
    from dataclasses import replace

    from precision_doctor.render.commands import raised_budget
    from precision_doctor.results.report import Confirm

    spec = RunSpec(model="m.onnx").with_settings({"inputs.files": ["s0.npz"], "search.max_evaluations": 30})
    rep = _report(status=RunStatus.BUDGET_EXHAUSTED, reason="evaluation budget of 7 reached", validation=None,
                  invocation=Invocation(spec=spec, directory="run", origin="cli"))
    rep = replace(rep, search=replace(rep.search, evaluations=23),
                  checks=replace(rep.checks, confirm=Confirm("ort-cuda", ["a"], None, evaluations=7)))
    assert raised_budget(rep) == ["--max-evaluations", "60"]
    assert brief(rep).next_steps[0].command.endswith("--resume --out . --max-evaluations 60")
    smaller = replace(rep, invocation=Invocation(spec=spec.with_settings({"search.max_evaluations": 3}), directory="run",
                                                 origin="cli"))  # resumed with a budget below what it had spent
    assert raised_budget(smaller) == ["--max-evaluations", "33"]
    timed = replace(rep, reason="time budget of 60 s reached")
    assert raised_budget(timed) == [] and "a larger --time-budget lets it go further" in brief(timed).next_steps[0].text
    rounds = replace(rep, reason="the counterexample-guided search reached its 8 rounds")
    assert raised_budget(rounds) == []  # not its budget: more evaluations would not help
