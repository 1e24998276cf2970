"""Knob configurations: the enumeration, the text a user pastes, and the order a search tries them."""

from __future__ import annotations

import shlex

import pytest

from precision_doctor.backends import knobs
from precision_doctor.backends.tensorrt import flags
from precision_doctor.backends.tensorrt.tactics import parse_tactic_sources, resolve_tactic_sources

RTX = {"EDGE_MASK_CONVOLUTIONS": 0, "JIT_CONVOLUTIONS": 1}  # TensorRT 11 and TensorRT-RTX 1.7
TRT10 = {"CUBLAS": 0, "CUBLAS_LT": 1, "CUDNN": 2, "EDGE_MASK_CONVOLUTIONS": 3, "JIT_CONVOLUTIONS": 4}
DEFAULT_ON = ["EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"]


def test_ort_cuda_configurations():
    configs = knobs.ort_cuda_configs()
    assert len(configs) == 6 and configs[0].is_default and configs[0].label == "default"
    assert len({c.label for c in configs}) == 6
    opts = [knobs.ort_provider_options(c) for c in configs]
    assert {o["cudnn_conv_algo_search"] for o in opts} == {"EXHAUSTIVE", "HEURISTIC", "DEFAULT"}
    assert {o["use_tf32"] for o in opts} == {"0", "1"}
    assert opts[0] == {"cudnn_conv_algo_search": "EXHAUSTIVE", "use_tf32": "0"}  # true FP32 by default
    heur = next(c for c in configs if c.label == "cudnn_conv_algo_search=HEURISTIC")
    assert knobs.ort_providers(heur) == [
        ("CUDAExecutionProvider", {"cudnn_conv_algo_search": "HEURISTIC", "use_tf32": "0"}), "CPUExecutionProvider"]
    text = knobs.ort_providers_text(heur)
    assert eval(text.removeprefix("providers="), {}) == knobs.ort_providers(heur)  # valid Python, same options


@pytest.mark.parametrize("available", [RTX, TRT10])
def test_trt_configurations_resolve_against_the_library(available):
    configs = knobs.trt_configs(list(available), DEFAULT_ON)
    assert configs[0].is_default and flags.knob_trtexec_args(configs[0]) == ["--noTF32"]
    extra = len(available) - len(DEFAULT_ON)  # TensorRT 10: CUBLAS, CUBLAS_LT, CUDNN can be added
    assert len(configs) == 2 * (1 + len(DEFAULT_ON) + extra)
    default_mask = sum(1 << available[s] for s in DEFAULT_ON)
    for c in configs:
        kwargs = knobs.trt_backend_kwargs(c)
        spec = parse_tactic_sources(kwargs["tactic_sources"])
        enabled = resolve_tactic_sources(spec, available, default_mask) if spec else DEFAULT_ON
        args = flags.knob_trtexec_args(c)
        assert ("--noTF32" in args) != kwargs["tf32"]
        poly = flags.knob_polygraphy_args(c, DEFAULT_ON)
        if "--tactic-sources" in poly:  # polygraphy lists exactly the sources trtexec's change leaves on
            listed = poly[poly.index("--tactic-sources") + 1 :]
            listed = listed[: listed.index("--tf32")] if "--tf32" in listed else listed
            assert sorted(listed) == sorted(enabled)
        else:
            assert sorted(enabled) == sorted(DEFAULT_ON)
        assert shlex.split(" ".join(args)) == args


def test_knob_plan_tries_knobs_alone_then_smaller_sets():
    configs = knobs.ort_cuda_configs()
    plan = knobs.knob_plan(["a", "b", "a"], configs)
    assert plan[0].knobs.is_default and plan[0].fallback == frozenset({"a", "b"})
    alone = [t for t in plan if t.why == "knobs alone"]
    assert [t.knobs for t in alone] == configs and all(not t.fallback for t in alone)
    smaller = plan[1 + len(alone) :]
    assert len(smaller) == 2 * len(configs) and {t.fallback for t in smaller} == {frozenset({"a"}), frozenset({"b"})}
    empty = knobs.knob_plan([], configs)  # an empty answer: nothing to make smaller, nothing to try alone
    assert [(t.knobs, t.fallback) for t in empty] == [(configs[0], frozenset())]


def test_best_trial():
    configs = knobs.ort_cuda_configs()
    plan = knobs.knob_plan(["a", "b"], configs)
    assert knobs.best_trial([(t, False) for t in plan]) is None
    results = [(t, t.knobs.label == "cudnn_conv_algo_search=HEURISTIC" or len(t.fallback) == 2) for t in plan]
    best = knobs.best_trial(results)
    assert best.fallback == frozenset() and best.knobs.label == "cudnn_conv_algo_search=HEURISTIC"
    results = [(t, len(t.fallback) >= 1) for t in plan]
    best = knobs.best_trial(results)
    assert len(best.fallback) == 1 and best.knobs.is_default  # the default knobs first among equals

