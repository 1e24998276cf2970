"""Issue 33: the GPU's own spread under its kernel choices (measure/spread.py): measured where ONNX Runtime CUDA has the
last word, recorded in report.json, and on the CPU provider (where the choice changes nothing) zero."""

from __future__ import annotations

import numpy as np
import pytest
from report_parts import report_of

from precision_doctor import planted
from precision_doctor.backends import knobs
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.model import from_proto
from precision_doctor.measure.spread import ALGOS, KernelSpread, kernel_spread, ties
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline.confirmation import MAX_SPREAD, allowance
from precision_doctor.results.report import Report


def _case():
    case = planted.three_defects()
    model = from_proto(case.model)
    samples = case.samples(3)
    refs = [ReferenceRunner(model).run(s) for s in samples]
    return case, model, samples, refs


def test_the_cpu_provider_has_no_spread():
    """The same code on ort-cpu (every algorithm choice is the one CPU session): no spread, FP32 runs agree."""
    case, model, samples, refs = _case()
    tol = Tolerance(atol=case.atol, rtol=case.rtol)
    s = kernel_spread(model, "fp16", frozenset(case.expected), samples, refs, tol, family=knobs.ORT_CPU)
    assert s.share == 0.0 and s.fp32_repeat == 0.0 and s.samples == 3
    assert s.configs == [f"cudnn_conv_algo_search={a}" for a in ALGOS]


def test_the_spread_round_trips_in_report_json():
    spread = KernelSpread("ort-cuda", ["cudnn_conv_algo_search=EXHAUSTIVE"], 4, 0.25, 0.001)
    report = report_of(kernel_spread=spread)
    assert Report.from_json(report.to_json()).checks.kernel_spread == spread


@pytest.mark.gpu
def test_spread_and_ties_on_the_gpu():
    """On ONNX Runtime CUDA: the spread of the all-FP16 graph is a finite share, and `ties` answers for each sample."""
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("no CUDA provider")
    case, model, samples, refs = _case()
    tol = Tolerance(atol=case.atol, rtol=case.rtol)
    s = kernel_spread(model, "fp16", frozenset(case.expected), samples, refs, tol)
    assert np.isfinite(s.share) and s.share >= 0 and s.backend == "ort-cuda"
    assert len(ties(model, "fp16", frozenset(), samples, refs, tol)) == 3


def test_the_confirmation_allows_the_fp32_graphs_noise_never_the_fp16_spread():
    """A spread of the FP16 graph under cuDNN's algorithm choices is error a deployment gets: the confirmation allows
    none of it (it allowed up to 2x the tolerance, and a detector's answer failed unseen samples at 1.39x); the FP32
    graph's own run-to-run difference is noise it allows, capped."""
    assert allowance(0.0, None) == 1.0
    assert allowance(0.0, KernelSpread("ort-cuda", [], 4, share=1.01, fp32_repeat=0.0)) == 1.0
    assert allowance(0.1, KernelSpread("ort-cuda", [], 4, share=0.5, fp32_repeat=0.02)) == pytest.approx(0.92)
    assert allowance(0.0, KernelSpread("ort-cuda", [], 4, share=0.0, fp32_repeat=5.0)) == 1.0 + MAX_SPREAD
