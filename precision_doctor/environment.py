"""What this machine offers: ONNX Runtime and its providers, polygraphy, TensorRT, GPUs."""

from __future__ import annotations

import importlib
import platform
from dataclasses import dataclass


def _version(module: str) -> str | None:
    try:
        mod = importlib.import_module(module)
    except Exception:
        return None
    return str(getattr(mod, "__version__", "unknown"))


def tensorrt_status() -> str:
    """Which TensorRT library is here (TensorRT 10/11 or TensorRT-RTX), what it can do, and whether
    this machine's GPU can run its engines; or why none is usable."""
    from precision_doctor.backends.tensorrt.library import find_library

    try:
        lib, why = find_library()
    except Exception as exc:  # a bad PRECISION_DOCTOR_TRT_LIBRARY value
        return f"not usable: {exc}"
    if lib is None:
        return (
            f"not installed ({'; '.join(why)}): `--backend trt` is unavailable and fixed.onnx is not checked against a "
            "TensorRT parser; `pip install '.[trt]'` installs TensorRT-RTX from PyPI (parse, check and ahead-of-time "
            "builds without a GPU); the emitted trtexec/polygraphy commands run wherever TensorRT is installed"
        )
    typing = "strongly typed only" if lib.strongly_typed_only else "weak typing available"
    run = lib.runtime()
    if lib.is_rtx:
        default = lib.default_compute_capabilities
        targets = " ".join(f"{a}.{b}" for a, b in default)
        opt_in = " ".join(f"{a}.{b}" for a, b in lib.target_compute_capabilities if (a, b) not in default)
        what = f"{typing}; builds ahead of time without a GPU for compute capability {targets}" + (
            f" by default ({opt_in} when named: --engine-targets)" if opt_in else "")
    else:
        what = f"{typing}; builds for the GPU present"
    return f"{lib.label} ({lib.module_name}; {what}); {run.reason}"


def gpus() -> list[str]:
    from precision_doctor.backends.tensorrt.library import nvidia_smi

    return nvidia_smi("name,memory.total,driver_version,compute_cap")


def ort_providers() -> list[str]:
    try:
        import onnxruntime as ort
    except Exception:
        return []
    return list(ort.get_available_providers())


@dataclass(frozen=True)
class BackendStatus:
    """One backend: whether it runs here (and why not), and what it is good for."""

    name: str
    runs_here: bool
    why_not: str
    good_for: str

    def line(self) -> str:
        state = "runs here" if self.runs_here else f"not here ({self.why_not})"
        return f"{state}; {self.good_for}"


def backend_statuses() -> list[BackendStatus]:
    """Every backend name, whether it runs on this machine (and why not), and what it is for: the registry's entries
    (backends/registry.py)."""
    from precision_doctor.backends import registry

    out = []
    for b in registry.listed():
        try:
            why = b.unavailable()
        except Exception as exc:  # a library that fails to load
            why = str(exc)
        out.append(BackendStatus(b.name, why is None, why or "", b.about))
    return out


def describe() -> dict[str, str]:
    from precision_doctor import __version__
    from precision_doctor.backends.registry import available_backends

    providers = ort_providers()
    return {
        "precision-doctor": __version__,
        "python": platform.python_version(),
        "onnx": _version("onnx") or "not installed",
        "onnxruntime": f"{_version('onnxruntime') or 'not installed'} (providers: {', '.join(providers) or 'none'})",
        "polygraphy": _version("polygraphy") or "not installed",
        "tensorrt": tensorrt_status(),
        "cuda-python": _version("cuda") or _version("cuda.bindings") or "not installed",
        "gpus": "; ".join(gpus()) or "none found (nvidia-smi absent or no GPU)",
        "backends usable here": ", ".join(available_backends()),
        **{f"backend {b.name}": b.line() for b in backend_statuses()},
    }
