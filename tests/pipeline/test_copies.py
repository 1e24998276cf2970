"""Perturbed copies in the search (`--augment N`, off by default), and the repair a failing held-out sample sends
the answer to: interrupted there, it resumes to the same answer."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from precision_doctor import api
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.model import from_proto
from precision_doctor.pipeline.copies import perturbed_copies
from precision_doctor.results.report import Report
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


def test_augment_0_margin_0_is_the_bare_search(tmp_path):
    """Without copies the same two samples let the all-FP16 answer through; with two samples nothing is held out, so
    nothing checks it further and no bound is claimed."""
    rep = _diagnose(tmp_path, 3, augment=0, margin=0.0)
    assert rep.passed and rep.answer.fallback_nodes == [] and rep.search.margin == 0.0
    assert rep.promise.validation is None and rep.promise.held_out_bound is None


def test_copies_join_the_search_when_asked(tmp_path):
    """Seed 3: with one copy per sample the search sees copies the all-FP16 answer fails, so it keeps both nodes;
    the report has no probe and no prediction (they were removed: uncalibrated on trained models)."""
    rep = _diagnose(tmp_path, 3, augment=1, margin=0.0)
    assert rep.passed
    assert rep.search.rounds is not None


def test_default_search_has_a_margin_and_no_copies():
    s = SearchSpec()
    assert s.augment == 0 and s.margin == 0.1


def _held_out_failure(tmp_path) -> RunSpec:
    """The knife edge at atol 0.97 with 12 samples: the default split holds out 2, 6 and 10; sample 6 is made to fail
    the all-FP16 answer (a value at an odd integer + 0.99: its FP16 rounding errs by 0.99) while every search sample
    passes it (values within 0.5 of an even integer)."""
    model = tmp_path / "knife.onnx"
    onnx.save(_knife_edge(), str(model))
    rng = np.random.default_rng(5)
    files = []
    for i in range(12):
        x = 2 * rng.integers(0, 50, (1, WIDTH)) + rng.uniform(-0.4, 0.4, (1, WIDTH))
        if i == 6:
            x[0, 3] = 41.01
        files.append(tmp_path / f"s{i:02d}.npz")
        np.savez(files[-1], x=x.astype(np.float32))
    return RunSpec(str(model), inputs=InputSpec(files=tuple(map(str, files))), tolerance=Tolerance(atol=0.97, rtol=0.0),
                   search=SearchSpec(margin=0.0)).with_settings({"backends.backend": "emulate"})


def test_a_stop_before_the_repair_interrupts_and_resumes_to_the_same_answer(tmp_path):
    """A stop that arrives once the search is done (the held-out check is running) ends the run as interrupted, not
    as a finished one with the answer that failed; resumed, it ends where an uninterrupted run ends."""
    from precision_doctor.control import PhaseEvent, StopToken

    spec = _held_out_failure(tmp_path)
    whole = api.diagnose(spec, tmp_path / "whole")
    assert whole.promise.validation is not None and whole.promise.validation.research is not None
    assert whole.answer.fallback_nodes == ["add_offset", "sub_offset"]
    stop = StopToken()

    def sink(event):
        if isinstance(event, PhaseEvent) and event.phase == "validate":
            stop.stop()
    cut = api.diagnose(spec, tmp_path / "run", progress=sink, stop=stop)
    assert cut.status == "interrupted" and not cut.passed and "repair" in cut.reason
    resumed = api.diagnose(spec, tmp_path / "run", resume=True)
    assert resumed.status == "complete" and resumed.answer.fallback_nodes == whole.answer.fallback_nodes
    assert resumed.promise.validation == whole.promise.validation


def test_a_run_interrupted_in_the_repair_resumes_to_the_same_answer(tmp_path):
    """The repair records its evaluations in their own checkpoint: a run stopped there resumes, replays the search
    unchanged, and ends where an uninterrupted run ends."""
    from precision_doctor.control import EvaluationEvent, PhaseEvent, StopToken

    spec = _held_out_failure(tmp_path)
    whole = api.diagnose(spec, tmp_path / "whole")
    stop, seen = StopToken(), []

    def sink(event):
        seen.append(event)
        if isinstance(event, EvaluationEvent) and any(isinstance(e, PhaseEvent) and e.phase == "validate" for e in seen):
            stop.stop()  # the repair's first evaluation
    out = tmp_path / "run"
    cut = api.diagnose(spec, out, progress=sink, stop=stop)
    assert cut.status == "interrupted" and (out / "repair.jsonl").exists()
    resumed = api.diagnose(spec, out, resume=True)
    assert resumed.status == "complete" and resumed.answer.fallback_nodes == whole.answer.fallback_nodes
    assert resumed.search.evaluations == whole.search.evaluations


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def test_the_repair_grows_on_the_search_backend_first_where_the_last_word_builds_a_session_per_set(tmp_path, monkeypatch):
    """On a GPU the last word (ort-cuda) builds a session per set, seconds each at 1024x1024, and the search backend
    (ort-cuda-gated) does not: the repair grows on the search backend first and the last word checks what it found
    once. Here both are the emulator (the confirm backend a second one) and that decision is forced: the last word
    evaluates one set, the grown one, which passes there; the answer is the one a repair on the last word finds; a
    run stopped in the first stage resumes to it."""
    from dataclasses import replace

    from precision_doctor.backends import registry
    from precision_doctor.control import EvaluationEvent, PhaseEvent, StopToken
    from precision_doctor.pipeline import validate

    monkeypatch.setitem(registry._BY_NAME, "twin", replace(registry.info("emulate"), name="twin", listed=False))
    spec = _held_out_failure(tmp_path).with_settings({"backends.confirm_backend": "twin"})  # a second emulator
    plain = api.diagnose(spec, tmp_path / "plain")  # the emulator is not on a GPU: no first stage
    assert not (tmp_path / "plain" / "repair-search.jsonl").exists()
    monkeypatch.setattr(validate, "grows_on_search_backend",
                        lambda ctx: ctx.findings.last_word.oracle is not ctx.oracle)
    staged = api.diagnose(spec, tmp_path / "staged")
    assert staged.answer.fallback_nodes == plain.answer.fallback_nodes == ["add_offset", "sub_offset"]
    grown, checked = (_lines(tmp_path / "staged" / f) for f in ("repair-search.jsonl", "repair.jsonl"))
    # the last word's first trial is the grown set, which passes; then only removals (its polish: the emulator is not
    # a backend that builds a session per set, where the repair keeps what it starts from)
    assert grown and checked[0]["fallback"] == staged.answer.fallback_nodes and checked[0]["passed"]
    assert all(set(c["fallback"]) < set(checked[0]["fallback"]) for c in checked[1:])
    assert len(_lines(tmp_path / "plain" / "repair.jsonl")) > 1  # the last word grew it itself, trial by trial
    v = staged.promise.validation
    assert v is not None and v.first_candidate == [] and v.passed_after_research
    assert any(r.search == "repair-search" for r in staged.search.rounds.rounds)
    # the other runtime is checked on each of the user's samples once, the 9 searched and the 3 held out, whether the
    # repair added the failing one to the search's oracle (staged) or only to the last word's (plain)
    assert plain.checks.other_runtime.samples == staged.checks.other_runtime.samples == 12

    stop, seen = StopToken(), []

    def sink(event):
        seen.append(event)
        if isinstance(event, EvaluationEvent) and any(isinstance(e, PhaseEvent) and e.phase == "validate" for e in seen):
            stop.stop()  # the first stage's first evaluation
    out = tmp_path / "cut"
    cut = api.diagnose(spec, out, progress=sink, stop=stop)
    assert cut.status == "interrupted" and (out / "repair-search.jsonl").exists() and not (out / "repair.jsonl").exists()
    resumed = api.diagnose(spec, out, resume=True)
    assert resumed.status == "complete" and resumed.answer.fallback_nodes == staged.answer.fallback_nodes
    assert resumed.promise.validation == staged.promise.validation


def test_the_repair_stages_share_what_is_left_of_the_evaluation_budget():
    """The repair's first stage (on the search oracle) may spend only what the last word's oracle has left of the
    run's evaluation budget, and the last word then only what the first stage left."""
    from types import SimpleNamespace

    from precision_doctor.pipeline.validate import _sharing_budget
    from precision_doctor.search.oracle import Budget

    first = SimpleNamespace(budget=Budget(100, None), evaluations=60)  # the search spent 60
    last = SimpleNamespace(budget=Budget(30, 5.0), evaluations=20)  # the confirmation: 30 of what was left, 20 spent
    with _sharing_budget(first, last):
        assert first.budget.max_evaluations == 70  # its 60 and the 10 left
        first.evaluations += 4
    assert first.budget == Budget(100, None) and last.budget == Budget(26, 5.0)
