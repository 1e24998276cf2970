"""`probe-ops`: every node of the user's model alone in FP16/BF16 on the user's provider, against the
emulation rule, so a user with a GPU the project never measured can check the emulator there.

Each low-precision-able node is fed the exact FP32 tensors its samples make (the reference run), computed
by the provider's own low-precision kernels (`graph.native.native_local_graph`) and by the emulator under
the rules in force (`graph.emulate.local_graph`); per node and per op type, the provider's error against the
reference, the rule's, their ratio and the share of elements the rule reproduces bit for bit
(`measure.fidelity`). An op type whose largest ratio exceeds the threshold is one the emulator
underestimates on this provider. TensorRT is not probed (not done: ONNX Runtime's providers only).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import onnxruntime as ort

from precision_doctor.control import StopToken
from precision_doctor.data.activations import LOCAL, REFERENCE, ActivationStore
from precision_doctor.errors import UserError
from precision_doctor.graph.emulate import local_graph
from precision_doctor.graph.formats import Format
from precision_doctor.graph.mixed import forced_fp32
from precision_doctor.graph.model import Model
from precision_doctor.graph.native import native_local_graph
from precision_doctor.graph.rules import STANDARD, resolve_rules
from precision_doctor.measure.capture import capture_run
from precision_doctor.measure.fidelity import GPU_LOCAL, by_op, capture_local_with, node_rows, run_name, with_observed_shapes
from precision_doctor.words import counted

CUDA = "CUDAExecutionProvider"
PROVIDERS = {"cuda": CUDA, "cpu": "CPUExecutionProvider"}
THRESHOLD = 1.1  # an op type whose largest provider/rule error ratio exceeds this is flagged (fidelity.MISMATCH's bound)
NO_CUDA = ("no CUDA GPU here: this ONNX Runtime has no CUDAExecutionProvider (probe-ops needs onnxruntime-gpu and a "
           "CUDA GPU; --provider cpu runs it on the CPU as a plumbing check, whose FP16 is FP32 inside)")


@dataclass
class OpRow:
    """One op type (or fused pattern): how the provider's local error compares with the rule's."""

    op_type: str
    nodes: int
    ratio_median: float
    ratio_max: float
    mismatches: int  # nodes whose ratio is outside [0.9, 1.1]
    exact_median: float  # median share of elements the rule reproduces bit for bit
    exceeds: bool  # ratio_max above the threshold: the emulator underestimates this op here


@dataclass
class NodeRow:
    node: str
    op_type: str
    provider: str | None  # where ONNX Runtime ran the node alone (None: it ran as other kernels)
    provider_error: float  # max abs error of the provider's output against FP32
    rule_error: float
    ratio: float
    exact: float


@dataclass
class OpProbe:
    """The result of `probe_ops`: settings, per op type and per node rows, and the op types exceeding."""

    provider: str
    precision: str
    rules: str
    threshold: float
    samples: int
    onnxruntime: str
    ops: list[OpRow] = field(default_factory=list)
    nodes: list[NodeRow] = field(default_factory=list)
    tensorrt: str = "not probed: probe-ops runs ONNX Runtime's providers only"

    @property
    def exceeding(self) -> list[str]:
        return [r.op_type for r in self.ops if r.exceeds]

    def to_json(self) -> dict:
        """probe_ops.json: the settings, `exceeding`, the verdict in words, the op and node rows."""
        return {**asdict(self), "exceeding": self.exceeding, "verdict": verdict(self)}


def providers_for(provider: str) -> list:
    """ONNX Runtime's provider list for `provider` ('cuda': TF32 off, as the ort-cuda backend; 'cpu')."""
    if provider not in PROVIDERS:
        raise UserError(f"--provider {provider}: choose cuda or cpu")
    if provider == "cpu":
        return ["CPUExecutionProvider"]
    if CUDA not in ort.get_available_providers():
        raise UserError(NO_CUDA)
    return [(CUDA, {"use_tf32": "0"}), "CPUExecutionProvider"]


def probe_ops(
    model: Model, samples: Sequence[dict], fmt: Format, provider: str = "cuda", rules: str = "ort-cuda",
    threshold: float = THRESHOLD, budget_mb: float = 256.0, stop: StopToken | None = None,
) -> OpProbe:
    """Every candidate node alone on `provider` against the emulator under `rules` (see the module docstring)."""
    providers = providers_for(provider)
    label = resolve_rules(rules).label
    budget = int(budget_mb * (1 << 20))
    n = len(samples)
    with tempfile.TemporaryDirectory(prefix="pd-probe-ops-") as tmp, ActivationStore(Path(tmp) / "a.h5", "w") as store:
        store.set_attrs(precision=fmt.name, samples=n)
        for i, s in enumerate(samples):
            for k, v in s.items():
                store.write(REFERENCE, k, i, n, v)
        names = [t for nd in model.nodes for t in nd.outputs if t]
        capture_run(store, REFERENCE, model.proto, model, names, list(samples), {}, budget, None, stop)
        obs = with_observed_shapes(model, store)
        cands = obs.candidates
        capture_local_with(store, run_name(LOCAL, label), obs, lambda g: local_graph(obs, fmt, g, label), cands, n, budget,
                           stop=stop)
        placement: dict[str, str] = {}
        try:
            capture_local_with(store, GPU_LOCAL, obs, lambda g: native_local_graph(obs, fmt, g), cands, n, budget,
                               providers, placement, stop)
        except Exception as exc:  # no kernel (or no ONNX type) for a node in this format: the user's setup, one line
            text = str(exc)
            if "Could not find an implementation" not in text and "Type Error" not in text:
                raise
            detail = text.split(" : ")[-1].strip().splitlines()[0][:200]
            raise UserError(f"--provider {provider} --precision {fmt.name}: ONNX Runtime has no {fmt.name.upper()} kernel "
                            f"for a node of this model there ({detail})") from exc
        rows = node_rows(store, obs, fmt, [label], "max_abs", forced_fp32(model, precision=fmt.name), placement)
    if provider == "cuda" and placement and "CUDA" not in set(placement.values()):
        raise UserError(NO_CUDA.replace("this ONNX Runtime has no CUDAExecutionProvider",
                                        "ONNX Runtime ran every node on the CPU"))
    result = OpProbe(provider, fmt.name, label, threshold, n, ort.__version__)
    for op, e in by_op(rows, [label]).items():
        s = e.get(label)
        if s is None:
            continue
        result.ops.append(OpRow(op, e["nodes"], s["ratio_median"], s["ratio_max"], s["mismatches"], s["exact_median"],
                                bool(s["ratio_max"] > threshold)))
    result.ops.sort(key=lambda r: (-r.ratio_max, r.op_type))
    for r in rows:
        if r["forced_fp32"]:
            continue
        emu = r["emulated"].get(label, r["emulated"].get(STANDARD))
        result.nodes.append(NodeRow(r["node"], r["op_type"], r["provider"], r["gpu"]["max_abs"], emu["max_abs"],
                                    r["ratio"].get(label, r["ratio"].get(STANDARD)),
                                    (r["agree"].get(label) or r["agree"][STANDARD])["exact"]))
    return result


def _fmt(v: float) -> str:
    return "inf" if v == float("inf") else f"{v:.3g}"


def table(result: OpProbe, top: int = 20) -> str:
    """A short markdown table: op types by their largest ratio, and the verdict line."""
    lines = [f"| op | nodes | ratio median | ratio max | mismatches | bit-exact (median) | above {result.threshold:g}x |",
             "|---|---|---|---|---|---|---|"]
    for r in result.ops[:top]:
        lines.append(f"| {r.op_type} | {r.nodes} | {_fmt(r.ratio_median)} | {_fmt(r.ratio_max)} | {r.mismatches} | "
                     f"{_fmt(r.exact_median)} | {'yes' if r.exceeds else ''} |")
    return "\n".join(lines) + "\n\n" + verdict(result) + "\n"


def verdict(result: OpProbe) -> str:
    where = f"{result.provider.upper()} ({result.precision.upper()}, rules {result.rules}, {counted(result.samples, 'sample')})"
    if result.exceeding:
        return (f"{counted(len(result.exceeding), 'op type')} whose error on {where} exceeds the emulation rule's by more than "
                f"{result.threshold:g}x: {', '.join(result.exceeding)}; the emulator underestimates them here")
    return f"every op type on {where} is within {result.threshold:g}x of the emulation rule"
