"""Backends by name: which names exist, which can run here, building one, and what `auto` means here."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from precision_doctor.backends.base import Backend
from precision_doctor.errors import SpecError, UserError
from precision_doctor.graph.model import Model

# Names a RunSpec may use; "ort" and "tensorrt" are accepted as aliases of "ort-cuda"/"ort-cpu" and "trt".
BACKENDS = ("emulate", "ort-cuda", "ort-cuda-gated", "ort-cpu", "trt", "auto")
_ALIASES = ("ort", "tensorrt")
AUTO_CONFIRM = "ort-cuda"  # where `auto` lets a CUDA machine's GPU have the last word
AUTO_SEARCH_GPU = "ort-cuda-gated"  # where `auto` searches on a CUDA machine: real FP16, a set is a feed


def check_backend_name(name: str, setting: str = "backends.backend") -> None:
    """SpecError (naming `setting`) for a backend name that does not exist."""
    if name not in BACKENDS and name not in _ALIASES:
        raise SpecError(setting, f"{{{setting}}}: unknown backend '{name}'; choose emulate, ort-cuda, ort-cuda-gated, "
                        "ort-cpu, trt or auto")


@functools.lru_cache(maxsize=1)
def cuda_machine() -> bool:
    """Whether ONNX Runtime runs on a CUDA GPU here: its CUDA provider is installed and a session of a
    one-node graph keeps it (a GPU and its libraries are present)."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        return False
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [vi("x", TensorProto.FLOAT, [1])],
                          [vi("y", TensorProto.FLOAT, [1])])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CUDAExecutionProvider"])
    except Exception:
        return False
    return "CUDAExecutionProvider" in sess.get_providers()


def available_backends() -> list[str]:
    """Backends that can search here, best first (`trt` only where its engines run on this GPU; never
    ort-cpu: see backends/ort.py)."""
    from precision_doctor.backends.tensorrt.library import find_library

    names = []
    try:
        lib = find_library()[0]
    except Exception:
        lib = None
    if lib is not None and lib.runtime().can_run:
        names.append("trt")
    if cuda_machine():
        names += ["ort-cuda", "ort-cuda-gated"]
    names.append("emulate")
    return names


@dataclass(frozen=True)
class BackendPlan:
    """What a run's backend settings mean on this machine: the search backend, the confirm backend (None:
    none), and, where `auto` found no GPU to search and confirm on, why (the report says the answer was not
    checked on a GPU). The capture and its ranking always run on the emulator (measure/capture.py)."""

    search: str
    confirm: str | None
    no_gpu: str | None = None


def plan_backends(backend: str, confirm: str | None, gpu: bool | None = None) -> BackendPlan:
    """What `auto` means here (`gpu`: None asks `cuda_machine()`): on a CUDA machine the GPU searches
    (`ort-cuda-gated`: one session, a set is a feed, 0.03-0.17 s an evaluation on an H100 against seconds on
    the CPU emulator) and `ort-cuda`, the real mixed graph as deployed, confirms and has the last word (a
    named confirm backend instead, if any); elsewhere the emulator searches, confirmed only on a named confirm
    backend. Other names are taken as they are."""
    if backend != "auto":
        return BackendPlan(backend, confirm)
    if gpu if gpu is not None else cuda_machine():
        return BackendPlan(AUTO_SEARCH_GPU if confirm != AUTO_SEARCH_GPU else "emulate", confirm or AUTO_CONFIRM)
    if confirm is not None:
        return BackendPlan("emulate", confirm)
    return BackendPlan("emulate", None, "no CUDA GPU here (ONNX Runtime's CUDA provider and a GPU are needed)")


def make_backend(
    name: str, model: Model, precision: str, outputs: Sequence[str], setting: str = "backends.backend",
    rules: str | None = None, target: str | None = None,
) -> Backend:
    """The backend called `name` (`auto`: the emulator; `plan_backends` says what auto searches on here); `rules`:
    the emulator's rules (`backends.rules`, the target's by default); `target` (`backends.target`): the runtime the
    answer is for, which sets how ONNX Runtime measures it (`graph/targets.py`: for `tensorrt` no graph optimization,
    every node its own kernel; for `ort-cuda` ORT_ENABLE_ALL, and the gated graph keeps fusion sites whole; None: as
    before targets, ORT_ENABLE_ALL and a gate per node). The caller closes it. A backend that cannot run here is a
    SpecError naming `setting` (the flag that asked for it)."""
    check_backend_name(name, setting)
    try:
        return _make(name, model, precision, outputs, rules, target)
    except SpecError:
        raise
    except UserError as exc:
        raise SpecError(setting, f"{{{setting}}} {name}: {exc}") from None


def _make(name: str, model: Model, precision: str, outputs: Sequence[str], rules: str | None,
          target: str | None) -> Backend:
    from precision_doctor.graph.targets import runtime

    level = runtime(target).ort_level if target is not None else None
    if name in ("auto", "emulate"):
        from precision_doctor.backends.emulate import EmulateBackend

        return EmulateBackend(model, precision, outputs, rules=rules)
    if name in ("ort", "ort-cuda", "ort-cpu"):
        from precision_doctor.backends.ort import OrtBackend

        providers = {"ort-cpu": ["CPUExecutionProvider"], "ort-cuda": ["CUDAExecutionProvider"]}.get(name)
        return OrtBackend(model, precision, providers=providers, outputs=outputs, level=level)
    if name == "ort-cuda-gated":
        from precision_doctor.backends.ort_gated import OrtGatedBackend

        units = target is not None and runtime(target).fused_units
        return OrtGatedBackend(model, precision, providers=["CUDAExecutionProvider"], outputs=outputs, level=level,
                               units=units)
    from precision_doctor.backends.tensorrt import TrtBackend

    return TrtBackend(model, precision=precision)


GPU_BACKENDS = ("ort-cuda", "ort-cuda-gated", "trt")  # real low precision on a GPU


def gpu_use(backend: str, confirm: str | None) -> str | None:
    """Whether a run with these backends runs on a GPU: "needs" (it searches or confirms on one), "wants"
    (`auto` without a confirm backend: it confirms on a GPU where there is one), or None. A Ray task asks
    for one GPU when it needs one, or wants one and the cluster has GPUs."""
    if backend in GPU_BACKENDS or confirm in GPU_BACKENDS:
        return "needs"
    return "wants" if backend == "auto" and confirm is None else None
