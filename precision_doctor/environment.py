"""What this machine offers: ONNX Runtime and its providers, polygraphy, TensorRT, GPUs."""

from __future__ import annotations

import importlib
import platform


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
        targets = " ".join(f"{a}.{b}" for a, b in lib.target_compute_capabilities)
        what = f"{typing}; builds ahead of time without a GPU for compute capability {targets}"
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
        "backends": ", ".join(available_backends()),
        "ort-cpu": "not a search backend (refused: ONNX Runtime's CPU provider computes chains of FP16 nodes in FP32, "
        "so its verdicts are not FP16's); usable as --confirm-backend ort-cpu, a plumbing check that fixed.onnx "
        "loads and runs",
    }
