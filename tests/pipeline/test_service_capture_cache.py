"""The capture cache hook of the core (`api.diagnose(..., capture_cache=)`, pipeline/capture_cache.py) with
the daemon's directory cache: what the key covers, the analysis kept in the capture, and a second diagnosis
that reuses the first one's capture and analysis and gives what a fresh run gives."""

from __future__ import annotations

import copy
import dataclasses
import json
import types
import typing

import numpy as np
import onnx
import pytest

from precision_doctor import api, planted
from precision_doctor.data.activations import ActivationStore
from precision_doctor.data.inputs import InputValues
from precision_doctor.data.workload import load_workload
from precision_doctor.measure.analysis import MEMO, analyse
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline.capture_cache import NOT_IN_KEY, capture_key
from precision_doctor.pipeline.compare import capture_and_analyse, reanalyse
from precision_doctor.pipeline.spec_check import validate_spec
from precision_doctor.service.cache import DirectoryCaptureCache
from precision_doctor.spec import RunSpec, setting_type, settings


def _changed(path: str, value: typing.Any) -> typing.Any:
    """Another value of the setting's type (the key does not check values, only tells them apart)."""
    hint = setting_type(path)
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in args if a is not type(None))
    if typing.get_origin(hint) is tuple:
        return (*value, "other")
    if hint is bool:
        return not value
    if hint is str:
        return f"{value}-other"
    return (value or 0) + 1


def _with(spec: RunSpec, path: str, value: typing.Any) -> RunSpec:
    """`spec` with one setting replaced, unchecked (a section may check its values as it is made)."""
    section, _, name = path.partition(".")
    if not name:
        return dataclasses.replace(spec, **{section: value})
    part = copy.copy(getattr(spec, section))
    object.__setattr__(part, name, value)
    return dataclasses.replace(spec, **{section: part})


def _json(analysis_or_verdict) -> str:
    """Comparable text (NaN is not equal to itself in a dict comparison)."""
    d = analysis_or_verdict.to_dict() if hasattr(analysis_or_verdict, "to_dict") else \
        {k: v.to_dict() for k, v in analysis_or_verdict.items()}
    return json.dumps(d, sort_keys=True)


def _stable(data: typing.Any) -> typing.Any:
    """A report's JSON without its timings, date and run directory's name."""
    if isinstance(data, dict):
        return {k: _stable(v) for k, v in data.items()
                if k not in ("created", "elapsed_s", "timing", "at_s", "seconds", "directory")}
    return [_stable(v) for v in data] if isinstance(data, list) else data


@pytest.fixture
def case_files(tmp_path, request):
    case = planted.CASES[getattr(request, "param", "three_defects")]()
    model = tmp_path / "m.onnx"
    onnx.save(case.model, str(model))
    files = []
    for i, s in enumerate(case.samples(4, seed=0)):
        files.append(str(tmp_path / f"s{i}.npz"))
        np.savez(files[-1], **s)
    spec = validate_spec(RunSpec.from_json({"model": str(model), "inputs": {"files": files},
                                            "tolerance": {"atol": case.atol, "rtol": case.rtol}})).spec
    return case, spec


def test_the_key_covers_every_setting_but_those_proven_not_to_change_the_capture(case_files) -> None:
    _, spec = case_files
    work = load_workload(spec.model, spec.inputs, InputValues.parse(spec.inputs))
    assert set(NOT_IN_KEY) <= set(settings())  # names only real settings (a rename would show here)
    key = capture_key(spec, work)
    in_key = []
    for path in settings():
        section, _, name = path.partition(".")
        value = getattr(getattr(spec, section), name) if name else getattr(spec, section)
        other = capture_key(_with(spec, path, _changed(path, value)), work)
        assert (other == key) == (path in NOT_IN_KEY), path
        in_key.append(path) if other != key else None
    # capture.keep as the tensors the file holds: none holds what summary holds until its run removes it
    assert capture_key(_with(spec, "capture.keep", "none"), work) == capture_key(_with(spec, "capture.keep", "summary"), work)
    assert capture_key(_with(spec, "capture.keep", "all"), work) != key
    # every setting not proven harmless is in it, whatever sections grow (emulation rules, ...)
    assert {"precision", "capture.group_mb", "capture.compression", "backends.backend", "inputs.input_shapes"} <= set(in_key)
    # the things themselves: the samples searched and the model's contents
    fewer = load_workload(spec.model, spec.inputs, InputValues.parse(spec.inputs))
    fewer.samples = fewer.samples[:3]
    assert capture_key(spec, fewer) != key
    other_model = load_workload(spec.model, spec.inputs, InputValues.parse(spec.inputs))
    other_model.model.model_hash = "0" * 64
    assert capture_key(spec, other_model) != key


def test_other_code_never_shares_a_capture(case_files, monkeypatch) -> None:
    import precision_doctor.pipeline.capture_cache as capture_cache

    _, spec = case_files
    work = load_workload(spec.model, spec.inputs, InputValues.parse(spec.inputs))
    key = capture_key(spec, work)
    monkeypatch.setattr(capture_cache, "code_fingerprint", lambda: "0.1.0+another-build")
    assert capture_key(spec, work) != key


@pytest.mark.parametrize("case_files", ["cancellation"], indirect=True)
def test_the_analysis_kept_in_a_capture_is_what_analysing_it_again_gives(case_files, tmp_path, monkeypatch) -> None:
    case, spec = case_files
    work = load_workload(spec.model, spec.inputs, InputValues.parse(spec.inputs))
    first = capture_and_analyse(work, "fp16", spec.tolerance, tmp_path)
    path = tmp_path / "activations.h5"
    tight = Tolerance(atol=1e-6, rtol=1e-6)
    with ActivationStore(path) as store:
        assert store.read_text(MEMO) is not None
        fresh = analyse(store, tolerance=tight)
    assert _json(fresh.verdict) != _json(first.verdict)  # the verdict depends on the tolerance ...
    import precision_doctor.pipeline.compare as compare

    def no_analysis(*a, **k):
        raise AssertionError("analysed again instead of reading the kept analysis")

    monkeypatch.setattr(compare, "analyse", no_analysis)
    kept = reanalyse(path, tight)
    assert _json(kept) == _json(fresh)  # ... and is recomputed; the rest is read back exactly
    assert _json(reanalyse(path, spec.tolerance)) == _json(first)
    monkeypatch.undo()
    with ActivationStore(path, "a") as store:  # kept by another version: not trusted, analysed again
        memo = json.loads(store.read_text(MEMO))
        store.write_text(MEMO, json.dumps({**memo, "version": "0.0.0"}))
    monkeypatch.setattr(compare, "analyse", no_analysis)
    with pytest.raises(AssertionError, match="analysed again"):
        reanalyse(path, tight)


def test_a_second_diagnosis_reuses_the_capture_and_answers_as_a_fresh_run(case_files, tmp_path, monkeypatch) -> None:
    case, spec = case_files
    cache = DirectoryCaptureCache(tmp_path / "cache", 64)
    # capture.keep all: the run appends its fixed run to its own copy of the capture (with summary it is not stored)
    spec = spec.with_settings({"capture.keep": "all"})
    first = api.diagnose(spec, tmp_path / "first", capture_cache=cache)
    assert first.passed and len(list((tmp_path / "cache").glob("*.h5"))) == 1
    other = spec.with_settings({"tolerance.atol": case.atol * 3, "search.strategy": "bisect", "search.margin": 0.1})
    fresh = api.diagnose(other, tmp_path / "fresh")  # no cache: the reference answer

    import precision_doctor.pipeline.compare as compare
    import precision_doctor.pipeline.diagnose as diagnose

    def no_capture(*a, **k):
        raise AssertionError("captured or analysed again instead of reusing")

    monkeypatch.setattr(diagnose, "capture_and_analyse", no_capture)
    monkeypatch.setattr(compare, "analyse", no_capture)
    reused = api.diagnose(other, tmp_path / "reused", capture_cache=cache)
    monkeypatch.undo()
    assert reused.passed and _stable(reused.to_json()) == _stable(fresh.to_json())  # the same report, timings aside
    for name in ("layers.json", "layers.csv"):
        assert (tmp_path / "reused" / name).read_text() == (tmp_path / "fresh" / name).read_text(), name
    with ActivationStore(tmp_path / "reused" / "activations.h5") as store:  # the run's own names, not the first run's
        assert store.attr("tolerance")["atol"] == case.atol * 3
        assert "fixed" in store.runs()
    with ActivationStore(cache.root / next(p.name for p in cache.root.glob("*.h5"))) as store:
        assert "fixed" not in store.runs()  # the cached copy was put before the run appended to its own

    # another precision never shares a capture
    monkeypatch.setattr(diagnose, "capture_and_analyse", no_capture)
    with pytest.raises(AssertionError, match="captured"):
        api.diagnose(spec.with_settings({"precision": "bf16"}), tmp_path / "bf16", capture_cache=cache)


def test_the_directory_cache_drops_the_least_recently_used(tmp_path) -> None:
    src = tmp_path / "a.h5"
    src.write_bytes(b"x" * 600_000)
    cache = DirectoryCaptureCache(tmp_path / "cache", 1.0)  # 1 MiB: room for one entry
    keys = ["a" * 32, "b" * 32]
    cache.put(keys[0], src)
    cache.put(keys[1], src)
    assert not cache.get(keys[0], tmp_path / "out.h5") and cache.get(keys[1], tmp_path / "out.h5")
    assert (tmp_path / "out.h5").read_bytes() == src.read_bytes()
    with pytest.raises(ValueError):
        cache.get("../../etc/passwd", tmp_path / "x")
    assert not DirectoryCaptureCache(tmp_path / "off", 0).put(keys[0], src) and not list((tmp_path / "off").glob("*.h5"))
