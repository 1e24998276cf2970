"""RunSpec: defaults once, JSON form, checks that name the setting, a stable key; the StopToken."""

from __future__ import annotations

import json

import numpy as np
import pytest

from precision_doctor import spec as specs
from precision_doctor.control import Stopped, StopToken
from precision_doctor.errors import SpecError
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline.spec_check import validate_spec
from precision_doctor.spec import InputSpec, RunSpec, SearchSpec


def test_defaults_and_json_round_trip(tmp_path):
    s = RunSpec("m.onnx")
    assert s.search == SearchSpec() and s.tolerance == Tolerance() and s.inputs.samples == specs.default("inputs.samples")
    data = s.to_json()
    assert set(data) == {"model", "precision", "inputs", "tolerance", "search", "capture", "backends", "artifacts"}
    assert data["search"]["strategy"] == "auto" and data["tolerance"]["atol"] == 1e-5
    assert RunSpec.from_json(json.loads(json.dumps(data))) == s
    other = s.with_settings({"search.margin": 0.2, "inputs.files": ["a.npz"], "backends.confirm_backend": "ort-cpu"})
    assert other.search.margin == 0.2 and other.inputs.files == ("a.npz",)
    assert RunSpec.from_json(other.to_json()) == other
    # absent settings keep their defaults; relative paths are resolved against base_dir
    got = RunSpec.from_json({"model": "m.onnx", "inputs": {"files": ["x.npz"]}}, base_dir=tmp_path)
    assert got.model == str(tmp_path / "m.onnx") and got.inputs.files == (str(tmp_path / "x.npz"),)
    assert got.search == SearchSpec()


@pytest.mark.parametrize("data, setting", [
    ({"model": "m", "search": {"marginn": 0.1}}, "search.marginn"),
    ({"model": "m", "colour": "red"}, "colour"),
    ({"model": "m", "inputs": {"samples": "many"}}, "inputs.samples"),
    ({"model": "m", "inputs": {"samples": 2.5}}, "inputs.samples"),
    ({"model": "m", "inputs": {"allow_nonfinite": 1}}, "inputs.allow_nonfinite"),
    ({"model": "m", "inputs": {"files": [1, 2]}}, "inputs.files"),
    ({"model": "m", "tolerance": {"atol": -1}}, "tolerance.atol"),
    ({"model": "m", "tolerance": {"check_error_stat": "p99"}}, "tolerance.check_error_stat"),
    ({"model": "m", "search": None}, "search"),
    ({"search": {}}, "model"),
])
def test_from_json_refuses_with_the_setting_named(data, setting):
    with pytest.raises(SpecError) as exc:
        RunSpec.from_json(data)
    assert exc.value.setting == setting and setting in str(exc.value)


@pytest.mark.parametrize("changes, setting, flag_text", [
    ({"search.margin": 1.0}, "search.margin", "--margin must lie in [0, 1), got 1.0"),
    ({"search.strategy": "nope"}, "search.strategy", "unknown strategy 'nope'"),
    ({"search.cost": "watts"}, "search.cost", "--cost must be one of deploy, nodes, flops"),
    ({"search.batch": 0}, "search.batch", "--batch must be at least 1"),
    ({"precision": "fp8"}, "precision", "unknown precision 'fp8'"),
    ({"backends.backend": "nope"}, "backends.backend", "unknown backend 'nope'"),
    ({"backends.backend": "emulate", "backends.confirm_backend": "emulate"}, "backends.confirm_backend",
     "--confirm-backend must differ from --backend"),
    ({"backends.confirm_backend": "emulate"}, "backends.confirm_backend", "--backend auto searches with the emulator"),
    ({"backends.rules": "nope"}, "backends.rules", "--emulation-rules: unknown emulation rule or profile 'nope'"),
    ({"inputs.validation_split": 1.5}, "inputs.validation_split", "--validation-split must lie in [0, 1)"),
    ({"inputs.samples": 0}, "inputs.samples", "--samples must be at least 1"),
    ({"inputs.val_ranges": ["x:[2,1]"]}, "inputs.val_ranges", "--val-range: expected [low,high]"),
    ({"inputs.input_shapes": ["[1,2]"]}, "inputs.input_shapes", "--input-shapes needs NAME:[dims]"),
])
def test_validate_names_the_setting(changes, setting, flag_text):
    from precision_doctor.cli.options import flag

    with pytest.raises(SpecError) as exc:
        validate_spec(RunSpec("m").with_settings(changes))
    assert exc.value.setting == setting
    assert flag_text in exc.value.render(flag)
    assert "--" not in str(exc.value)  # the core names settings, not flags


def test_every_setting_has_a_flag_or_is_internal():
    from precision_doctor.cli.options import FLAGS

    internal = {"capture.compression"}
    assert set(specs.settings()) - set(FLAGS) == internal


def test_key_is_stable_and_follows_settings_and_file_contents(tmp_path):
    model, sample = tmp_path / "m.onnx", tmp_path / "a.npz"
    model.write_bytes(b"model")
    np.savez(sample, x=np.zeros(3, np.float32))
    s = RunSpec(str(model), inputs=InputSpec(files=(str(sample),)))
    assert s.key() == RunSpec.from_json(s.to_json()).key()
    assert s.key() != s.with_settings({"search.margin": 0.2}).key()
    assert s.key() != s.with_settings({"search.augment": 2}).key()
    moved = tmp_path / "elsewhere.onnx"
    moved.write_bytes(b"model")
    assert s.key() == s.with_settings({"model": str(moved)}).key()  # the model's contents count, not its path
    before = s.key()
    np.savez(sample, x=np.ones(3, np.float32))
    assert s.key() != before


def test_stop_token():
    t = StopToken()
    t.check()
    assert not t.stopped and t.reason is None
    t.stop("cancelled")
    with pytest.raises(Stopped, match="cancelled"):
        t.check()
    assert issubclass(Stopped, KeyboardInterrupt) and t.stopped
    t.handled()
    t.check()  # acted on: no second raise
    assert t.stopped  # but it was stopped
    t.stop()
    with pytest.raises(KeyboardInterrupt):
        t.check()


@pytest.mark.parametrize("data, setting, words", [
    ({"inputs": {"samples": float("inf")}}, "inputs.samples", "finite"),
    ({"inputs": {"seed": 10**400}}, "inputs.seed", "out of range"),
    ({"inputs": {"seed": 2**64}}, "inputs.seed", "out of range"),
    ({"search": {"max_evaluations": 1e300}}, "search.max_evaluations", "out of range"),
    ({"search": {"max_evaluations": 10**10}}, "search.max_evaluations", "must lie in [1, 1000000000]"),
    ({"search": {"time_budget": 1e300}}, "search.time_budget", "at most"),
    ({"capture": {"group_mb": 1e308}}, "capture.group_mb", "at most"),
    ({"inputs": {"samples": 10**6}}, "inputs.samples", "at most"),
    ({"tolerance": {"atol": float("nan")}}, "tolerance.atol", "finite"),
    ({"inputs": {"files": ["a\x00.npz"]}}, "inputs.files", "NUL"),
    ({"inputs": {"samples": "9" * 100}}, "inputs.samples", "expected a number"),
])
def test_numbers_and_strings_out_of_bounds_are_refused_naming_the_setting(data, setting, words):
    with pytest.raises(SpecError) as exc:
        validate_spec(RunSpec.from_json({"model": "m", **data}))
    assert exc.value.setting == setting and words in str(exc.value)
    assert len(str(exc.value)) < 200  # one short line whatever was sent


def test_integers_keep_their_exact_value_and_settings_documents_their_depth():
    assert RunSpec("m").with_settings({"inputs.seed": 2**53 + 1}).inputs.seed == 2**53 + 1
    assert RunSpec("m").with_settings({"inputs.seed": "9007199254740993"}).inputs.seed == 2**53 + 1
    assert RunSpec("m").with_settings({"inputs.samples": 2.0}).inputs.samples == 2
    assert specs.load_json('{"inputs": {"files": ["a.npz"]}}', "settings") == {"inputs": {"files": ["a.npz"]}}
    for text in ("[" * 100_000 + "]" * 100_000, "[" * 40 + "]" * 40, "{not json"):
        with pytest.raises(SpecError) as exc:
            specs.load_json(text, "settings")
        assert exc.value.setting == "settings" and "\n" not in str(exc.value)
