"""What the user pastes, all from plain data, each labelled with the release it is for (`LABELS`: the reports and
`emit` print the label above it): `emit_all` gathers the TensorRT commands and scripts (`results/commands.py`), a
ModelOpt AutoCast command with its exclusion list, and ONNX Runtime's node_block_list and provider options.

Facts these commands rest on (see the report of the module's author for sources):

* ONNX Runtime: onnxconverter-common's `convert_float_to_float16(node_block_list=...)` takes node names; it
  wraps each blocked node in its own Casts, so values passed between FP32 nodes still go through FP16
  (DESIGN.md): fixed.onnx (Casts only at island borders) is the model to run, the list is for those who convert
  themselves, and the emitted comment says so.
* ModelOpt AutoCast `--nodes_to_exclude` takes regular expressions matched with `re.match`
  (a prefix match), so names are escaped and anchored. `--calibration_data` reads NPZ or
  polygraphy JSON inputs. AutoCast also keeps nodes in FP32 by its own rules (`--data_max`,
  default 512, and `--init_max`); `exact=True` lifts the `--data_max` rule. AutoCast names nodes its own way, so
  it is given the file whose node names are the report's (the model, or named.onnx), and the nodes fixed.onnx
  keeps FP32 beyond the answer are excluded too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

from precision_doctor.backends import knobs
from precision_doctor.graph.names import shown
from precision_doctor.results import commands
from precision_doctor.results.commands import EmitOptions, IOPair, check_precision, shell_line, unique, with_forced

# What each command of `emit_all` is for: the release, the file it reads and what it writes (the reports and
# `emit` print these above the commands).
LABELS = {
    "trtexec_trt10": "TensorRT 10.x, weak typing: build the original model (model.onnx) in low precision with the FP32 "
                     "layers pinned (--layerPrecisions, --layerOutputTypes, --precisionConstraints=obey) into fixed.plan",
    "trtexec_trt11": "TensorRT 11, strongly typed (no precision flags: fixed.onnx carries the precisions): build "
                     "fixed.onnx into fixed.plan (on 10.x the same with --stronglyTyped)",
    "trtexec_trt11_check": "TensorRT 11: check fixed.plan against the FP32 reference outputs (trtexec's own accuracy "
                           "check)",
    "polygraphy": "polygraphy on TensorRT 11 (or 10.x, --strongly-typed): build fixed.onnx and check it against the FP32 "
                  "reference outputs at your tolerance",
    "polygraphy_ort_cuda": "polygraphy on ONNX Runtime CUDA: run fixed.onnx on the CUDA provider and check it against "
                           "the FP32 reference outputs at your tolerance",
    "polygraphy_trt10": "polygraphy on TensorRT 10.x, weak typing: the original model with the same FP32 layers, "
                        "checked against the FP32 reference outputs",
    "autocast": "ModelOpt AutoCast (for TensorRT 11): convert the original model itself, keeping the same nodes in FP32",
    "ort_node_block_list": "ONNX Runtime: the same FP32 nodes as onnxconverter-common's node_block_list",
    "ort_cuda_providers": "ONNX Runtime CUDA: the provider options of the knob configuration found",
}
# Samples whose raw files the trtexec check reads (each input and output of each sample is a file): enough to
# see the engine fail where it does, few enough to keep the run directory small.
TRTEXEC_CHECK_SAMPLES = 4


def ort_block_list_command(model: str, block_list: str, precision: str = "fp16",
                           output: str = "fixed_onnxconverter.onnx") -> str:
    """onnxconverter-common's FP16 conversion of `model` with the nodes of `block_list` (a JSON list of names)
    kept FP32, with a comment saying why fixed.onnx is the better model for ONNX Runtime."""
    if precision != "fp16":
        return "# onnxconverter-common converts to FP16 only: for BF16 run fixed.onnx."
    code = ("import json, onnx; from onnxconverter_common import float16; "
            f"blocked = json.load(open({json.dumps(block_list)})); "
            f"m = float16.convert_float_to_float16(onnx.load({json.dumps(model)}), keep_io_types=True, "
            "node_block_list=blocked); "
            f"onnx.save(m, {json.dumps(output)})")
    return "\n".join([
        f"# fixed.onnx is the model to run on ONNX Runtime: Casts only where FP32 regions begin and end. {block_list}",
        "# lists the same nodes for onnxconverter-common, whose conversion casts around each blocked node on its own",
        "# (values passed between two FP32 nodes still go through FP16), so its model can differ from fixed.onnx.",
        shell_line(["python3", "-c", code]),
    ])


def autocast_regex(name: str) -> str:
    """An AutoCast `--nodes_to_exclude` pattern that matches exactly `name` (`re.match` is used)."""
    return "^" + re.escape(name) + "$"


def autocast_command(
    model: str,
    nodes: Sequence[str],
    precision: str = "fp16",
    *,
    output: str = "fixed_autocast.onnx",
    inputs: str | None = None,
    keep_io_types: bool = True,
    exact: bool = True,
    multiline: bool = False,
) -> str:
    """ModelOpt AutoCast with our FP32 nodes excluded from conversion. `exact` adds
    `--data_max inf` so AutoCast's output-magnitude rule adds no FP32 nodes of its own."""
    check_precision(precision)
    args = ["python", "-m", "modelopt.onnx.autocast", "--onnx_path", model, "--output_path", output]
    args += ["--low_precision_type", precision]
    if keep_io_types:
        args.append("--keep_io_types")
    if exact:
        args += ["--data_max", "inf"]
    if inputs:
        args += ["--calibration_data", inputs]
    nodes = unique(nodes)
    if nodes:
        args += ["--nodes_to_exclude", *(autocast_regex(n) for n in nodes)]
    return shell_line(args, multiline)


def name_list(names: Iterable[str]) -> str:
    """A text list, one name per line (AutoCast's exclusions): each name escaped (`graph/names.py`), so that
    none breaks a line; the model's unsafe names were renamed at load, so this changes nothing there."""
    items = [shown(n) for n in unique(names)]
    return "".join(f"{n}\n" for n in items)


def emit_all(model: str, fixed_onnx: str, fallback_nodes: Sequence[str], options: EmitOptions = EmitOptions(), *,
             layers: Sequence[str] | None = None, check_pairs: Sequence[IOPair] = ()) -> dict[str, str]:
    """Everything at once, for `emit --format trtexec|polygraphy|autocast|ort|json`, each command labelled in
    `LABELS`. `model`: the file whose node names the report uses, as the run directory names it (model.onnx,
    named.onnx); `fallback_nodes`: ONNX node names in topological order; `options`: what every command shares
    (`EmitOptions`: precision, tolerance, files, shapes, forced FP32 nodes, targets, knob configuration);
    `layers`: TensorRT layer names from a build, if known (else the node names stand in for them);
    `check_pairs`: the raw files of trtexec's accuracy check (none: no check command)."""
    o = options
    names = with_forced(list(layers) if layers is not None else list(fallback_nodes), o.forced)
    out = {
        "trtexec_trt10": commands.trtexec_trt10(model, names, o),
        "trtexec_trt11": commands.trtexec_trt11(fixed_onnx, o),
        **({"trtexec_trt11_check": commands.trtexec_trt11_check(check_pairs, o)} if check_pairs else {}),
        "polygraphy": commands.polygraphy_verify(fixed_onnx, o),
        "polygraphy_ort_cuda": commands.polygraphy_ort_cuda(fixed_onnx, o),
        "polygraphy_trt10": commands.polygraphy_trt10(model, names, o),
        "autocast": autocast_command(model, with_forced(fallback_nodes, o.forced), o.precision, inputs=o.inputs),
        "ort_node_block_list": "\n".join([*commands.answer_lines(o), ort_block_list_command(model, o.block_list,
                                                                                             o.precision)]),
        "layer_precisions_txt": commands.layer_precisions_file(names, o, from_build=layers is not None),
        "trtexec_sh": commands.trtexec_script(model, fixed_onnx, names, o, nodes=fallback_nodes),
        "tensorrt_rtx_sh": commands.tensorrt_rtx_script(fixed_onnx, o),
    }
    if o.knob is not None and o.knob.backend == knobs.ORT_CUDA:
        out["ort_cuda_providers"] = knobs.ort_providers_text(o.knob)
    return out
