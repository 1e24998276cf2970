"""What this machine offers: ONNX Runtime and its providers, polygraphy, TensorRT, GPUs."""

from __future__ import annotations

import importlib
import platform
import shutil
import subprocess


def _version(module: str) -> str | None:
    try:
        mod = importlib.import_module(module)
    except Exception:
        return None
    return str(getattr(mod, "__version__", "unknown"))


def tensorrt_status() -> str:
    try:
        import tensorrt as trt  # noqa: F401
    except Exception as exc:
        return (
            f"not installed ({type(exc).__name__}): the TensorRT backend and `--backend trt` are unavailable; "
            "emulation and ONNX Runtime still diagnose, and the emitted trtexec/polygraphy commands "
            "run wherever TensorRT is installed"
        )
    return f"{trt.__version__} ({'strongly typed only' if int(trt.__version__.split('.')[0]) >= 11 else 'weak typing available'})"


def gpus() -> list[str]:
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


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
    }
