"""Knobs: settings that change how a backend computes without changing which nodes are FP32.

An FP32 fallback set is not the only fix: the kernel a backend picks changes the error too (cuDNN's
convolution algorithms differ by up to 2x in FP16 error on an H100, docs/BENCHMARKS.md), and TF32
rounds FP32 islands to 10-bit mantissas. So a search may first try "a knob configuration alone"
(all low precision under another configuration) or "a knob configuration with a smaller set" (the
answer less one node), and keep the answer only when neither passes (`knob_plan`).

* ONNX Runtime CUDA provider options: `cudnn_conv_algo_search` EXHAUSTIVE (ORT's default),
  HEURISTIC or DEFAULT (IMPLICIT_PRECOMP_GEMM), and `use_tf32` (ORT's default 1; our OrtBackend's 0).
* TensorRT: the tactic sources the installed library has (TensorRT 10: CUBLAS, CUBLAS_LT, CUDNN off
  by default, EDGE_MASK_CONVOLUTIONS and JIT_CONVOLUTIONS on; TensorRT 11 and TensorRT-RTX 1.7 only
  the last two), one default source removed or one other source added at a time, and TF32.

Each configuration knows the text a user pastes: ORT provider options here, trtexec and polygraphy flags in
`backends/tensorrt/flags.py` (which results/commands.py builds every TensorRT command with).
A backend's family is its registry entry's (`backends.registry.knob_family`); `knob_configs` and `knob_backend`
give a search the configurations of a family and a backend built for each (pipeline/knob_search.py runs the plan).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

ORT_CUDA, TRT = "ort-cuda", "trt"
ORT_CPU = "ort-cpu"  # ORT CUDA's configurations on the CPU provider, where they change nothing (plumbing)
ORT_CUDA_KNOBS: dict[str, tuple[str, ...]] = {
    "cudnn_conv_algo_search": ("EXHAUSTIVE", "HEURISTIC", "DEFAULT"),
    "use_tf32": ("0", "1"),
}
# Our OrtBackend's defaults (ORT's own use_tf32 default is 1; ours keeps FP32 nodes in FP32).
ORT_CUDA_DEFAULTS = {"cudnn_conv_algo_search": "EXHAUSTIVE", "use_tf32": "0"}
TACTICS, TF32 = "tactic_sources", "tf32"


@dataclass(frozen=True)
class KnobConfig:
    """One configuration of a backend's knobs: `settings` are the (name, value) pairs that differ
    from the backend's defaults (none: the default configuration). For TensorRT, `tactic_sources`
    is trtexec's `-A`/`+B` change of the library's default sources."""

    backend: str
    settings: tuple[tuple[str, str], ...] = ()

    def get(self, name: str, default: str | None = None) -> str | None:
        return dict(self.settings).get(name, default)

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.settings) or "default"

    @property
    def is_default(self) -> bool:
        return not self.settings


def ort_cuda_configs(knobs: Mapping[str, Sequence[str]] = ORT_CUDA_KNOBS) -> list[KnobConfig]:
    """Every combination of the ORT CUDA provider options, our backend's default first."""
    names = list(knobs)
    out = []
    for values in itertools.product(*(knobs[n] for n in names)):
        settings = tuple((k, v) for k, v in zip(names, values) if v != ORT_CUDA_DEFAULTS.get(k))
        out.append(KnobConfig(ORT_CUDA, settings))
    return sorted(out, key=lambda c: not c.is_default)


def ort_provider_options(config: KnobConfig) -> dict[str, str]:
    """The CUDA provider options of a configuration (unset ones: our backend's defaults)."""
    return {**ORT_CUDA_DEFAULTS, **dict(config.settings)}


def ort_providers(config: KnobConfig) -> list:
    """`providers=` for an ONNX Runtime session (and for `OrtBackend(providers=...)`)."""
    return [("CUDAExecutionProvider", ort_provider_options(config)), "CPUExecutionProvider"]


def ort_providers_text(config: KnobConfig) -> str:
    """The `providers=` argument as Python source, to paste into `onnxruntime.InferenceSession(...)`."""
    opts = ", ".join(f'"{k}": "{v}"' for k, v in ort_provider_options(config).items())
    return f'providers=[("CUDAExecutionProvider", {{{opts}}}), "CPUExecutionProvider"]'


def trt_configs(available: Sequence[str], enabled_by_default: Sequence[str], tf32: bool = True) -> list[KnobConfig]:
    """TensorRT configurations: the defaults; each default tactic source removed alone; each other
    available source added alone; and, with `tf32`, each of those with TF32 on (our builds clear it)."""
    changes = [""]
    changes += [f"-{s}" for s in enabled_by_default if s in available]
    changes += [f"+{s}" for s in available if s not in enabled_by_default]
    out = []
    for t in ("0", "1") if tf32 else ("0",):
        for change in changes:
            settings = ((TACTICS, change), (TF32, "1" if t == "1" else ""))
            out.append(KnobConfig(TRT, tuple(p for p in settings if p[1])))
    return out


def trt_backend_kwargs(config: KnobConfig) -> dict:
    """Keyword arguments of `TrtBackend` for a TensorRT configuration."""
    change = config.get(TACTICS, "")
    return {"tactic_sources": change or None, "tf32": config.get(TF32, "0") == "1"}


@dataclass(frozen=True)
class Trial:
    """One configuration and fallback set to evaluate, and why it is in the plan."""

    knobs: KnobConfig
    fallback: frozenset[str]
    why: str


def knob_plan(answer: Sequence[str], configs: Sequence[KnobConfig]) -> list[Trial]:
    """What to try, in order: the answer under the default configuration (the baseline); every
    configuration alone (an empty set: all low precision; the default too, so that a knob is not
    credited with what the backend does anyway); then every configuration with the answer less one
    node (smaller sets, in the answer's order). `configs[0]` is taken as the default."""
    answer = list(dict.fromkeys(answer))
    plan = [Trial(configs[0], frozenset(answer), "the answer, default knobs")]
    if not answer:
        return plan
    plan += [Trial(c, frozenset(), "knobs alone") for c in configs]
    for c in configs:
        for node in answer:
            plan.append(Trial(c, frozenset(n for n in answer if n != node), f"the answer less {node}"))
    return plan


def best_trial(results: Sequence[tuple[Trial, bool]]) -> Trial | None:
    """The passing trial with the fewest FP32 nodes (the default configuration first among equals)."""
    passing = [t for t, ok in results if ok]
    if not passing:
        return None
    return min(passing, key=lambda t: (len(t.fallback), not t.knobs.is_default))


# -- a backend's knobs, for a search -----------------------------------------------------------------

ORT_CPU_NOTE = (
    "ort-cpu: these are CUDA provider options and ONNX Runtime's CPU provider has none, so every configuration "
    "runs the same CPU session (a plumbing check of the knob search, not a knob result)"
)


def knob_configs(family: str, lib=None) -> list[KnobConfig]:
    """The configurations of a family, the default first. TensorRT: the tactic sources the installed
    library has (`lib`, default the one `load_library` finds) and TF32."""
    if family in (ORT_CUDA, ORT_CPU):
        return ort_cuda_configs()
    if family == TRT:
        from precision_doctor.backends.tensorrt.library import load_library

        lib = lib or load_library()
        return trt_configs(list(lib.tactic_sources), lib.default_tactic_sources)
    raise ValueError(f"no knobs for {family!r}")


def knob_backend(family: str, model, precision: str, outputs: Sequence[str], config: KnobConfig,
                 level: str | None = None):
    """A backend that evaluates fallback sets under `config` (the caller closes it); `level`: an ONNX Runtime
    backend's graph optimization level (the default backend's, which the target set)."""
    if family in (ORT_CUDA, ORT_CPU):
        from precision_doctor.backends.ort import OrtBackend

        providers = ort_providers(config) if family == ORT_CUDA else ["CPUExecutionProvider"]
        return OrtBackend(model, precision, providers=providers, outputs=outputs, level=level)
    if family == TRT:
        from precision_doctor.backends.tensorrt import TrtBackend

        return TrtBackend(model, precision=precision, outputs=outputs, **trt_backend_kwargs(config))
    raise ValueError(f"no knobs for {family!r}")


def config_of(family: str, settings: Mapping[str, str]) -> KnobConfig:
    """A configuration from its settings as report.json keeps them (`knobs.best_settings`)."""
    backend = TRT if family == TRT else ORT_CUDA
    return KnobConfig(backend, tuple(settings.items()))
