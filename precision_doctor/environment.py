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

    providers = ort_providers()
    return {
        "precision-doctor": __version__,
        "python": platform.python_version(),
        "onnx": _version("onnx") or "not installed",
        "onnxruntime": f"{_version('onnxruntime') or 'not installed'} (providers: {', '.join(providers) or 'none'})",
        "polygraphy": _version("polygraphy") or "not installed",
        "onnx-graphsurgeon": _version("onnx_graphsurgeon") or "not installed",
        "tensorrt": tensorrt_status(),
        "cuda-python": _version("cuda") or _version("cuda.bindings") or "not installed",
        "gpus": "; ".join(gpus()) or "none found (nvidia-smi absent or no GPU)",
        "backends": ", ".join(available_backends()),
        "ort-cpu": "not a search backend (refused: ONNX Runtime's CPU provider computes chains of FP16 nodes in FP32, "
        "so its verdicts are not FP16's); usable as --confirm-backend ort-cpu, a plumbing check that fixed.onnx "
        "loads and runs",
    }


def available_backends() -> list[str]:
    """Backends that can search here, best first (never ort-cpu: see backends/ort.py)."""
    names = []
    try:
        import tensorrt  # noqa: F401

        names.append("trt")
    except Exception:
        pass
    if "CUDAExecutionProvider" in ort_providers():
        names.append("ort-cuda")
    names.append("emulate")
    return names
