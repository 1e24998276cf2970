"""Backends by name: one `BackendInfo` per backend (how to make it, whether it computes on a GPU, whether it may only
check an answer, its knobs, whether it runs here, what it is for), and what is derived from them: the names a RunSpec
may use (`check_backend_name`), which backends run here (`available_backends`), what `auto` means here
(`plan_backends`), building one (`make_backend`), and the questions other layers ask of a backend's name (`on_gpu`,
`check_only`, `knob_family`, `search_refusal`, `gpu_use`). The CLI's help (cli/options.py), `env`
(environment.py) and the settings' checks (pipeline/spec_check.py) read the entries. A new backend is its module and
one entry in `BACKENDS`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from precision_doctor.backends import knobs
from precision_doctor.backends.base import Backend
from precision_doctor.errors import SpecError, UserError
from precision_doctor.graph.model import Model

# (model, precision, output names, the emulator's rules, the target runtime) -> a backend; see `make_backend`
Factory = Callable[[Model, str, Sequence[str], "str | None", "str | None"], Backend]
CUDA = "CUDAExecutionProvider"
AUTO, EMULATE = "auto", "emulate"
AUTO_CONFIRM = "ort-cuda"  # where `auto` lets a CUDA machine's GPU have the last word
AUTO_SEARCH_GPU = "ort-cuda-gated"  # where `auto` searches on a CUDA machine: real FP16, a set is a feed

ORT_CPU_REFUSAL = (
    "--backend ort-cpu cannot search: ONNX Runtime's CPU provider runs chains of FP16 nodes in FP32 and drops the "
    "roundings between them, so its verdicts are not FP16's (it finds nothing to keep in FP32 in "
    "examples/three_defects.onnx, where FP16 gives NaN); search with --backend emulate (explicit FP16 rounding, on "
    "this CPU) or ort-cuda/trt on a GPU; ort-cpu stays usable as --confirm-backend, a plumbing check that fixed.onnx "
    "loads and runs, not an FP16 verdict"
)


def _none() -> str | None:
    return None


@dataclass(frozen=True)
class BackendInfo:
    """One backend. `name`: as a RunSpec names it; `aliases`: other names for it (a RunSpec's, or the one its Backend
    calls itself in reports: "tensorrt"); `make`: its factory; `about`: what it is for (`env`); `brief`: a few words
    after its name in `--backend`'s help (for one that may not search: why not). `gpu`: it computes in real low
    precision on a GPU; `check_only`: it may only check an answer, add nodes to a failing one (more FP32 is the safe
    direction), never remove one nor certify it; `runs_fixed`: it runs the mixed graph fixed.onnx is (not a stand-in
    for it: the emulator's explicit rounding, the gated graph), so it is worth confirming an answer on; `knobs`: its
    knob family (backends/knobs.py; None: none); `only_target`: the one target runtime it measures (None: any);
    `unavailable`: why it cannot run here (None: it can); `checked_early`: the settings' check refuses it where it
    cannot run, before any work (the ONNX Runtime backends say why when their session opens); `search_refusal`: why
    it may not search here (None: it may); `rank`: its place among the backends that run here, best first (None:
    never listed there); `listed`: named in the help and in errors."""

    name: str
    make: Factory
    about: str
    brief: str | None = None
    aliases: tuple[str, ...] = ()
    gpu: bool = False
    check_only: bool = False
    runs_fixed: bool = False
    knobs: str | None = None
    only_target: str | None = None
    unavailable: Callable[[], str | None] = _none
    checked_early: bool = False
    search_refusal: Callable[[], str | None] = _none
    rank: int | None = None
    listed: bool = True


# -- the factories and the checks the entries name ------------------------------------------------------------


def _level(target: str | None) -> str | None:
    """ONNX Runtime's graph optimization level for measuring `target` (None: as before targets, ORT_ENABLE_ALL)."""
    from precision_doctor.graph.targets import runtime

    return runtime(target).ort_level if target is not None else None


def _emulate(model: Model, precision: str, outputs: Sequence[str], rules: str | None, target: str | None) -> Backend:
    from precision_doctor.backends.emulate import EmulateBackend

    return EmulateBackend(model, precision, outputs, rules=rules)


def _ort(providers: list[str] | None) -> Factory:
    def make(model: Model, precision: str, outputs: Sequence[str], rules: str | None, target: str | None) -> Backend:
        from precision_doctor.backends.ort import OrtBackend

        return OrtBackend(model, precision, providers=providers, outputs=outputs, level=_level(target))

    return make


def _ort_gated(model: Model, precision: str, outputs: Sequence[str], rules: str | None, target: str | None) -> Backend:
    from precision_doctor.backends.ort_gated import OrtGatedBackend
    from precision_doctor.graph.targets import runtime

    units = target is not None and runtime(target).fused_units
    return OrtGatedBackend(model, precision, providers=[CUDA], outputs=outputs, level=_level(target), units=units)


def _trt(model: Model, precision: str, outputs: Sequence[str], rules: str | None, target: str | None) -> Backend:
    from precision_doctor.backends.tensorrt import TrtBackend

    return TrtBackend(model, precision=precision)


def _providers() -> list[str]:
    try:
        import onnxruntime as ort
    except ImportError:
        return []
    return list(ort.get_available_providers())


def _needs_cuda() -> str | None:
    if cuda_machine():
        return None
    return f"needs onnxruntime-gpu with its CUDA provider and a GPU; providers here: {', '.join(_providers()) or 'none'}"


def _no_trt() -> str | None:
    from precision_doctor.backends.tensorrt.availability import trt_refusal

    return trt_refusal()


def _ort_without_cuda() -> str | None:
    """`ort` is ONNX Runtime's CUDA provider where there is one, else its CPU provider, which may not search."""
    return None if CUDA in _providers() else ORT_CPU_REFUSAL


BACKENDS: tuple[BackendInfo, ...] = (
    BackendInfo(
        EMULATE, _emulate, rank=3,
        about="the default search backend: ONNX Runtime on the CPU with every node's rounding to FP16/BF16 made explicit "
              "(the emulation rule), one session for the whole search; fast and close to a GPU's FP16, not exact: let "
              "the target GPU confirm the answer"),
    BackendInfo(
        "ort-cuda", _ort([CUDA]), gpu=True, runs_fixed=True, knobs=knobs.ORT_CUDA, unavailable=_needs_cuda, rank=1,
        brief="the real mixed graph, one session per set",
        about="the real mixed-precision graph on ONNX Runtime's CUDA provider, a GPU's own verdict: --confirm-backend "
              "ort-cuda finishes an emulated search on the GPU; --backend ort-cuda searches there"),
    BackendInfo(
        "ort-cuda-gated", _ort_gated, gpu=True, unavailable=_needs_cuda, rank=2,
        brief="real FP16 in one session, a set is a feed; no kernel fusions",
        about="real FP16 on ONNX Runtime's CUDA provider in one session for every fallback set (a set is a feed, not a "
              "new session): where --backend auto searches on a CUDA machine; each node is gated alone, so ONNX "
              "Runtime's kernel fusions do not form (with --target ort-cuda each fusion site is gated whole): ort-cuda "
              "confirms the answer on the real mixed graph"),
    BackendInfo(
        "ort-cpu", _ort(["CPUExecutionProvider"]), check_only=True, runs_fixed=True, knobs=knobs.ORT_CPU,
        search_refusal=lambda: ORT_CPU_REFUSAL,
        brief="ONNX Runtime's CPU provider computes FP16 chains in FP32",
        about="only as --confirm-backend ort-cpu, a check that fixed.onnx loads and runs; not a search backend, "
              "anywhere: ONNX Runtime's CPU provider runs chains of FP16 nodes in FP32 and drops the roundings between "
              "them, so its verdicts are not FP16's (in examples/three_defects.onnx it keeps nothing in FP32 where "
              "FP16 gives NaN)"),
    BackendInfo(
        "trt", _trt, aliases=("tensorrt",), gpu=True, runs_fixed=True, knobs=knobs.TRT, only_target="tensorrt",
        unavailable=_no_trt, checked_early=True, rank=0,
        about="TensorRT engines of the candidate sets, the deployment's own verdict; an engine build per evaluation, "
              "so best as --confirm-backend trt"),
    BackendInfo(
        AUTO, _emulate,
        brief="default: search with the emulator, then let a CUDA GPU have the last word: confirm on ort-cuda where one is",
        about=f"the default: where ONNX Runtime has a CUDA GPU it searches on {AUTO_SEARCH_GPU} and confirms on "
              f"{AUTO_CONFIRM} (the GPU has the last word), elsewhere it searches with the emulator (confirmed only on a "
              "--confirm-backend)"),
    # ONNX Runtime's CUDA provider where it has one, else its CPU provider (the Backend names itself either way)
    BackendInfo("ort", _ort(None), listed=False, search_refusal=_ort_without_cuda,
                about="ort-cuda where ONNX Runtime has its CUDA provider, else ort-cpu"),
)
_BY_NAME: dict[str, BackendInfo] = {n: b for b in BACKENDS for n in (b.name, *b.aliases)}


def info(name: str | None) -> BackendInfo | None:
    """The entry of the backend called `name` (a RunSpec's name, an alias, or the name a Backend gives itself in
    reports); None for a name no entry has (`ort-cpu-gated`: the gated graph on the CPU, a plumbing check)."""
    return _BY_NAME.get(name) if name is not None else None


def listed() -> list[BackendInfo]:
    """The backends the help and the errors name, in order."""
    return [b for b in BACKENDS if b.listed]


def check_backend_name(name: str, setting: str = "backends.backend") -> None:
    """SpecError (naming `setting`) for a backend name that does not exist."""
    if info(name) is None:
        names = [b.name for b in listed()]
        raise SpecError(setting, f"{{{setting}}}: unknown backend '{name}'; choose {', '.join(names[:-1])} or {names[-1]}")


def on_gpu(name: str | None) -> bool:
    """Whether the backend called `name` computes in real low precision on a GPU."""
    return (b := info(name)) is not None and b.gpu


def set_per_run(name: str | None) -> bool:
    """Whether the backend called `name` builds the mixed graph of each set it tries (a session or an engine per set,
    seconds each on a GPU, where a gated graph's set is a feed): removals tried one by one cost that each there."""
    return (b := info(name)) is not None and b.runs_fixed


def check_only(name: str | None) -> bool:
    """Whether the backend called `name` (as it names itself: a Backend's `name`, a report's `confirm.backend`) may
    only check an answer: add nodes to a failing one, never remove one, never certify it (backends/ort.py: ort-cpu)."""
    return (b := info(name)) is not None and b.check_only


def knob_family(name: str | None) -> str | None:
    """The knob family of the backend called `name` (its Backend's name; None: it has no knobs, as the emulator)."""
    return b.knobs if (b := info(name)) is not None else None


def search_refusal(name: str) -> str | None:
    """Why the backend called `name` may not search here (None: it may): ONNX Runtime on the CPU provider, named
    `ort-cpu` or `ort` without a CUDA provider."""
    return b.search_refusal() if (b := info(name)) is not None else None


@functools.lru_cache(maxsize=1)
def cuda_machine() -> bool:
    """Whether ONNX Runtime runs on a CUDA GPU here: its CUDA provider is installed and a session of a
    one-node graph keeps it (a GPU and its libraries are present)."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        return False
    if CUDA not in ort.get_available_providers():
        return False
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [vi("x", TensorProto.FLOAT, [1])],
                          [vi("y", TensorProto.FLOAT, [1])])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(proto.SerializeToString(), so, providers=[CUDA])
    except Exception:
        return False
    return CUDA in sess.get_providers()


def runs_here(b: BackendInfo) -> bool:
    """Whether the backend of entry `b` runs on this machine."""
    try:
        return b.unavailable() is None
    except Exception:  # a library that fails to load runs nothing
        return False


def available_backends() -> list[str]:
    """Backends that can search here, best first (`trt` only where its engines run on this GPU; never
    ort-cpu: see backends/ort.py)."""
    ranked = sorted((b for b in BACKENDS if b.rank is not None), key=lambda b: b.rank)
    return [b.name for b in ranked if runs_here(b)]


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
    if backend != AUTO:
        return BackendPlan(backend, confirm)
    if gpu if gpu is not None else cuda_machine():
        return BackendPlan(AUTO_SEARCH_GPU if confirm != AUTO_SEARCH_GPU else EMULATE, confirm or AUTO_CONFIRM)
    if confirm is not None:
        return BackendPlan(EMULATE, confirm)
    return BackendPlan(EMULATE, None, "no CUDA GPU here (ONNX Runtime's CUDA provider and a GPU are needed)")


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
    b = info(name)
    assert b is not None, name
    return b.make(model, precision, outputs, rules, target)


def gpu_use(backend: str, confirm: str | None) -> str | None:
    """Whether a run with these backends runs on a GPU: "needs" (it searches or confirms on one), "wants"
    (`auto` without a confirm backend: it confirms on a GPU where there is one), or None. A Ray task asks
    for one GPU when it needs one, or wants one and the cluster has GPUs."""
    if on_gpu(backend) or on_gpu(confirm):
        return "needs"
    return "wants" if backend == AUTO and confirm is None else None


def engine_targets_refusal(targets: Sequence[str] | None) -> str | None:
    """Why the fixed engine cannot be built for these compute capabilities (None: it can, or none were named): the
    TensorRT family's check (backends/tensorrt/availability.py), asked without importing a TensorRT library until
    targets are named."""
    if not targets:
        return None
    from precision_doctor.backends.tensorrt.availability import check_engine_targets

    return check_engine_targets(targets)
