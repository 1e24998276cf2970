"""`--backend ort-cpu` never presents an FP16 verdict it cannot compute: it is refused for search."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from precision_doctor import planted
from precision_doctor.backends import ort as ort_backend
from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.ort import OrtBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.backends.registry import ORT_CPU_REFUSAL, available_backends, search_refusal
from precision_doctor.environment import describe
from precision_doctor.graph.model import from_proto
from precision_doctor.measure.tolerance import Tolerance, check


def test_why_ort_cpu_cannot_search():
    """The reason, measured: on three_defects all-FP16 overflows to NaN under the emulation rule, while
    ORT's CPU provider runs the all-FP16 fixed.onnx within the tolerance (it computes in FP32)."""
    case = planted.three_defects()
    model = from_proto(case.model)
    x = case.samples(1, 0)[0]
    ref = ReferenceRunner(model).run(x)
    out = model.outputs[0]
    emulated = EmulateBackend(model).prepare(frozenset()).run(x)[out]
    cpu = OrtBackend(model, providers=["CPUExecutionProvider"]).prepare(frozenset()).run(x)[out]
    assert np.isnan(emulated).all()
    assert check(cpu, ref[out], Tolerance(case.atol, case.rtol)).passed


def test_diagnose_refuses_ort_cpu_in_one_line(run_cli, planted_file, tmp_path):
    case, path, files = planted_file("three_defects")
    out = tmp_path / "run"
    code, stdout, err = run_cli("diagnose", path, "--inputs", files[0], "--backend", "ort-cpu", "--out", out)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "--backend ort-cpu cannot search" in err and "--backend emulate" in err and "--confirm-backend" in err
    assert not out.exists()


def test_plain_ort_without_cuda_is_ort_cpu(monkeypatch):
    monkeypatch.setattr(ort_backend.ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    assert search_refusal("ort") == ORT_CPU_REFUSAL and search_refusal("ort-cpu") == ORT_CPU_REFUSAL
    monkeypatch.setattr(ort_backend.ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert search_refusal("ort") is None and search_refusal("ort-cuda") is None
    assert search_refusal("emulate") is None and search_refusal("ort-cpu") == ORT_CPU_REFUSAL


def test_help_and_env_say_so(run_cli):
    code, out, _ = run_cli("diagnose", "--help-all")
    text = " ".join(out.replace("│", " ").split())  # the help's option panels draw boxes
    assert code == 0 and "ort-cpu is refused" in text
    assert "plumbing check only" in text
    assert "not a search backend" in describe()["backend ort-cpu"]
    assert "ort-cpu" not in available_backends()
    assert "CPUExecutionProvider" in ort.get_available_providers()  # what `ort-cpu` would have used

