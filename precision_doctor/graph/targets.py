"""The runtimes an answer can be for (`backends.target`, `--target`): what each one does with a low-precision graph,
how the emulator models it (its rules profile), how a GPU here measures it, and which of those facts are documented
or measured and which are only modelled.

The runtime decides the answer (DESIGN.md): a decomposed LayerNorm (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt,
Div, Mul, Add: exports below opset 17) is fused by ONNX Runtime into one LayerNormalization kernel that computes in
FP32, while TensorRT builds it from FP16 layers when the network says FP16 and warns that it may overflow. So the
emulator's rules, the GPU's measurement and the answer follow the runtime that will execute fixed.onnx.

- `tensorrt`: the `tensorrt` rules profile (`graph/rules.py`): every node computes as its own layer in the type the
  strongly typed network gives it, i.e. the standard rule (round the inputs, compute in FP32, round the output) for
  each node, and no ONNX Runtime rule or fusion. Its GPU proxy here is ONNX Runtime CUDA with graph optimizations
  disabled (TensorRT's runtime does not run on the H100/H200 lent here; TensorRT-RTX refuses compute capability 9.0):
  every node its own kernel. Not the basic level: ONNX Runtime 1.32 fuses a decomposed LayerNorm into the ONNX
  LayerNormalization op at the basic level when the model's opset has it (17 or later; checked on the CPU here,
  tests/graph/test_target.py), at the extended level below 17.
- `ort-cuda`: the `ort-cuda` profile (ONNX Runtime's CUDA kernels and graph optimizer, measured on an H100 and an
  H200); measured on ONNX Runtime CUDA at ORT_ENABLE_ALL, the level deployments use, with the gated search graph
  keeping each fusion site whole (`graph/native.gated_native_graph`'s units).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TENSORRT = "tensorrt"
ORT_CUDA = "ort-cuda"
TARGETS = (TENSORRT, ORT_CUDA)


@dataclass(frozen=True)
class Fact:
    """One thing the emulator assumes about a runtime: what, whether it is `documented` (with `source`),
    `measured` (here, with where) or only `modelled` (an assumption no document or measurement settles)."""

    what: str
    basis: str  # documented | measured | modelled
    source: str = ""


@dataclass(frozen=True)
class Runtime:
    """A runtime an answer can be for: its `name` (the setting's value), how reports say it (`label`), the emulation
    profile that models it, the ONNX Runtime graph optimization level of its measurement on a CUDA GPU here
    (`ort_level`: "all" or "disabled"), whether that measurement is the runtime itself or a proxy for it (`proxy`:
    what the proxy is, in words), whether the gated search graph keeps ONNX Runtime's fusion sites whole
    (`fused_units`), and the facts the emulator rests on for it."""

    name: str
    label: str
    profile: str
    ort_level: str
    proxy: str | None
    fused_units: bool
    facts: tuple[Fact, ...]


_TRT_FACTS = (
    Fact("fixed.onnx is built as a strongly typed network: every tensor keeps the type the graph gives it and every "
         "Cast is obeyed (TensorRT 11 has no other kind; on 10.x with --stronglyTyped), so the FP32 islands and "
         "their border Casts are what runs", "documented",
         "TensorRT 11.0 release notes and 10.x-to-11.x migration guide; developer guide, Precision Control, "
         "Strongly Typed Networks"),
    Fact("an opset-17 LayerNormalization node becomes an INormalizationLayer computed in its stash_type (FP32 by "
         "default) from FP16 inputs, one rounding at its output: the standard rule", "documented",
         "onnx-tensorrt 10.1 LayerNormalization importer (setComputePrecision from stash_type); TensorRT#2781"),
    Fact("a decomposed LayerNorm (ReduceMean, Sub, Pow, Sqrt, Div) in FP16 is computed by FP16 layers, never by "
         "ONNX Runtime's FP32 LayerNormalization kernel: TensorRT warns that it may overflow (Pow of values beyond "
         "256 exceeds 65504) and asks for opset 17 or FP32 layers", "documented",
         "TensorRT's builder warning 'Detected layernorm nodes in FP16 ... may cause overflow' (TensorRT#2564, "
         "#2781, #3692; pytorch/TensorRT#4061)"),
    Fact("TensorRT-RTX 1.7.1's builder gives that warning when it builds a fixed.onnx whose decomposed LayerNorm is "
         "FP16 ('Running layernorm after self-attention with FP16 Reduce or Pow may cause overflow. Forcing Reduce or "
         "Pow Layers in FP32 precision, or exporting the model to use INormalizationLayer ...')", "measured",
         "on this project's CPU machine, tests/graph/test_target.py"),
    Fact("each of those FP16 layers (and every other FP16 layer) rounds its inputs and output and computes in FP32 "
         "between (the standard rule); whether TensorRT fuses them into one kernel, and the width and order of its "
         "accumulations, are not documented", "modelled"),
    Fact("convolutions and matrix products in FP16 accumulate in FP32 and round once, the bias added before that "
         "rounding (no ONNX Runtime node rule such as conv-bias-fp16 applies)", "modelled"),
    Fact("FP32 weights beyond FP16's range are clamped to +-65504 when converted (fixed.onnx writes them so)",
         "documented", "TensorRT builder log 'Finite FP32 values which would overflow in FP16 detected'"),
)
_ORT_FACTS = (
    Fact("the node rules of the ort-cuda profile (conv-bias-fp16, reducemean-fp16-sum, hardsigmoid-fma, "
         "leakyrelu-fp16, hardswish-fp16, gelu-tanh-fp16) reproduce ONNX Runtime 1.31's CUDA kernels", "measured",
         "node fixtures of an H100 and an H200, tests/graph/test_gpu_rules.py"),
    Fact("ONNX Runtime's optimizer at ORT_ENABLE_ALL fuses neighbouring FP16 nodes (LayerNormalization, Gelu, "
         "QuickGelu, FusedMatMul, Gemm, Conv+BatchNormalization folding) and the fused kernels round once",
         "documented", "onnxruntime core/optimizer/*_fusion.cc; the fused kernels measured on the H100/H200"),
)

RUNTIMES: dict[str, Runtime] = {
    TENSORRT: Runtime(TENSORRT, "TensorRT", "tensorrt", "disabled",
                      "ONNX Runtime CUDA with graph optimizations disabled (every node its own FP16 kernel): the closest "
                      "GPU measurement here; TensorRT itself does not run on the H100/H200", False, _TRT_FACTS),
    ORT_CUDA: Runtime(ORT_CUDA, "ONNX Runtime CUDA", "ort-cuda", "all", None, True, _ORT_FACTS),
}


def runtime(name: str) -> Runtime:
    """The runtime called `name` (one of TARGETS)."""
    return RUNTIMES[name]


def other(name: str) -> str:
    """The other runtime."""
    return ORT_CUDA if name == TENSORRT else TENSORRT


def how_checked(backend: str, name: str) -> str:
    """How an answer for runtime `name` was checked on `backend`, in words: "emulated with the tensorrt rules",
    "measured on TensorRT", "measured on ort-cuda with graph optimizations disabled (a proxy for TensorRT)", ..."""
    rt = runtime(name)
    if backend == "emulate":
        return f"emulated with the {rt.profile} rules"
    if backend == "trt":
        return "measured on TensorRT"
    if backend.startswith("ort-cuda") and rt.proxy:
        return f"measured on {backend} with graph optimizations disabled (a proxy for {rt.label})"
    return f"measured on {backend}"


def of_tolerance(share: float | None) -> str:
    """A share of the tolerance in words: "112x the tolerance", "0.09x the tolerance", "outputs that overflow to inf or
    NaN"."""
    if share is None:
        return "an unknown share of the tolerance"
    if not math.isfinite(share):
        return "outputs that overflow to inf or NaN"
    return f"{share:.0f}x the tolerance" if share >= 10 else f"{share:.2g}x the tolerance"
