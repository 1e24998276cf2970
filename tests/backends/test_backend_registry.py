"""backends/registry.py: one entry per backend, and what the CLI's help, `env`, the settings' checks and
`make_backend` derive from it."""

from __future__ import annotations

import dataclasses

import pytest

from precision_doctor import planted
from precision_doctor.backends import knobs, registry
from precision_doctor.backends.registry import BackendInfo
from precision_doctor.cli.options import backend_help
from precision_doctor.environment import backend_statuses
from precision_doctor.errors import SpecError
from precision_doctor.graph.model import from_proto
from precision_doctor.pipeline.spec_check import validate_spec
from precision_doctor.spec import RunSpec


def test_names_and_what_each_backend_may_do():
    assert [b.name for b in registry.listed()] == ["emulate", "ort-cuda", "ort-cuda-gated", "ort-cpu", "trt", "auto"]
    assert registry.info("tensorrt") is registry.info("trt")  # the name TrtBackend gives itself in reports
    # TrtBackend names itself "tensorrt": its verdicts are a GPU's (they were not, when a tuple held only "trt")
    assert registry.on_gpu("tensorrt") and registry.gpu_use("tensorrt", None) == "needs"
    assert registry.knob_family("tensorrt") == registry.knob_family("trt") == knobs.TRT
    assert registry.knob_family("ort-cpu") == knobs.ORT_CPU and registry.knob_family("emulate") is None
    assert registry.check_only("ort-cpu") and not registry.check_only("ort-cuda")
    assert not registry.check_only("ort-cpu-gated") and not registry.on_gpu("ort-cpu-gated")  # no entry: a plumbing check
    assert registry.gpu_use("auto", None) == "wants" and registry.gpu_use("emulate", "ort-cuda") == "needs"
    assert registry.gpu_use("emulate", None) is None
    assert "ort-cpu" not in registry.available_backends() and "auto" not in registry.available_backends()
    with pytest.raises(SpecError, match=r"unknown backend 'cuda'; choose emulate, ort-cuda, ort-cuda-gated, ort-cpu, "
                                        r"trt or auto$") as e:
        registry.check_backend_name("cuda", "backends.confirm_backend")
    assert e.value.setting == "backends.confirm_backend"


def test_made_backends_name_their_entries():
    model = from_proto(planted.overflow_island().model)
    for name, flags in (("emulate", (False, False)), ("ort-cpu", (False, True)), ("auto", (False, False))):
        with registry.make_backend(name, model, "fp16", model.outputs) as b:
            entry = registry.info(b.name)
            assert entry is not None and (entry.gpu, entry.check_only) == flags, name


def test_a_new_entry_reaches_the_help_env_and_the_settings_check(monkeypatch):
    """What a new backend touches besides its module: one entry (here a stand-in made with the emulator's factory)."""
    emulate = registry.info("emulate")
    new = dataclasses.replace(emulate, name="my-gpu", brief="a new GPU runtime", about="what my-gpu is for", gpu=True,
                              rank=None, aliases=())
    entries = (*registry.BACKENDS[:-2], new, *registry.BACKENDS[-2:])
    monkeypatch.setattr(registry, "BACKENDS", entries)
    monkeypatch.setattr(registry, "_BY_NAME", {n: b for b in entries for n in (b.name, *b.aliases)})
    assert "my-gpu (a new GPU runtime)" in backend_help() and "my-gpu" in backend_help(brief=True)
    assert [s.good_for for s in backend_statuses() if s.name == "my-gpu"] == ["what my-gpu is for"]
    spec = validate_spec(RunSpec("m.onnx").with_settings({"backends.backend": "my-gpu"}))
    assert spec.spec.backends.backend == "my-gpu" and registry.gpu_use("my-gpu", None) == "needs"
    model = from_proto(planted.overflow_island().model)
    with registry.make_backend("my-gpu", model, "fp16", model.outputs) as b:
        assert b.name == "emulate"


def test_the_help_lists_each_backend_as_its_entry_says():
    assert backend_help(brief=True) == "auto (default), emulate, ort-cuda, ort-cuda-gated, trt."
    full = backend_help()
    assert full.startswith("auto (default: search with the emulator") and "ort-cuda-gated (real FP16 in one session" in full
    assert full.endswith(" ort-cpu is refused: ONNX Runtime's CPU provider computes FP16 chains in FP32.")
    assert [s.name for s in backend_statuses()] == [b.name for b in registry.listed()]


def test_a_backend_for_one_runtime_is_refused_for_the_other():
    spec = RunSpec("m.onnx").with_settings({"backends.target": "ort-cuda", "backends.confirm_backend": "tensorrt"})
    with pytest.raises(SpecError) as e:
        validate_spec(spec)
    assert e.value.setting == "backends.confirm_backend"
    assert str(e.value) == ("backends.confirm_backend trt measures TensorRT, not the backends.target ort-cuda the "
                            "answer is for: use ort-cuda or ort-cuda-gated, or backends.target tensorrt")


def test_entries_are_frozen_records():
    assert dataclasses.is_dataclass(BackendInfo) and BackendInfo.__dataclass_params__.frozen


def test_the_backends_that_build_a_graph_per_set_are_those_that_run_fixed_onnx():
    """What the held-out repair asks before it tries removals one by one (pipeline/validate.py) and the other
    runtime's growing before it moves to the gated graph (pipeline/target.GROW_ON)."""
    from precision_doctor.pipeline.target import GROW_ON

    assert [b.name for b in registry.BACKENDS if registry.set_per_run(b.name)] == ["ort-cuda", "ort-cpu", "trt"]
    assert not registry.set_per_run("ort-cuda-gated") and not registry.set_per_run(None)
    assert all(registry.set_per_run(k) and not registry.set_per_run(v) for k, v in GROW_ON.items())
