"""ONNX Runtime on a real mixed-precision graph (`graph.mixed`): the CUDA provider when present.

On the CPU provider ONNX Runtime computes ops without FP16 kernels in FP32: it inserts Casts around
them and drops the Cast pairs between neighbours, so a chain of FP16 nodes runs in FP32 with one
rounding at its end (or none, before an FP32 output). Its verdicts are not FP16's: on
examples/three_defects.onnx all-FP16 is within 4e-4 of FP32 there, where FP16 overflows to NaN.
So `ort-cpu` never searches (its registry entry's `search_refusal`); it stays a plumbing check that a
`fixed.onnx` loads and runs (`--confirm-backend ort-cpu`, tests), which may add nodes to a failing answer
(more FP32 is the safe direction) but never removes one and never certifies the answer (its entry is
`check_only`: backends/registry.py).

In BF16, where the running ONNX Runtime refuses a session for an op without a BF16 kernel (`NOT_IMPLEMENTED :
Could not find an implementation for OP(N) node ...`; `graph.ort_kernels`), `session_keeping_fp32` keeps that op
type FP32, says so in a warning line, makes the session again, and the backend remembers it (`kept_fp32`: the
run's fixed.onnx and report keep it FP32 with that reason); every backend of the run over that model on that
provider, in that format and at that optimization level shares the record (`Model.ort_refused`): it is learned, and
said, once. An op refused as itself (or as the body of its ONNX function) has no such kernel at any level, so every
level starts from those (`ANY_LEVEL`); one refused as a kernel ONNX Runtime fused it into is the level's own.
"""

from __future__ import annotations

import re
import sys
from collections import ChainMap, OrderedDict
from collections.abc import Callable, Collection, MutableMapping, Sequence
from typing import TypeVar

import numpy as np
import onnx
import onnxruntime as ort

from precision_doctor.backends.base import Feeds, SessionHolder
from precision_doctor.errors import UserError
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.mixed import blocked_ops, build_mixed
from precision_doctor.graph.model import Model, tensor_types_and_shapes
from precision_doctor.graph.names import shown
from precision_doctor.graph.ort_kernels import inlined_from, runtime_reason
from precision_doctor.graph.ort_session import make_session, run_session, with_outputs

CUDA = "CUDAExecutionProvider"
ANY_LEVEL = "any level"  # Model.ort_refused's key for the refusals that hold at every optimization level
_NP_INPUT_TYPES = {"tensor(float16)": np.float16, "tensor(float)": np.float32}


def default_providers() -> list[str]:
    """The CUDA provider (with CPU for what it lacks) if this ONNX Runtime has it, else CPU."""
    if CUDA in ort.get_available_providers():
        return [CUDA, "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


_NO_KERNEL = re.compile(r"Could not find an implementation for (\w+)\(\d+\) node with name '([^']*)'")
# ONNX's own type check where an op's schema at the model's opset has no bfloat16 (`mixed.no_bf16_in_schema` keeps
# those FP32 ahead of time; this catches what it cannot see, e.g. a com.microsoft op): "Type Error: Type
# 'tensor(bfloat16)' of input parameter (x) of operator (Conv) in node (/model.0/conv/Conv__pdn3) is invalid."
_NO_TYPE = re.compile(r"Type 'tensor\(bfloat16\)' of (?:input|output) parameter \([^)]*\) of operator \((\w+)\) in "
                      r"node \(([^)]*)\)")
# ONNX Runtime 1.31 with the CUDA provider, where neither provider claims a node (a BF16 Log on CUDA and CPU), fails
# in its memcpy transformer before the kernel lookup (seen on the H200 with mpnet-base in BF16): "Provider type for
# Log node with name '/m/encoder/Log__pdn98' is not set."
_NO_PROVIDER = re.compile(r"Provider type for (\w+) node with name '([^']*)' is not set")
G = TypeVar("G")
INLINED = "{} inlined"  # `_model_node`'s name for a node ONNX Runtime made of an op's function


def missing_kernel(exc: BaseException) -> tuple[str, str] | None:
    """(op type, node name) where ONNX Runtime refused a session because no provider has a kernel for a node's
    types (NOT_IMPLEMENTED, or on CUDA no provider set for the node) or ONNX's schema at the model's opset does not
    take bfloat16 there; the node's name as the model has it (the tool's copies carry a `__pd...` suffix)."""
    m = _NO_KERNEL.search(str(exc)) or _NO_TYPE.search(str(exc)) or _NO_PROVIDER.search(str(exc))
    return (m.group(1), re.sub(r"__pd.*$", "", m.group(2))) if m else None


def warn_line(line: str) -> None:
    """The backends' warning line (stderr)."""
    print(f"warning: {line}", file=sys.stderr, flush=True)


def session_keeping_fp32(
    build: Callable[[dict[str, str]], G],
    make: Callable[[G], ort.InferenceSession],
    precision: str,
    kept: MutableMapping[str, str],
    warn: Callable[[str], None] = warn_line,
    where: str = "ONNX Runtime",
    model: Model | None = None,
    everywhere: MutableMapping[str, str] | None = None,
) -> tuple[G, ort.InferenceSession]:
    """`make(build(blocked))`, where `blocked` is `mixed.blocked_ops(precision, kept)`. In BF16, where ONNX Runtime
    refuses the session for a node with no kernel of its types (`missing_kernel`), that op type joins `kept` (with
    `ort_kernels.runtime_reason`), `warn` says so in one line, and the graph is built and the session made again,
    until one is made. A node ONNX Runtime fused (`mm/MatMulAddFusion`, a Gemm) stands for the `model`'s node its
    name starts with: that node's op type is kept. Anything else, in FP16, or an op type already kept FP32 (the
    graph would not change) raises as before. `everywhere`: where a refusal of an op as itself (or of its inlined
    function's body) is recorded too: one that holds at every optimization level (not one of a fused kernel)."""
    bf16 = get_format(precision).name == "bf16"
    while True:
        blocked = blocked_ops(precision, kept)
        graph = build(blocked)
        try:
            return graph, make(graph)
        except Exception as exc:
            found = missing_kernel(exc) if bf16 and type(exc).__module__.startswith("onnxruntime") else None
            if found is None:
                raise
            refused, node = found
            op, mine = _model_node(model, refused, node, blocked)
            if op in blocked:
                raise
            inlined = mine == INLINED.format(op)
            made = "" if mine == node else (f"; ONNX Runtime made it of {shown(op)}'s ONNX function, having no kernel "
                                             "for it either" if inlined else
                                             f"; ONNX Runtime fused it from {shown(mine)} ({shown(op)})")
            kept[op] = runtime_reason(op, refused if made else None, inlined)
            if everywhere is not None and (not made or inlined):
                everywhere[op] = kept[op]
            warn(f"{where}: this ONNX Runtime ({ort.__version__}) has no BF16 kernel for {refused} (node "
                 f"'{shown(node)}'{made}); every {shown(op)} node stays FP32 (fixed.onnx too) and the session is made again")


def _model_node(model: Model | None, op: str, node: str, blocked: Collection[str] = ()) -> tuple[str, str]:
    """(op type, node name) of the model's node that ONNX Runtime's refused `node` stands for: itself, or for a node
    its optimizer made (`<name>/MatMulAddFusion`), the model's node whose name is the longest `/`-prefix of it; for
    an unnamed node it made by inlining an op's function (`ort_kernels.inlined_from`, an op not yet `blocked`), that
    op ("Clip inlined"; where several op types' functions hold it, the first in the model's order, the next on the
    next refusal: each one kept is said in the warning)."""
    if model is None:
        return op, node
    types = {n.name: n.op_type for n in model.nodes}
    parts = node.split("/")
    for k in range(len(parts), 0, -1):
        name = "/".join(parts[:k])
        if name in types:
            return types[name], name
    if node:  # a named node the model does not have: the refused op itself, as before
        return op, node
    opsets = {i.domain or "": i.version for i in model.proto.opset_import}
    made_of = inlined_from(op, [(n.op_type, n.domain or "", opsets.get(n.domain or "", 1))
                                for n in model.proto.graph.node if n.op_type not in blocked])
    return (made_of[0], INLINED.format(made_of[0])) if made_of else (op, node)


def _provider_name(p) -> str:
    return p[0] if isinstance(p, tuple | list) else p


class OrtRunner:
    """One fallback set's session (the mixed graph is not kept: the session holds what it needs, and a large model's
    graph its weights once more). Floating outputs come back as float32."""

    def __init__(self, session: ort.InferenceSession, output_names: list[str], model: Model | None = None):
        self.model = model
        self.session = session
        self.output_names = output_names
        self._input_types = {i.name: _NP_INPUT_TYPES.get(i.type) for i in session.get_inputs()}

    def run(self, feeds: Feeds, outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        names = list(outputs) if outputs is not None else self.output_names
        fed = {}
        for k, v in feeds.items():
            want = self._input_types.get(k)
            fed[k] = v.astype(want) if want is not None and v.dtype != want and v.dtype.kind == "f" else v
        res = run_session(self.session, names, fed, self.model)
        return {n: a.astype(np.float32) if a.dtype.kind == "f" and a.itemsize < 4 else a for n, a in zip(names, res)}


class OrtBackend(SessionHolder):
    """Builds the mixed-precision graph of each fallback set and runs it in ONNX Runtime.

    Each `prepare` of a new set costs one graph rewrite and one session; the last `cache_size`
    runners are kept by fallback set. `outputs` may name any tensors (marked as graph outputs,
    which can change the provider's fusions). On CUDA, FP32 nodes compute in true FP32 unless
    `tf32` (ONNX Runtime's default is TF32 matmuls and convolutions, 10-bit mantissas; a string
    "CUDAExecutionProvider" gets `use_tf32` set from `tf32`, a (name, options) pair is kept as is).
    `level`: ONNX Runtime's graph optimization level (`graph.ort_session.LEVELS`; None: "all" with `optimize`,
    else "basic"); "disabled" is the TensorRT target's proxy (`graph/targets.py`: no fusion, every node its own
    kernel).
    """

    def __init__(
        self,
        model: Model,
        precision: str = "fp16",
        providers: Sequence | None = None,
        outputs: Sequence[str] | None = None,
        keep_io_types: bool = True,
        optimize: bool = True,
        cache_size: int = 4,
        tf32: bool = False,
        level: str | None = None,
    ):
        fmt = get_format(precision)
        self.level = level if level is not None else ("all" if optimize else "basic")
        self.model = model
        self.precision = precision
        self.providers = [
            (CUDA, {"use_tf32": "1" if tf32 else "0"}) if p == CUDA else p
            for p in (providers if providers is not None else default_providers())
        ]
        self.uses_cuda = any(_provider_name(p) == CUDA for p in self.providers)
        self.name = "ort-cuda" if self.uses_cuda else "ort-cpu"
        if self.uses_cuda and CUDA not in ort.get_available_providers():
            raise UserError("ONNX Runtime has no CUDA provider here (install onnxruntime-gpu on a CUDA machine)")
        if self.uses_cuda:
            # ORT's default logger prints "[cudnn_frontend] Error: No execution plans support the graph"
            # again and again while it picks convolution algorithms, and runs on (hundreds of lines a zoo
            # model, onnxruntime-gpu 1.31.1 on an H100); failures that matter still raise. The setting is
            # process-wide and stays: ORT's log lines of other sessions in this process go too.
            ort.set_default_logger_severity(4)
        if self.uses_cuda and hasattr(ort, "preload_dlls"):
            try:  # CUDA/cuDNN from the nvidia-* wheels, where those are how CUDA was installed
                ort.preload_dlls()
            except Exception:
                pass
        elif not self.uses_cuda and fmt.name == "bf16":
            raise UserError("ONNX Runtime's CPU provider has no bf16 kernels; use --backend emulate or a CUDA machine")
        self.output_names = list(outputs) if outputs is not None else model.outputs
        self.keep_io_types = keep_io_types
        self.optimize = optimize
        self.cache_size = cache_size
        # op types this ONNX Runtime refused in the format (op -> why): one record per model, provider, format and
        # optimization level (`Model.ort_refused`), so that the run's other backends (the kernel spread's, the
        # confirmation's, the knobs') start from it (on the H200 a BF16 transformer's every ort-cuda trial made its
        # session four times, relearning three); another run, model or level learns its own
        # and the ops refused as themselves at any level (no kernel at all), which every level starts from
        self.refused_everywhere = model.ort_refused.setdefault((self.name, fmt.name, ANY_LEVEL), {})
        self.kept_fp32: MutableMapping[str, str] = ChainMap(
            model.ort_refused.setdefault((self.name, fmt.name, self.level), {}), self.refused_everywhere)
        self.warn: Callable[[str], None] = warn_line
        self._cache: OrderedDict[frozenset[str], OrtRunner] = OrderedDict()
        self.activate()  # its sessions open in `prepare`, one per fallback set

    def prepare(self, fallback: frozenset[str]) -> OrtRunner:
        key = frozenset(fallback)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        _, session = session_keeping_fp32(
            lambda blocked: build_mixed(self.model, key, self.precision, self.keep_io_types, op_block_list=blocked,
                                        lean=True),
            self._session, self.precision, self.kept_fp32, self.warn, self.name, self.model, self.refused_everywhere)
        if self.uses_cuda and CUDA not in session.get_providers():
            raise UserError("ONNX Runtime could not use the CUDA provider (onnxruntime-gpu and its CUDA libraries needed)")
        runner = OrtRunner(session, self.output_names, self.model)
        self._cache[key] = runner
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return runner

    def _session(self, proto: onnx.ModelProto) -> ort.InferenceSession:
        """A session over `proto` whose graph outputs are the backend's outputs."""
        if self.output_names != [o.name for o in proto.graph.output]:
            proto = with_outputs(proto, self.output_names, tensor_types_and_shapes(proto)[0])
        return make_session(proto, self.providers, optimize=self.optimize, level=self.level)

    def release(self) -> None:
        """Drop the cached runners and their sessions."""
        self._cache.clear()

    def pause(self) -> None:
        """Drop the cached runners while others need the memory (a capture, the other runtime's check): on a GPU each
        holds its session's arena; the next `prepare` of a set makes its session again."""
        self.release()
