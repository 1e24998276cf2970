"""What a passing run writes besides the report: fixed.onnx, the polygraphy input and reference files,
the emitted commands (layer_precisions.txt, trtexec.sh, tensorrt_rtx.sh, AutoCast's exclusions), and
named.onnx where the tool named nodes (the commands then point at it, so every tool sees our names)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx

from precision_doctor.backends.knobs import KnobConfig
from precision_doctor.data.inputs import Sample
from precision_doctor.data.workload import Workload
from precision_doctor.graph.mixed import build_mixed, forced_fp32_nodes
from precision_doctor.graph.toolnames import NAMED_ONNX, model_for_tools
from precision_doctor.results import emit
from precision_doctor.results.jsonio import write_text_atomic
from precision_doctor.results.manifest import note_written
from precision_doctor.spec import RunSpec

# report.json's `artifacts` entries a passing run adds (key -> file name)
FILES = {
    "fixed_onnx": "fixed.onnx", "layer_precisions": "layer_precisions.txt", "trtexec": "trtexec.sh",
    "inputs": "inputs.json", "reference_outputs": "reference_outputs.json",
    "autocast_nodes": "autocast_nodes_to_exclude.txt", "tensorrt_rtx": "tensorrt_rtx.sh",
}
# emitted texts written as files (emit_all's key -> file name); the rest are report.json's `commands`
SCRIPTS = {"layer_precisions_txt": "layer_precisions.txt", "trtexec_sh": "trtexec.sh", "tensorrt_rtx_sh": "tensorrt_rtx.sh"}


@dataclass(frozen=True)
class Written:
    """What `write_artifacts` wrote: report.json's `commands`, its `artifacts` entries (key -> file name; with
    `named_onnx` when the model's nodes had to be named) and the nodes fixed.onnx keeps FP32 beyond the answer."""

    commands: dict[str, str]
    files: dict[str, str]
    forced: dict[str, str]


def write_artifacts(out_dir: Path, work: Workload, refs: list[dict], fallback: frozenset[str], spec: RunSpec,
                    knob: KnobConfig | None = None) -> Written:
    """Write every artifact of the answer `fallback` (`knob`: the knob configuration it was found under, whose
    settings the commands then carry)."""
    model = work.model
    fixed = build_mixed(model, fallback, spec.precision, keep_io_types=spec.search.keep_io_types)
    for name in (".fixed.onnx.partial", ".fixed.onnx.partial.data", "fixed.onnx"):
        note_written(out_dir / name)
    onnx.save(fixed, str(out_dir / ".fixed.onnx.partial"), save_as_external_data=fixed.ByteSize() >= 2**31 - 2**20)
    (out_dir / ".fixed.onnx.partial").replace(out_dir / "fixed.onnx")
    save_polygraphy_io(out_dir, work.samples, refs)
    order = [n.name for n in model.nodes if n.name in fallback]
    forced = forced_fp32_nodes(model, fallback)
    tools_model = model_for_tools(model, out_dir)  # named.onnx where we named nodes: the tools see our names
    tol = spec.tolerance
    texts = emit.emit_all(
        tools_model.name if tools_model.parent == out_dir else str(tools_model.resolve()),
        "fixed.onnx",
        order,
        spec.precision,
        atol=tol.atol,
        rtol=tol.rtol,
        check_error_stat=tol.check_error_stat,
        inputs="inputs.json",
        forced_fp32=forced,
        compute_capabilities=spec.artifacts.targets or emit.PORTABLE_TARGETS,
        knob=knob,
    )
    for key, name in SCRIPTS.items():
        write_text_atomic(out_dir / name, texts[key])
        if name.endswith(".sh"):
            (out_dir / name).chmod(0o755)
    excluded = [*order, *forced]
    write_text_atomic(out_dir / "autocast_nodes_to_exclude.txt", emit.name_list(excluded))
    files = dict(FILES)
    if tools_model.parent == out_dir and tools_model.name == NAMED_ONNX:
        files["named_onnx"] = NAMED_ONNX
    return Written({k: v for k, v in texts.items() if k not in SCRIPTS}, files, forced)


def save_polygraphy_io(out_dir: Path, samples: list[Sample], refs: list[dict]) -> None:
    """inputs.json and reference_outputs.json in polygraphy's formats (--load-inputs, --load-outputs)."""
    from polygraphy.comparator import IterationResult, RunResults
    from polygraphy.json import save_json
    from polygraphy.logger import G_LOGGER

    G_LOGGER.module_severity = G_LOGGER.ERROR  # polygraphy's own progress lines are noise here

    note_written(out_dir / "inputs.json")
    note_written(out_dir / "reference_outputs.json")
    save_json([dict(s) for s in samples], str(out_dir / "inputs.json"))
    results = RunResults()
    name = "onnxrt-fp32-reference"
    results.append((name, [IterationResult(dict(r), runner_name=name) for r in refs]))
    results.save(str(out_dir / "reference_outputs.json"))
