"""Dynamic dimensions (issue 22): `dim_value <= 0` and `dim_param` are dynamic in every check, the shapes the
samples ran with reach the report and every TensorRT command, and samples far from the model's use (polygraphy's
1x1 placeholders) are said to be so."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from report_parts import report_of

from precision_doctor import planted
from precision_doctor.graph.model import declared_dims, load_model
from precision_doctor.graph.shapes import InputShape, ShapeConcern, input_shapes
from precision_doctor.results.report import Report

POLYGRAPHY = shutil.which("polygraphy", path=str(Path(sys.executable).parent)) or shutil.which("polygraphy")


def _shape(*dims) -> onnx.TensorShapeProto:
    return helper.make_tensor_value_info("t", TensorProto.FLOAT, list(dims)).type.tensor_type.shape


def test_minus_one_zero_and_symbols_are_dynamic_everywhere(tmp_path):
    assert declared_dims(_shape(-1, 0, "h", 3)) == (None, None, None, 3)
    case = planted.dynamic_image()
    onnx.save(case.model, str(tmp_path / "m.onnx"))
    model = load_model(tmp_path / "m.onnx")
    assert model.declared_shapes == {"x": (None, 3, None, None)}
    out = model.outputs[0]
    assert model.tensor_shapes[out] == (None, 2)  # declared [-1, 2]: the -1 is not a size
    # --input-shapes may set a -1 dimension; a fixed one stays refused
    fixed = load_model(tmp_path / "m.onnx", input_shapes={"x": [1, 3, 16, 32]})
    assert fixed.declared_shapes["x"] == (None, 3, None, None)  # what the file declares, for the report
    from precision_doctor.errors import SpecError

    with pytest.raises(SpecError, match="dimension 1 of input 'x' is fixed to 3"):
        load_model(tmp_path / "m.onnx", input_shapes={"x": [1, 4, 16, 32]})


def test_reference_outputs_of_a_dynamic_model_from_polygraphy_are_accepted(tmp_path, run_cli):
    """The tester's refusal: 'output ... has shape [1, 2], the model declares [-1, 2]'."""
    if POLYGRAPHY is None:
        pytest.skip("no polygraphy")
    case = planted.dynamic_image()
    onnx.save(case.model, str(tmp_path / "m.onnx"))
    subprocess.run([POLYGRAPHY, "run", "m.onnx", "--onnxrt", "--input-shapes", "x:[1,3,16,32]", "--iterations", "2",
                    "--save-inputs", "in.json", "--save-outputs", "out.json"], cwd=tmp_path, check=True,
                   capture_output=True)
    code, stdout, err = run_cli("compare", tmp_path / "m.onnx", "--inputs", tmp_path / "in.json", "--load-outputs",
                                tmp_path / "out.json", "--atol", "1e-3", "--rtol", "1e-3", "--out", tmp_path / "c")
    assert code in (0, 1) and "declares" not in err, err
    # a file of another shape is still refused, naming what the model declares ("?" for a dynamic dimension)
    from polygraphy.comparator import IterationResult, RunResults

    results = RunResults()
    out = case.model.graph.output[0].name
    results.append(("r", [IterationResult({out: np.zeros((1, 3), np.float32)}, runner_name="r")] * 2))
    results.save(str(tmp_path / "bad.json"))
    code, _, err = run_cli("compare", tmp_path / "m.onnx", "--inputs", tmp_path / "in.json", "--reference-outputs",
                           tmp_path / "bad.json", "--out", tmp_path / "c2")
    assert code == 2 and "has shape [1, 3], the model declares ['?', 2]" in err


def test_shape_ranges_and_what_is_far_from_use():
    declared = {"x": (None, 3, None, None), "ids": (None, None), "y": (1, 4)}
    samples = [{"x": np.zeros((1, 3, 48, 192)), "ids": np.zeros((1, 7)), "y": np.zeros((1, 4))},
               {"x": np.zeros((1, 3, 48, 96)), "ids": np.zeros((2, 7)), "y": np.zeros((1, 4))},
               {"x": np.zeros((1, 3, 48, 192)), "ids": np.zeros((1, 7)), "y": np.zeros((1, 4))}]
    x, ids, y = input_shapes(declared, samples)
    assert (x.min, x.opt, x.max) == ((1, 3, 48, 96), (1, 3, 48, 192), (1, 3, 48, 192)) and x.varies and x.dynamic
    assert ids.opt == (1, 7) and ids.max == (2, 7) and not y.dynamic and not y.varies
    assert x.concern is None and ids.concern is None and y.concern is None
    ones = InputShape("x", (None, 3, None, None), (1, 3, 1, 1), (1, 3, 1, 1), (1, 3, 1, 1))
    assert ones.concern == ShapeConcern.PLACEHOLDER  # polygraphy's fill for open dimensions
    tiny = InputShape("x", (None, 3, None, None), (1, 3, 8, 8), (1, 3, 8, 8), (1, 3, 8, 8))
    assert tiny.concern == ShapeConcern.TINY_IMAGE
    nhwc = InputShape("x", (1, None, None, 3), (1, 8, 224, 3), (1, 8, 224, 3), (1, 8, 224, 3))
    assert nhwc.concern == ShapeConcern.TINY_IMAGE  # channels last: the sides are 1 and 2
    assert InputShape("x", (None, 3, 224, 224), (1, 3, 224, 224), (1, 3, 224, 224), (1, 3, 224, 224)).concern is None


def test_polygraphys_placeholder_inputs_are_not_accepted_without_a_word(tmp_path, run_cli):
    """polygraphy's default input for a dynamic model is 1x3x1x1: the verdict says what that means."""
    if POLYGRAPHY is None:
        pytest.skip("no polygraphy")
    case = planted.dynamic_image()
    onnx.save(case.model, str(tmp_path / "m.onnx"))
    subprocess.run([POLYGRAPHY, "run", "m.onnx", "--onnxrt", "--iterations", "4", "--save-inputs", "in.json",
                    "--save-outputs", "out.json"], cwd=tmp_path, check=True, capture_output=True)
    code, stdout, err = run_cli("diagnose", tmp_path / "m.onnx", "--inputs", tmp_path / "in.json",
                                "--reference-outputs", tmp_path / "out.json", "--atol", "1e-3", "--rtol", "1e-3",
                                "--out", tmp_path / "r")
    assert code in (0, 1), err
    text = " ".join(stdout.split())
    assert "WARNING: every sample gives input 'x' the shape 1x3x1x1" in text and "--input-shapes x:[1,3,?,?]" in text
    rep = Report.load(tmp_path / "r")
    assert [(s.name, s.opt, s.declared) for s in rep.search.input_shapes] == [("x", (1, 3, 1, 1), (None, 3, None, None))]
    md = (tmp_path / "r" / "report.md").read_text()
    assert "> **WARNING: every sample gives input 'x' the shape 1x3x1x1" in md
    assert 'id="shapes-warning"' in (tmp_path / "r" / "report.html").read_text()


def test_generated_samples_of_a_dynamic_model_get_the_warning_and_real_shapes_do_not(tmp_path, run_cli):
    case = planted.dynamic_image()
    onnx.save(case.model, str(tmp_path / "m.onnx"))
    code, stdout, _ = run_cli("diagnose", tmp_path / "m.onnx", "--samples", "2", "--validation-split", "0",
                              "--augment", "0", "--atol", "1e-2", "--rtol", "1e-2", "--out", tmp_path / "g")
    assert "WARNING: every sample gives input 'x' the shape 1x3x1x1" in " ".join(stdout.split())
    code, stdout, _ = run_cli("diagnose", tmp_path / "m.onnx", "--samples", "2", "--validation-split", "0",
                              "--augment", "0", "--input-shapes", "x:[1,3,24,48]", "--atol", "1e-2", "--rtol", "1e-2",
                              "--out", tmp_path / "s")
    assert code == 0 and "WARNING" not in stdout
    rep = Report.load(tmp_path / "s")
    assert rep.search.input_shapes[0].opt == (1, 3, 24, 48)
    assert "x: 1x3x24x48 (the model declares ?x3x?x?)" in (tmp_path / "s" / "report.md").read_text()


def test_layer_tables_of_a_dynamic_model_count_the_flops_that_ran(tmp_path, run_cli):
    """layers.csv/layers.json were written before the cost model ran: every FLOP count of a dynamic model was 0 there
    while report.json had them. Now the tables, report.json and `compare`'s tables count the shapes that ran."""
    import csv
    import json

    case = planted.dynamic_image()
    onnx.save(case.model, str(tmp_path / "m.onnx"))
    for i, sample in enumerate(case.samples(2, seed=0)):  # 1x3x48x192 crops: the shapes come from the samples
        np.savez(tmp_path / f"s{i}.npz", **sample)
    common = ("--inputs", tmp_path / "s0.npz", "--inputs", tmp_path / "s1.npz", "--atol", "1e-2", "--rtol", "1e-2")
    code, _, err = run_cli("diagnose", tmp_path / "m.onnx", *common, "--validation-split", "0", "--augment", "0",
                           "--out", tmp_path / "d")
    assert code == 0, err
    report = {lay["name"]: lay["flops"] for lay in json.loads((tmp_path / "d" / "report.json").read_text())["analysis"]["layers"]}
    with open(tmp_path / "d" / "layers.csv", newline="") as f:
        csv_flops = {row["name"]: int(row["flops"]) for row in csv.DictReader(f)}
    json_flops = {r["name"]: r["flops"] for r in json.loads((tmp_path / "d" / "layers.json").read_text())["layers"]}
    assert csv_flops == json_flops == report
    assert csv_flops["conv"] == 2 * 8 * 3 * 3 * 3 * 48 * 192  # a 3x3 convolution, 3 -> 8 channels, on 48x192
    code, _, err = run_cli("compare", tmp_path / "m.onnx", *common, "--out", tmp_path / "c")
    assert code == 1, err  # all in FP16 the model overflows
    with open(tmp_path / "c" / "layers.csv", newline="") as f:
        assert {row["name"]: int(row["flops"]) for row in csv.DictReader(f)} == csv_flops


def test_the_opt_shape_of_a_split_says_what_it_is():
    """Shapes 7/7/6 over 20 samples: the report said "mostly 1x3x48x160" of a shape 7 samples had. It says how many
    and why it is the engine's opt shape (the first seen of the most common)."""
    from precision_doctor.render.wording import shapes_text

    widths = [160] * 7 + [192] * 7 + [96] * 6
    samples = [{"x": np.zeros((1, 3, 48, w), np.float32)} for w in widths]
    (shape,) = input_shapes({"x": (None, 3, 48, None)}, samples)
    assert (shape.opt, shape.opt_samples, shape.samples) == ((1, 3, 48, 160), 7, 20)
    said = shapes_text(report_of(input_shapes=[shape]))
    assert said == ("x: 1x3x48x96 to 1x3x48x192 (1x3x48x160 in 7 of 20 samples, the most common: the engine's opt "
                    "shape) (the model declares ?x3x48x?)")
    assert Report.from_json(report_of(input_shapes=[shape]).to_json()).search.input_shapes == [shape]
