"""Issue #9: perturbed copies in the search, the probe after it, the second search when the probe fails; the verdict
leaves the probe's uncalibrated prediction out (issue 33) and report.md shows its measured shares as a diagnostic."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_doctor import api, planted
from precision_doctor import spec as specs
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.model import from_proto
from precision_doctor.pipeline.probe import perturbed_copies
from precision_doctor.render.commands import next_steps
from precision_doctor.render.markdown import render_markdown
from precision_doctor.render.verdict import headline, verdict
from precision_doctor.render.wording import probe_diagnostic
from precision_doctor.results.report import ExpectedHeadroom, Report
from precision_doctor.results.verdict import NextKind, Qualifier
from precision_doctor.runfiles import RunDir
from precision_doctor.spec import InputSpec, RunSpec, SearchSpec, Tolerance

WIDTH = 8


def _knife_edge() -> onnx.ModelProto:
    """(x + 2048) - 2048 on 8 values in [0, 100]: FP16's spacing at 2048 is 2, so each value's error is its
    distance to the nearest even integer, in [0, 1] and different for every perturbed copy. At atol 0.97 a
    sample fails when one of its values errs by more than 0.97: the all-FP16 answer passes some samples
    and fails others by chance, as real models' answers do at the edge of the tolerance."""
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add_offset"),
             helper.make_node("Sub", ["a", "c"], ["y"], name="sub_offset")]
    g = helper.make_graph(nodes, "knife_edge", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH])],
                          [numpy_helper.from_array(np.array(2048.0, np.float32), "c")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def _diagnose(tmp_path, seed: int, **search) -> Report:
    tmp_path.mkdir(parents=True, exist_ok=True)
    model = tmp_path / "knife.onnx"
    onnx.save(_knife_edge(), str(model))
    rng = np.random.default_rng(seed)
    files = []
    for i in range(2):  # two --inputs samples: none can be held out
        files.append(tmp_path / f"s{seed}_{i}.npz")
        np.savez(files[-1], x=rng.uniform(0, 100, (1, WIDTH)).astype(np.float32))
    spec = RunSpec(str(model), inputs=InputSpec(files=tuple(map(str, files))), tolerance=Tolerance(atol=0.97, rtol=0.0),
                   search=SearchSpec(**search)).with_settings({"backends.backend": "emulate"})  # the same on a GPU machine
    return api.diagnose(spec, tmp_path / f"run{seed}-{search}", force=True)


def test_perturbed_copies_never_touch_integer_inputs():
    ints = [{"ids": np.arange(12).reshape(1, 12) + k} for k in range(2)]
    assert perturbed_copies(ints, 3, 0, lambda s: {}) == ([], [])  # nothing to perturb: no copies at all
    model = from_proto(_knife_edge())
    samples = [{"x": np.random.default_rng(k).uniform(0, 100, (1, WIDTH)).astype(np.float32)} for k in range(2)]
    copies, refs = perturbed_copies(samples, 3, 0, ReferenceRunner(model).run)
    assert len(copies) == len(refs) == 6 and perturbed_copies(samples, 0, 0, ReferenceRunner(model).run) == ([], [])
    assert all(not np.array_equal(c["x"], samples[i // 3]["x"]) for i, c in enumerate(copies))
    np.testing.assert_allclose(refs[0]["y"], copies[0]["x"], atol=1e-3)  # FP32 references of the copies themselves
    other, _ = perturbed_copies(samples, 3, 1, ReferenceRunner(model).run)
    assert not np.array_equal(other[0]["x"], copies[0]["x"])  # the probe's seed gives other copies


def test_image_copies_change_exposure_and_white_balance_other_inputs_only_noise():
    """An image-like input (NCHW or NHWC, 1-4 channels, sides >= 16) gets a photometric change per copy:
    every channel moves by its own gain and offset, far more than 1% noise, within the samples' range; a
    sequence of the same size, a mask and token ids get what they got before (noise, nothing, nothing)."""
    from precision_doctor.data.augment import Augment, augment, channel_axis

    rng = np.random.default_rng(0)
    img = rng.uniform(0.2, 0.8, (1, 3, 32, 32)).astype(np.float32)
    samples = [{"img": img, "nhwc": img.transpose(0, 2, 3, 1).copy(), "seq": img.reshape(1, -1),
                "mask": (rng.uniform(size=(1, 3, 32, 32)) > 0.5).astype(np.float32), "ids": np.arange(4)}]
    assert [channel_axis(samples[0][k]) for k in ("img", "nhwc", "seq", "mask")] == [1, 3, None, 1]
    assert channel_axis(np.zeros((1, 3, 8, 32))) is None and channel_axis(np.zeros((1, 8, 32, 32))) is None
    assert channel_axis(np.zeros((1, 64, 64, 2))) is None  # a GridSample grid or a flow field: not an image
    copy = augment(samples, Augment(1, 0.01, 0))[0]
    for key, axis in (("img", (0, 2, 3)), ("nhwc", (0, 1, 2))):
        moved = (copy[key] - samples[0][key]).mean(axis=axis)
        assert np.abs(moved).max() > 0.02 and np.ptp(moved) > 0.01  # channels moved, each its own way
        assert copy[key].min() >= 0.2 - 1e-6 and copy[key].max() <= 0.8 + 1e-6
    seq_moved = np.abs(copy["seq"] - samples[0]["seq"])
    assert 0 < seq_moved.mean() < 0.01  # noise of 1% of its std only
    assert np.array_equal(copy["mask"], samples[0]["mask"]) and np.array_equal(copy["ids"], samples[0]["ids"])


def test_resume_refuses_a_run_whose_image_copies_had_noise_only(tmp_path):
    """run_settings.json records how the copies are made (`copies`): a run recorded before image copies got
    their photometric change (no `copies` key, `augment` 3) does not resume on image inputs, whose copies
    differ now, and resumes on other inputs, whose copies are the same."""
    from precision_doctor.data.augment import recipe
    from precision_doctor.pipeline.settings import RUN_SETTINGS, SettingsDiffer, check_run_settings

    image = [{"x": np.random.default_rng(0).uniform(size=(1, 3, 32, 32)).astype(np.float32)}]
    audio = [{"x": np.random.default_rng(0).uniform(size=(1, 576)).astype(np.float32)}]
    assert (recipe(image), recipe(audio)) == ("photometric+noise", "noise")
    for samples, refused in ((image, True), (audio, False)):
        run = tmp_path / recipe(samples)
        run.mkdir()
        base = {"model_hash": "h", "precision": "fp16", "backend": "emulate", "tolerance": {"atol": 1e-3},
                "margin": 0.1, "confirm_backend": None, "samples": 1, "validation_samples": 0}  # every version's keys
        (run / RUN_SETTINGS).write_text(json.dumps({**base, "augment": 3}))  # an older version's record
        now = {**base, "augment": 3, "copies": recipe(samples)}
        if refused:
            with pytest.raises(SettingsDiffer) as e:
                check_run_settings(RunDir(run), now, resume=True)
            assert "copies 'noise' then, 'photometric+noise' now" in str(e.value)
        else:
            check_run_settings(RunDir(run), now, resume=True)
            assert json.loads((run / RUN_SETTINGS).read_text())["copies"] == "noise"


def test_probe_failure_searches_again_with_the_failing_copies(tmp_path):
    """Seed 3: the all-FP16 answer passes both samples and their search copies, fails on fresh copies; the
    second search includes them and finds the two nodes, which hold on every copy."""
    rep = _diagnose(tmp_path, 3, augment=1, margin=0.0)
    h = rep.expected_headroom
    assert isinstance(h, ExpectedHeadroom)
    assert (h.searched, h.search_copies, h.perturbed_copies, h.held_out) == (2, 2, 8, 0)
    assert h.researched and h.holds and h.failing_copies == 0
    assert rep.passed and rep.fallback_nodes == ["add_offset", "sub_offset"]
    # both of its nodes: no FP16 gain; 2 samples: none held out
    assert rep.statement.qualifiers == (Qualifier.NOT_VALIDATED, Qualifier.ALL_FP32) and verdict(rep)[1] == "warn"
    assert h.share_unseen == 0.0 and h.headroom == 1.0  # both nodes in FP32: exact
    words = probe_diagnostic(rep)
    assert "on 8 fresh perturbed copies of the search samples" in words and "uncalibrated" in words
    assert "A second search at margin" in words and "grew the first answer (0 nodes)" in words
    assert h.first_answer_size == 0 and h.first_predicted_share is not None and h.first_predicted_share > 1.0
    assert "predicted" not in words and "Not validated: 2 samples" in headline(rep)
    data = json.loads((tmp_path / "run3-{'augment': 1, 'margin': 0.0}" / "report.json").read_text())
    assert data["expected_headroom"]["researched"] is True and data["expected_headroom"]["perturbed_copies"] == 8
    assert Report.from_json(data).expected_headroom == h


def test_augment_0_margin_0_is_the_bare_search(tmp_path):
    """Without copies the same two samples let the all-FP16 answer through, and nothing checks it further."""
    rep = _diagnose(tmp_path, 3, augment=0, margin=0.0)
    assert rep.passed and rep.fallback_nodes == [] and rep.expected_headroom is None and rep.margin == 0.0


def test_default_search_uses_copies_and_a_margin():
    s = SearchSpec()
    assert s.augment == 3 and s.margin == 0.1


def test_the_prediction_alone_never_fails_an_answer(tmp_path):
    """A report whose probe still fails after the second search (copies failing, a predicted share above 1): the
    prediction was not calibrated (issue 33), so the verdict, its words and the next step do not cite it; report.md
    shows the copies' measured shares in an uncalibrated diagnostic."""
    rep = _diagnose(tmp_path, 3, augment=1, margin=0.0)
    failing = replace(rep.expected_headroom, holds=False, failing_copies=2, share_unseen=1.3, headroom=-0.3,
                      predicted_share=1.4)
    bad = replace(rep, expected_headroom=failing)
    assert bad.statement == rep.statement and bad.passed
    assert bad.statement.next.kind == NextKind.VALIDATE  # 2 samples: none held out, the data is what would tell
    md = render_markdown(Report.from_json(bad.to_json()))
    assert "predicted" not in md.lower() and "--risk" not in md
    assert "at most 130.0% of it, and 2 of them fail it" in probe_diagnostic(bad)
    steps = next_steps(bad)  # what to do first; last, the command that runs it again
    assert "--inputs" in steps[0][0] and steps[0][1] is None and "-again" in steps[-1][1]


def test_an_answer_holds_only_when_the_predicted_share_is_within_the_tolerance():
    """No unseen sample fails, but shares spread from 0.2 to 0.95: a new input is predicted to exceed the
    tolerance, so the answer is not predicted to hold; tightly spread shares far from 1 are."""
    from precision_doctor.measure.headroom import SampleShare
    from precision_doctor.pipeline.probe import expected_headroom

    def headroom(shares, risk=0.005):
        return expected_headroom(searched=2, search_copies=6, share_searched=0.9,
                                 probe=[SampleShare(v, True) for v in shares], held=[], validation=None,
                                 held_out_unseen=True, held_out_from_user=False, researched=False, risk=risk)
    wide = headroom([0.2, 0.95, 0.4, 0.7, 0.3, 0.9, 0.5, 0.6])
    assert wide.failing_copies == 0 and wide.predicted_share > 1 and not wide.holds and wide.risk == 0.005
    tight = headroom([0.50, 0.52, 0.49, 0.51, 0.50, 0.53, 0.48, 0.50])
    assert tight.holds and tight.predicted_share < 0.6
    # the risk is the setting's: the same shares hold at a 0.5% risk per input, not at 0.1% (a higher predicted share)
    mid = [0.25, 0.5, 0.35, 0.6, 0.4, 0.55, 0.3, 0.5]
    lax, strict = headroom(mid, risk=0.005), headroom(mid, risk=0.001)
    assert lax.holds and lax.risk == 0.005 and not strict.holds and strict.risk == 0.001
    assert lax.predicted_share < 1 < strict.predicted_share
    assert headroom([0.0] * 8).holds and headroom([0.0] * 8).predicted_share is None  # exact: nothing to fit


def test_research_margin_brings_the_predicted_share_to_the_target():
    from precision_doctor.pipeline.probe import MAX_MARGIN, PREDICT_TARGET, research_margin
    assert research_margin(0.1, 0.9, 0.8) == 0.1  # predicted to hold: the first margin
    m = research_margin(0.1, 0.9, 1.8)  # shares scale together: searched 0.9 -> 1 - m, predicted 1.8 -> TARGET
    assert abs(1.8 * (1 - m) / 0.9 - PREDICT_TARGET) < 1e-9
    assert research_margin(0.1, 0.9, 1e6) == MAX_MARGIN and research_margin(0.7, 0.5, 1.1) == 0.7


def test_second_answer_is_checked_on_copies_no_search_saw(tmp_path, monkeypatch):
    """The second search's answer is probed on recheck copies (their own seed), never on the copies that
    sent it there and that it then searched with: here the recheck makes 3 copies, the probe 8."""
    from precision_doctor.pipeline import probe as pipeline
    from precision_doctor.pipeline.probe import HALFWAY_SEED, PROBE_SEED, RECHECK_SEED, SEARCH_SEED

    seeds = []
    real = pipeline.perturbed_copies

    def spy(samples, copies, seed, reference, ids=None, ranges=None):
        seeds.append(seed)
        made, refs = real(samples, copies, seed, reference, ids, ranges)
        return (made[:3], refs[:3]) if seed == RECHECK_SEED else (made, refs)
    monkeypatch.setattr(pipeline, "perturbed_copies", spy)
    rep = _diagnose(tmp_path, 3, augment=1, margin=0.0)
    h = rep.expected_headroom
    # the halfway second search's answer was chosen on copies of its own seed; the verdict's are the recheck copies
    assert h.researched and seeds == [SEARCH_SEED, PROBE_SEED, HALFWAY_SEED, RECHECK_SEED] and h.perturbed_copies == 3
    assert h.research_margin is not None and h.research_margin >= 0.0 and rep.margin == h.research_margin


def test_stop_after_the_search_ends_the_run_before_the_second_search(tmp_path):
    """A stop that arrives once the search is done (the probe is running) ends the run as interrupted,
    not as a finished one with the first answer; the resumed run ends where an uninterrupted one does."""
    from precision_doctor.control import PhaseEvent, StopToken

    whole = _diagnose(tmp_path / "whole", 3, augment=1, margin=0.0)
    model = tmp_path / "whole" / "knife.onnx"
    files = sorted((tmp_path / "whole").glob("s3_*.npz"))
    spec = RunSpec(str(model), inputs=InputSpec(files=tuple(map(str, files))), tolerance=Tolerance(atol=0.97, rtol=0.0),
                   search=SearchSpec(augment=1, margin=0.0)).with_settings({"backends.backend": "emulate"})
    stop = StopToken()

    def sink(event):
        if isinstance(event, PhaseEvent) and event.phase == "validate":
            stop.stop()
    cut = api.diagnose(spec, tmp_path / "run", progress=sink, stop=stop)
    assert cut.status == "interrupted" and not cut.passed and "second search" in cut.reason
    resumed = api.diagnose(spec, tmp_path / "run", resume=True)
    assert resumed.status == "complete" and resumed.fallback_nodes == whole.fallback_nodes
    assert resumed.expected_headroom == whole.expected_headroom


def test_saturated_samples_stay_out_of_the_prediction():
    """A classifier sure of one sample's class uses 1e-9 of the tolerance there: that sample must not make
    the spread, and so the predicted share, astronomical for the samples that do use the tolerance."""
    from precision_doctor.measure.headroom import predicted_share
    from precision_doctor.pipeline.probe import PREDICT_FLOOR

    shares = [1e-9, 2e-9, 0.30, 0.32, 0.31, 0.29]
    assert predicted_share(shares, 0.005) > 1e3
    assert predicted_share(shares, 0.005, floor=PREDICT_FLOOR) < 0.5


def test_run_interrupted_in_the_second_search_resumes_to_the_same_answer(tmp_path):
    """The second search records its (stricter) evaluations in their own checkpoint: a run stopped there
    resumes, replays the first search unchanged, and ends where an uninterrupted run ends."""
    from precision_doctor.control import EvaluationEvent, PhaseEvent, StopToken

    whole = _diagnose(tmp_path / "whole", 3, augment=1, margin=0.0)
    assert whole.expected_headroom.researched
    model, rng = tmp_path / "knife.onnx", np.random.default_rng(3)
    onnx.save(_knife_edge(), str(model))
    files = []
    for i in range(2):
        files.append(tmp_path / f"r{i}.npz")
        np.savez(files[-1], x=rng.uniform(0, 100, (1, WIDTH)).astype(np.float32))
    spec = RunSpec(str(model), inputs=InputSpec(files=tuple(map(str, files))), tolerance=Tolerance(atol=0.97, rtol=0.0),
                   search=SearchSpec(augment=1, margin=0.0)).with_settings({"backends.backend": "emulate"})
    stop, seen = StopToken(), []

    def sink(event):
        seen.append(event)
        if isinstance(event, EvaluationEvent) and any(isinstance(e, PhaseEvent) and e.phase == "validate" for e in seen):
            stop.stop()  # the first evaluation of the second search
    out = tmp_path / "run"
    cut = api.diagnose(spec, out, progress=sink, stop=stop)
    assert cut.status == "interrupted" and (out / "search-again.jsonl").exists()
    resumed = api.diagnose(spec, out, resume=True)
    assert resumed.status == "complete" and resumed.fallback_nodes == whole.fallback_nodes
    assert resumed.evaluations == whole.evaluations and resumed.expected_headroom == whole.expected_headroom


def test_held_out_check_is_of_the_second_answer(tmp_path):
    """Seed 7, 4 --inputs (2 held out): the first answer passes the held-out samples but not the probe's
    copies; the second search (without the held-out samples) finds another answer, and the held-out check
    in the report is of that one, not of the discarded first (both nodes in FP32: exact)."""
    model = tmp_path / "knife.onnx"
    onnx.save(_knife_edge(), str(model))
    rng, files = np.random.default_rng(7), []
    for i in range(4):
        files.append(tmp_path / f"s{i}.npz")
        np.savez(files[-1], x=rng.uniform(0, 100, (1, WIDTH)).astype(np.float32))
    spec = RunSpec(str(model), inputs=InputSpec(files=tuple(map(str, files))), tolerance=Tolerance(atol=0.97, rtol=0.0),
                   search=SearchSpec(augment=1, margin=0.0)).with_settings({"backends.backend": "emulate"})
    rep = api.diagnose(spec, tmp_path / "run")
    h, v = rep.expected_headroom, rep.validation
    assert h.researched and h.held_out == 2 and v.research is None and v.passed
    assert rep.fallback_nodes == ["add_offset", "sub_offset"] and v.tol_used == 0.0 and rep.tolerance_used.validation == 0.0


def test_second_search_stops_halfway_when_the_halfway_answer_holds(tmp_path, monkeypatch):
    """The margin the prediction asks for overshoots (shares do not scale together): the second search goes
    halfway first and on to the whole margin, from the halfway answer, only when the recheck copies say the
    halfway answer will not hold."""
    from precision_doctor.pipeline import probe as pipeline

    halfway = _diagnose(tmp_path / "a", 3, augment=1, margin=0.0)
    h = halfway.expected_headroom
    searches = [r.search for r in halfway.search_rounds.rounds]
    assert h.researched and h.holds and "stricter" not in searches and "second" in searches
    monkeypatch.setattr(pipeline, "_predicted_to_hold", lambda shares, validation, risk: False)
    whole = _diagnose(tmp_path / "b", 3, augment=1, margin=0.0)
    w = whole.expected_headroom
    assert [r.search for r in whole.search_rounds.rounds][-1] == "stricter"
    assert w.research_margin == pytest.approx(2 * h.research_margin) and whole.margin == w.research_margin
    assert whole.evaluations > halfway.evaluations


def test_a_stricter_search_without_an_answer_leaves_the_halfway_answer(tmp_path, monkeypatch):
    """When the search at the whole margin ends without an answer (here made to), the halfway answer stays, at the
    halfway margin, judged on the recheck copies: no crash, no silent return to the first answer."""
    from precision_doctor.outcome import Outcome, RunStatus
    from precision_doctor.pipeline import probe as pipeline

    halfway = _diagnose(tmp_path / "a", 3, augment=1, margin=0.0)
    monkeypatch.setattr(pipeline, "_predicted_to_hold", lambda shares, validation, risk: False)
    real = pipeline._search_again

    def again(ctx, oracle, loop, strategy, search):
        if search == "stricter":
            return Outcome(RunStatus.COMPLETE, None, None)
        return real(ctx, oracle, loop, strategy, search)

    monkeypatch.setattr(pipeline, "_search_again", again)
    rep = _diagnose(tmp_path / "b", 3, augment=1, margin=0.0)
    h = rep.expected_headroom
    assert rep.fallback_nodes == halfway.fallback_nodes and h.researched
    assert h.research_margin == pytest.approx(halfway.expected_headroom.research_margin) and h.perturbed_copies > 0


def test_the_risk_setting_decides_the_prediction(tmp_path):
    """search.risk (--risk) is the probability the prediction allows a new input of exceeding the tolerance: on
    planted softmax_no_max (2 samples) a 49% risk lets the first answer through, a 1e-9 risk predicts that it will
    not hold and a second search grows it; report.json, the verdict sentence and run_settings.json say the risk."""
    case = planted.CASES["softmax_no_max"]()
    model = tmp_path / "m.onnx"
    onnx.save(case.model, str(model))
    files = []
    for i, s in enumerate(case.samples(2, 0)):
        files.append(str(tmp_path / f"s{i}.npz"))
        np.savez(files[-1], **s)
    base = RunSpec(str(model), inputs=InputSpec(files=tuple(files)), tolerance=Tolerance(atol=case.atol, rtol=case.rtol),
                   ).with_settings({"backends.backend": "emulate"})
    assert base.search.risk == specs.default("search.risk")
    lax, strict = (api.diagnose(base.with_settings({"search.risk": r}), tmp_path / f"run{r}") for r in (0.49, 1e-9))
    assert not lax.expected_headroom.researched and strict.expected_headroom.researched
    assert lax.fallback_size < strict.fallback_size and lax.passed and strict.passed
    assert (lax.expected_headroom.risk, strict.expected_headroom.risk) == (0.49, 1e-9)
    assert Report.from_json(json.loads(json.dumps(strict.to_json()))).expected_headroom.risk == 1e-9
    assert "probability" not in headline(lax) and "predicted" not in headline(lax)  # uncalibrated: not in the verdict
    assert json.loads((tmp_path / "run1e-09" / "run_settings.json").read_text())["risk"] == 1e-9
