"""A run's settings are checked once, at the edge, and their strings parsed once into the values the layers below
take (pipeline/spec_check.py's CheckedSpec)."""

from __future__ import annotations

import json

import onnx
import pytest

from precision_doctor import api, planted
from precision_doctor.data import inputs as data_inputs
from precision_doctor.pipeline import spec_check
from precision_doctor.spec import RunSpec


@pytest.fixture
def counted(monkeypatch):
    """How often the settings are checked and `inputs.val_ranges`/`inputs.input_shapes` parsed."""
    calls = {"validate_spec": 0, "parse_val_ranges": 0, "parse_input_shapes": 0}
    for module, name in ((spec_check, "validate_spec"), (data_inputs, "parse_val_ranges"),
                         (data_inputs, "parse_input_shapes")):
        real = getattr(module, name)

        def wrapper(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)
    return calls


@pytest.fixture
def dynamic_model(tmp_path):
    path = tmp_path / "dynamic_image.onnx"
    onnx.save(planted.dynamic_image().model, str(path))
    return path


SETTINGS = ["--samples", "4", "--input-shapes", "x:[1,3,16,32]", "--val-range", "x:[0,1]", "--atol", "1e-2",
            "--rtol", "1e-2"]


def test_the_cli_checks_a_run_once(run_cli, dynamic_model, tmp_path, counted):
    code, _, err = run_cli("diagnose", dynamic_model, *SETTINGS, "--out", tmp_path / "run")
    assert code == 0, err
    assert counted == {"validate_spec": 1, "parse_val_ranges": 1, "parse_input_shapes": 1}
    rep = json.loads((tmp_path / "run" / "report.json").read_text())
    assert rep["search"]["inputs"]["val_ranges"] == ["x:[0,1]"] and rep["search"]["input_shapes"][0]["opt"] == [1, 3, 16, 32]


def test_the_api_checks_a_plain_runspec_once(dynamic_model, tmp_path, counted):
    spec = RunSpec(str(dynamic_model)).with_settings({
        "inputs.samples": 4, "inputs.input_shapes": ["x:[1,3,16,32]"], "inputs.val_ranges": ["x:[0,1]"],
        "tolerance.atol": 1e-2, "tolerance.rtol": 1e-2})
    report = api.diagnose(spec, tmp_path / "run")
    assert report.passed and counted == {"validate_spec": 1, "parse_val_ranges": 1, "parse_input_shapes": 1}
    checked = spec_check.validate_spec(spec)
    assert checked.inputs.val_ranges == {"x": (0.0, 1.0)} and checked.inputs.input_shapes == {"x": [1, 3, 16, 32]}
    assert spec_check.checked(checked) is checked  # a checked spec is not checked again


def test_a_bad_setting_is_still_refused_in_one_line_naming_the_flag(run_cli, dynamic_model, tmp_path):
    code, _, err = run_cli("diagnose", dynamic_model, "--val-range", "x:[1,0]", "--out", tmp_path / "run")
    assert code == 2 and err.strip() == "error: --val-range: expected [low,high] with low <= high, got 'x:[1,0]'"
    assert not (tmp_path / "run").exists()
