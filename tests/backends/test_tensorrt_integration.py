"""TensorRT for real, engines run on a GPU: a planted model with weak typing (TensorRT 10) and strong
typing (TensorRT 11, TensorRT-RTX). Runs only where a TensorRT library imports and this machine's GPU
can run its engines (TensorRT-RTX: not on compute capability 9.0); skipped elsewhere. What runs
without a GPU (parse, check, ahead-of-time builds) is tested in test_tensorrt_rtx.py."""

from __future__ import annotations

import pytest

from precision_doctor.backends.tensorrt.library import find_library

pytestmark = [pytest.mark.tensorrt, pytest.mark.gpu]

LIB = find_library()[0]
if LIB is None:
    pytest.skip("no TensorRT library imports here", allow_module_level=True)
_RUN = LIB.runtime()
if not _RUN.can_run:
    pytest.skip(_RUN.reason, allow_module_level=True)

import numpy as np  # noqa: E402

from precision_doctor import planted  # noqa: E402
from precision_doctor.backends.reference import ReferenceRunner  # noqa: E402
from precision_doctor.backends.tensorrt import TrtBackend, onnx_node_of_layer  # noqa: E402
from precision_doctor.errors import UserError  # noqa: E402
from precision_doctor.graph.model import from_proto  # noqa: E402
from precision_doctor.measure.tolerance import Tolerance, check_all  # noqa: E402
from precision_doctor.results import commands  # noqa: E402

WEAK = LIB.weak_typing


@pytest.fixture(scope="module")
def case():
    return planted.overflow_island()


@pytest.fixture(scope="module")
def model(case):
    return from_proto(case.model)


def _meets_tolerance(runner, model, case, n: int = 6) -> bool:
    ref = ReferenceRunner(model)
    tol = Tolerance(atol=case.atol, rtol=case.rtol)
    for feeds in case.samples(n, seed=1):
        outs = runner.run(feeds)
        refs = ref.run(feeds)
        for name, value in outs.items():
            assert value.dtype == np.float32 and value.shape == refs[name].shape
        if not all(c.passed for c in check_all(outs, refs, tol).values()):
            return False
    return True


@pytest.mark.skipif(not WEAK, reason="no weak typing (TensorRT 11, TensorRT-RTX)")
def test_weak_typing_expected_set_meets_tolerance(case, model, tmp_path):
    cache = tmp_path / "timing.cache"
    backend = TrtBackend(model, api="weak", precision="fp16", timing_cache=cache, work_dir=tmp_path)
    assert backend.mode == "weak"
    runner = backend.prepare(frozenset(case.expected))
    try:
        assert runner.unmapped == []
        names = {n.name for n in model.nodes}
        pinned_nodes = {onnx_node_of_layer(layer, None, names) for layer in runner.layers}
        assert set(case.expected) <= pinned_nodes
        assert runner.engine_bytes
        assert _meets_tolerance(runner, model, case)
    finally:
        runner.close()
    assert cache.exists() and cache.stat().st_size > 0  # weak typing is TensorRT 10's: a timing cache
    # a second build loads and extends the same cache
    other = backend.prepare(frozenset())
    other.close()
    assert cache.exists()
    # the layer names of the build feed the emitted trtexec command
    cmd = commands.trtexec_trt10("model.onnx", runner.layers)
    assert all(layer in cmd for layer in runner.layers)


def test_strong_typing_expected_set_meets_tolerance(case, model, tmp_path):
    pytest.importorskip("precision_doctor.graph.mixed")
    backend = TrtBackend(model, api="strong", precision="fp16", work_dir=tmp_path)
    assert backend.mode == "strong"
    runner = backend.prepare(frozenset(case.expected))
    try:
        assert runner.engine_bytes
        assert _meets_tolerance(runner, model, case)
    finally:
        runner.close()
    # TensorRT keeps a timing cache, TensorRT-RTX a runtime cache (written when the runner closes)
    assert (backend.runtime_cache if LIB.is_rtx else backend.timing_cache).exists()


def test_auto_picks_the_installed_api(model, tmp_path):
    backend = TrtBackend(model, work_dir=tmp_path)
    assert backend.mode == ("weak" if WEAK else "strong")


@pytest.mark.skipif(WEAK, reason="weak typing exists in TensorRT 10")
def test_weak_typing_refused_on_trt11(model, tmp_path):
    with pytest.raises(UserError, match="weak typing"):
        TrtBackend(model, api="weak", work_dir=tmp_path)
