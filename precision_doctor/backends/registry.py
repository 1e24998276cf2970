"""Backends by name: which names exist, which can run here, and building one."""

from __future__ import annotations

from collections.abc import Sequence

from precision_doctor.backends.base import Backend
from precision_doctor.errors import SpecError, UserError
from precision_doctor.graph.model import Model

# Names a RunSpec may use; "ort" and "tensorrt" are accepted as aliases of "ort-cuda"/"ort-cpu" and "trt".
BACKENDS = ("emulate", "ort-cuda", "ort-cpu", "trt", "auto")
_ALIASES = ("ort", "tensorrt")


def check_backend_name(name: str, setting: str = "backends.backend") -> None:
    """SpecError (naming `setting`) for a backend name that does not exist."""
    if name not in BACKENDS and name not in _ALIASES:
        raise SpecError(setting, f"{{{setting}}}: unknown backend '{name}'; choose emulate, ort-cuda, ort-cpu, trt or auto")


def available_backends() -> list[str]:
    """Backends that can search here, best first (`trt` only where its engines run on this GPU; never
    ort-cpu: see backends/ort.py)."""
    from precision_doctor.backends.tensorrt.library import find_library
    from precision_doctor.environment import ort_providers

    names = []
    try:
        lib = find_library()[0]
    except Exception:
        lib = None
    if lib is not None and lib.runtime().can_run:
        names.append("trt")
    if "CUDAExecutionProvider" in ort_providers():
        names.append("ort-cuda")
    names.append("emulate")
    return names


def make_backend(name: str, model: Model, precision: str, outputs: Sequence[str], setting: str = "backends.backend") -> Backend:
    """The backend called `name`; `auto` picks the best one available here. The caller closes it. A backend
    that cannot run here is a SpecError naming `setting` (the flag that asked for it)."""
    check_backend_name(name, setting)
    try:
        return _make(name, model, precision, outputs)
    except SpecError:
        raise
    except UserError as exc:
        raise SpecError(setting, f"{{{setting}}} {name}: {exc}") from None


def _make(name: str, model: Model, precision: str, outputs: Sequence[str]) -> Backend:
    if name == "auto":
        name = available_backends()[0]
    if name == "emulate":
        from precision_doctor.backends.emulate import EmulateBackend

        return EmulateBackend(model, precision, outputs)
    if name in ("ort", "ort-cuda", "ort-cpu"):
        from precision_doctor.backends.ort import OrtBackend

        providers = {"ort-cpu": ["CPUExecutionProvider"], "ort-cuda": ["CUDAExecutionProvider"]}.get(name)
        return OrtBackend(model, precision, providers=providers, outputs=outputs)
    from precision_doctor.backends.tensorrt import TrtBackend

    return TrtBackend(model, precision=precision)


# Backends that run on a GPU (a batch on Ray asks a GPU for models that search or confirm on one).
GPU_BACKENDS = ("ort-cuda", "ort-cuda-gated", "trt", "tensorrt")
