"""Which TensorRT library is here, what it can do, and whether this machine's GPU can run its engines.

One code path serves three libraries:

* `tensorrt` 10.x: weak typing available (`BuilderFlag.FP16`, layer precisions) besides strong typing;
* `tensorrt` 11.x: strongly typed networks only (the weak-typing API was removed);
* TensorRT-RTX (`tensorrt_rtx`, from PyPI's `tensorrt-rtx`; the wheel `tensorrt-rtx-cu13-bindings` alone
  provides `tensorrt_rtx_bindings`, which `tensorrt_rtx` re-exports): strongly typed only; its builder
  compiles ahead of time without a GPU, for target compute capabilities named in the builder config
  (by default a portable set, Ampere and later; Turing only when named); its runtime runs an engine
  only on a GPU whose compute capability is one it supports (not 9.0: no Hopper).

`load_library()` imports the first that works (`tensorrt`, then TensorRT-RTX; `prefer` or the
environment variable PRECISION_DOCTOR_TRT_LIBRARY=tensorrt|tensorrt_rtx picks one). GPUs are read
from `nvidia-smi` (name and compute capability), so the check needs no CUDA runtime and says
"no GPU" where there is none.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from precision_doctor.backends.tensorrt.tactics import DEFAULT_TACTIC_SOURCES
from precision_doctor.errors import UserError

TENSORRT, TENSORRT_RTX = "tensorrt", "tensorrt_rtx"
FAMILIES = (TENSORRT, TENSORRT_RTX)
# (family, module name) in the order they are tried.
MODULES = ((TENSORRT, "tensorrt"), (TENSORRT_RTX, "tensorrt_rtx"), (TENSORRT_RTX, "tensorrt_rtx_bindings"))
ENV_LIBRARY = "PRECISION_DOCTOR_TRT_LIBRARY"
LABELS = {TENSORRT: "TensorRT", TENSORRT_RTX: "TensorRT-RTX"}
# TensorRT-RTX builds for these by default when no target is named (its documentation: Ampere and
# later; Turing, 7.5, only when named, since a portable engine that includes it runs slower elsewhere).
RTX_OPT_IN = ((7, 5),)

CC = tuple[int, int]


def format_cc(cc: CC) -> str:
    return f"{cc[0]}.{cc[1]}"


def parse_cc(text: str) -> CC:
    """'8.6' or 'sm86' or '86' -> (8, 6); UserError otherwise."""
    t = str(text).strip().lower().removeprefix("sm").removeprefix("_")
    m = re.fullmatch(r"(\d+)\.(\d+)", t) or re.fullmatch(r"(\d+)(\d)", t)
    if not m:
        raise UserError(f"compute capability '{text}': write it as major.minor, e.g. 8.6")
    return int(m.group(1)), int(m.group(2))


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi reports it."""

    name: str
    compute_capability: CC | None

    def describe(self) -> str:
        cc = format_cc(self.compute_capability) if self.compute_capability else "unknown"
        return f"{self.name}, compute capability {cc}"


def nvidia_smi(fields: str) -> list[str]:
    """nvidia-smi's CSV rows for `--query-gpu=<fields>`, one per GPU (none where it is absent or fails)."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def query_gpus() -> list[Gpu]:
    """GPUs that nvidia-smi lists, with their compute capabilities."""
    gpus = []
    for line in nvidia_smi("name,compute_cap"):
        name, _, cap = line.rpartition(",")
        try:
            cc = parse_cc(cap)
        except UserError:
            name, cc = line, None
        gpus.append(Gpu(name.strip() or line, cc))
    return gpus


@dataclass(frozen=True)
class RunCapability:
    """Whether engines of a library can run here, and a one-line reason."""

    can_run: bool
    reason: str
    gpu: Gpu | None = None


@dataclass(frozen=True)
class TrtLibrary:
    """An imported TensorRT-family module with what the code paths need to know of it."""

    module: Any
    family: str
    module_name: str
    version: str

    @property
    def label(self) -> str:
        return f"{LABELS[self.family]} {self.version}"

    @property
    def major(self) -> int:
        return trt_major_version(self.version) or 0

    @property
    def is_rtx(self) -> bool:
        return self.family == TENSORRT_RTX

    @property
    def weak_typing(self) -> bool:
        """FP16/BF16 builder flags and obeyed layer precisions exist (TensorRT 10.x only)."""
        flags = getattr(self.module, "BuilderFlag", None)
        return not self.is_rtx and all(hasattr(flags, f) for f in ("FP16", "OBEY_PRECISION_CONSTRAINTS"))

    @property
    def strongly_typed_only(self) -> bool:
        return not self.weak_typing

    @cached_property
    def tactic_sources(self) -> dict[str, int]:
        """The members of `TacticSource` (name -> bit index) this version has."""
        members = getattr(getattr(self.module, "TacticSource", None), "__members__", {}) or {}
        return {n: int(m) for n, m in members.items()}

    @cached_property
    def default_tactic_sources(self) -> tuple[str, ...]:
        """The tactic sources a fresh builder config enables (asked of the library: TensorRT-RTX answers
        without a GPU; where no builder can be made, the two convolution sources every version enables)."""
        trt = self.module
        try:
            mask = int(trt.Builder(trt.Logger(trt.Logger.ERROR)).create_builder_config().get_tactic_sources())
        except Exception:  # no builder without a GPU (TensorRT), or bindings that differ
            return tuple(n for n in DEFAULT_TACTIC_SOURCES if n in self.tactic_sources)
        return tuple(n for n, bit in self.tactic_sources.items() if mask >> bit & 1)

    @cached_property
    def target_compute_capabilities(self) -> tuple[CC, ...]:
        """Compute capabilities an ahead-of-time build can target (TensorRT-RTX's `ComputeCapability`
        members `SM<major><minor>`); empty for TensorRT, which builds for the GPU it runs on."""
        members = getattr(getattr(self.module, "ComputeCapability", None), "__members__", {}) or {}
        out = []
        for name in members:
            m = re.fullmatch(r"SM(\d+)(\d)", name)
            if m:
                out.append((int(m.group(1)), int(m.group(2))))
        return tuple(sorted(out))

    @property
    def default_compute_capabilities(self) -> tuple[CC, ...]:
        """What a TensorRT-RTX build targets when none is named (the portable set)."""
        return tuple(cc for cc in self.target_compute_capabilities if cc not in RTX_OPT_IN)

    def runtime(self, gpus: list[Gpu] | None = None) -> RunCapability:
        """Can engines of this library run on this machine's first GPU?"""
        gpus = query_gpus() if gpus is None else gpus
        if not gpus:
            return RunCapability(False, f"{self.label} cannot run engines here: no GPU (nvidia-smi lists none)")
        gpu = gpus[0]
        if not self.is_rtx:
            return RunCapability(True, f"{self.label} builds and runs engines for {gpu.describe()}", gpu)
        supported = " ".join(format_cc(c) for c in self.target_compute_capabilities)
        if gpu.compute_capability not in self.target_compute_capabilities:
            return RunCapability(
                False, f"{self.label} cannot run engines on {gpu.describe()} (it runs on compute capability {supported})", gpu
            )
        return RunCapability(True, f"{self.label} runs engines on {gpu.describe()}", gpu)


def trt_major_version(version: str | None = None) -> int | None:
    """Major version of `version`, or of the importable `tensorrt` when None; None if unknown."""
    if version is None:
        try:
            import tensorrt
        except Exception:  # missing, or bindings without their libraries
            return None
        version = getattr(tensorrt, "__version__", None)
        if not version:
            return None
    m = re.match(r"\s*v?(\d+)", str(version))
    return int(m.group(1)) if m else None


def _import(module_name: str) -> tuple[Any | None, str]:
    try:
        mod = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or OSError/RuntimeError from bindings without libraries
        text = str(exc).strip()
        return None, text.splitlines()[0][:160] if text else type(exc).__name__
    if not hasattr(mod, "Builder"):
        return None, "no Builder (bindings without their libraries?)"
    return mod, ""


def find_library(prefer: str | None = None) -> tuple[TrtLibrary | None, list[str]]:
    """The first importable library (`prefer` first, else PRECISION_DOCTOR_TRT_LIBRARY, else the
    order of MODULES), and why each one tried did not import."""
    prefer = prefer or os.environ.get(ENV_LIBRARY) or None
    if prefer is not None and prefer not in FAMILIES:
        raise UserError(f"TensorRT library '{prefer}': choose {' or '.join(FAMILIES)} ({ENV_LIBRARY})")
    order = [m for m in MODULES if prefer in (None, m[0])]
    why = []
    for family, name in order:
        mod, reason = _import(name)
        if mod is not None:
            version = str(getattr(mod, "__version__", "") or "")
            return TrtLibrary(mod, family, name, version), why
        why.append(f"{name}: {reason}")
    return None, why


def load_library(prefer: str | None = None) -> TrtLibrary:
    """The TensorRT library to use, or a one-line UserError saying what is missing."""
    lib, why = find_library(prefer)
    if lib is None:
        wanted = LABELS[prefer] if prefer else "TensorRT or TensorRT-RTX"
        raise UserError(
            f"{wanted} is not installed ({'; '.join(why)}); install `pip install '.[trt]'` (TensorRT-RTX from PyPI) "
            "or TensorRT 10/11 with its libraries, or use another backend"
        )
    return lib


def use_library_in_polygraphy(lib: TrtLibrary) -> None:
    """Make polygraphy's TensorRT backend import the same module as `lib` (it decides once, when its
    `polygraphy.backend.trt` modules are first imported, from `polygraphy.config.USE_TENSORRT_RTX`)."""
    import sys

    from polygraphy import config

    want = lib.is_rtx
    if bool(config.USE_TENSORRT_RTX) != want and "polygraphy.backend.trt" in sys.modules:
        raise UserError(
            f"polygraphy's TensorRT backend is already loaded for {'tensorrt' if want else 'tensorrt_rtx'} in this process; "
            f"cannot switch it to {lib.module_name}"
        )
    config.USE_TENSORRT_RTX = want
    if want and lib.module_name != "tensorrt_rtx":
        # polygraphy imports `tensorrt_rtx`, which PyPI's `tensorrt-rtx` provides as a re-export of
        # `tensorrt_rtx_bindings`; with the bindings wheel alone, the same module stands in for it.
        sys.modules.setdefault("tensorrt_rtx", lib.module)
