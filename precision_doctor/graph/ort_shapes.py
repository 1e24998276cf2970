"""Tensor shapes as ONNX Runtime knows them when it fuses: the dims ONNX shape inference leaves unknown, filled in.

A transformer computes its Reshape targets from Shape, Gather, Concat and Unsqueeze chains. ONNX's shape inference
(data propagation included) loses the batch dim of such a graph even when every input shape is fixed: whisper-base's
decoder with `--input-shapes decoder_input_ids:[1,40]` has 381 tensors of unknown dims, e.g. (None, 40, 512). ONNX
Runtime folds those chains into constants before its fusions look at shapes, so it knows them: on the H200 its
MatMulAddFusion made 78 Gemm of that graph where the fusion sites the tool derives from ONNX's shapes named 36
(`bench/ort_fusion_probe.py`), and the gated search graph, which gates each site whole, computed other values than
the deployed graph for sets keeping some of those nodes in FP32 (`bench/fidelity_bisect.py`). ONNX Runtime's own
symbolic shape inference (`onnxruntime.tools.symbolic_shape_infer`, the one its transformer optimizer runs) evaluates
the chains and fills those dims; its results only fill dims ONNX left unknown, never change a known one.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from pathlib import Path

import onnx

from precision_doctor.graph.weights import weightless

_LARGE = 1024  # initializers of more elements than this travel as typed graph inputs: no shape reads their values


def with_ort_dims(proto: onnx.ModelProto, shapes: dict[str, tuple]) -> dict[str, tuple]:
    """`shapes` (ONNX's: None for an unknown dim) with the unknown dims of node outputs filled from ONNX Runtime's
    symbolic shape inference, where it infers a concrete dim of the same rank and agrees on every known one; the same
    dict where nothing is unknown, and where the inference fails (custom ops, an old ONNX Runtime)."""
    outputs = [t for n in proto.graph.node for t in n.output if t]
    if all(t in shapes and shapes[t] is not None and None not in shapes[t] for t in outputs):
        return shapes
    inferred = _symbolic(proto)
    if not inferred:
        return shapes
    merged = dict(shapes)
    for t in outputs:
        new, old = inferred.get(t), shapes.get(t)
        if new is None or all(d is None for d in new):
            continue
        if old is None:
            merged[t] = new
        elif len(old) == len(new) and all(o is None or o == n for o, n in zip(old, new)):
            merged[t] = tuple(o if o is not None else n for o, n in zip(old, new))
    return merged


def _symbolic(proto: onnx.ModelProto) -> dict[str, tuple]:
    """Every value's shape after ONNX Runtime's symbolic shape inference of a weightless copy (symbolic dims, and -1
    or 0 for "unknown": None); {} where it fails. Without `auto_merge`, which makes up concrete dims for dynamic ones
    (a (N, 4) tensor added to a (3, 4) one became (3, 4)) and can loop: one pass of its class, driven as its
    `infer_shapes` drives it, without the file that function writes into the working directory where some value
    stays unknown."""
    cls = _inference_class()
    if cls is None:
        return {}
    log = logging.getLogger(_MODULE)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        infer = cls(2**31 - 1, False, False, 0)  # int_max, auto_merge, guess_output_rank, verbose
        infer._preprocess(weightless(proto, _LARGE))
        for _ in range(_PASSES):
            if not infer.run_:
                break
            infer._infer_impl()
        infer._update_output_from_vi()
        out = infer.out_mp_
    except Exception:
        return {}
    finally:
        log.setLevel(level)
    g = out.graph
    return {v.name: tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                          for d in v.type.tensor_type.shape.dim)
            for v in (*g.value_info, *g.output) if v.type.tensor_type.HasField("shape")}


_MODULE = "onnxruntime.tools.symbolic_shape_infer"
_PASSES = 8  # its inference passes, at most (one without auto_merge; ONNX Runtime's own helper caps them at 200)


@functools.cache
def _inference_class():
    """`SymbolicShapeInference`, loaded from its file: importing it as `onnxruntime.tools.symbolic_shape_infer` runs
    the package's `__init__`, which imports torch where it is installed (1.3 s and 220 MB for every model loaded)."""
    try:
        spec = importlib.util.find_spec("onnxruntime")
        path = Path(spec.submodule_search_locations[0]) / "tools" / "symbolic_shape_infer.py"
        loaded = importlib.util.spec_from_file_location(_MODULE, path)
        module = importlib.util.module_from_spec(loaded)
        loaded.loader.exec_module(module)
        return module.SymbolicShapeInference
    except Exception:
        return None
