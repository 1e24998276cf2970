"""What a passing run writes besides the report: fixed.onnx, the polygraphy input and reference files,
the emitted commands (layer_precisions.txt, trtexec.sh, tensorrt_rtx.sh, AutoCast's exclusions, ONNX Runtime's
node_block_list), the raw files of trtexec's accuracy check (trtexec_io/), and the model the commands read:
named.onnx where the tool named nodes (every tool then sees our names), else model.onnx, a relative link to
the model (or a copy), so that every command runs from the run directory with relative paths."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np
import onnx

from precision_doctor.backends.knobs import KnobConfig
from precision_doctor.data.inputs import Sample
from precision_doctor.data.workload import Workload
from precision_doctor.graph.mixed import blocked_ops, build_mixed, forced_fp32_nodes
from precision_doctor.graph.model import declared_dims
from precision_doctor.graph.shapes import InputShape
from precision_doctor.graph.toolnames import MODEL_LINK, NAMED_ONNX, PlacedModel, model_for_tools, place_model, save_model
from precision_doctor.jsonio import write_text_atomic
from precision_doctor.results import emit
from precision_doctor.results.commands import PORTABLE_TARGETS, EmitOptions, IOPair
from precision_doctor.runfiles import RunDir
from precision_doctor.spec import RunSpec

# report.json's `artifacts` entries a passing run adds (key -> file name)
FILES = {
    "fixed_onnx": "fixed.onnx", "layer_precisions": "layer_precisions.txt", "trtexec": "trtexec.sh",
    "inputs": "inputs.json", "reference_outputs": "reference_outputs.json",
    "autocast_nodes": "autocast_nodes_to_exclude.txt", "tensorrt_rtx": "tensorrt_rtx.sh",
    "ort_node_block_list": "ort_node_block_list.json",
}
TRTEXEC_IO = "trtexec_io"  # the raw input and reference files of trtexec's accuracy check
# emitted texts written as files (emit_all's key -> file name); the rest are report.json's `commands`
SCRIPTS = {"layer_precisions_txt": "layer_precisions.txt", "trtexec_sh": "trtexec.sh", "tensorrt_rtx_sh": "tensorrt_rtx.sh"}


@dataclass(frozen=True)
class Written:
    """What `write_artifacts` wrote: report.json's `commands`, its `artifacts` entries (key -> file name; with
    `named_onnx` when the model's nodes had to be named) and the nodes fixed.onnx keeps FP32 beyond the answer."""

    commands: dict[str, str]
    files: dict[str, str]
    forced: dict[str, str]
    link: str | None = None  # how model.onnx stands for the model: "symlink", "copy" (None: no model.onnx)


def write_artifacts(run: RunDir, work: Workload, refs: Sequence[dict], fallback: frozenset[str], spec: RunSpec,
                    knob: KnobConfig | None = None, shapes: list[InputShape] | None = None,
                    answer_for: Sequence[str] = (), where: str = "", kept_ops: Mapping[str, str] | None = None) -> Written:
    """Write every artifact of the answer `fallback` (`knob`: the knob configuration it was found under, whose
    settings the commands then carry; `shapes`: the inputs' shapes as the samples ran, for the commands;
    `answer_for`: the lines saying which runtime the answer is for, at the top of every script and list, and in
    fixed.onnx's metadata (`answer_metadata`)). `where`: a folder of the run directory for a second answer (another
    runtime's, pipeline/target.py): its fixed.onnx, lists and scripts go there, and its commands read the model,
    inputs.json, reference_outputs.json and trtexec_io/ that the run directory's first answer wrote (`../`).
    `kept_ops`: op types the run's backends found their ONNX Runtime refusing in the format (op -> why,
    `backends.ort.session_keeping_fp32`), kept FP32 in fixed.onnx besides the format's own (`mixed.blocked_ops`)."""
    model, root = work.model, run.root
    out_dir = root / where if where else root
    up = "../" if where else ""
    blocked = blocked_ops(spec.precision, kept_ops)
    fixed = build_mixed(model, fallback, spec.precision, keep_io_types=spec.search.keep_io_types, op_block_list=blocked)
    answer_metadata(fixed, spec.backends.target, answer_for)
    if where:
        out_dir.mkdir(exist_ok=True)
    save_model(fixed, out_dir / "fixed.onnx", run)  # past 2 GB its weights in fixed.onnx.data beside it
    kept = work.capture if work.capture is not None else range(len(work.samples))  # the captured samples
    kept_samples, kept_refs = work.samples.subset(kept), [refs[i] for i in kept]
    if not where:
        save_polygraphy_io(run, kept_samples, kept_refs)
    order = [n.name for n in model.nodes if n.name in fallback]
    forced = forced_fp32_nodes(model, fallback, blocked, spec.precision)
    placed = _placed(model, run) if where else place_model(model_for_tools(model, root, run), root, run)
    model_file = placed.name if not up or Path(placed.name).is_absolute() else up + placed.name
    excluded = [*order, *forced]
    write_text_atomic(out_dir / FILES["ort_node_block_list"], json.dumps(excluded, indent=1) + "\n", writer=run)
    options = EmitOptions(spec.precision, spec.tolerance, inputs=up + FILES["inputs"],
                          reference_outputs=up + FILES["reference_outputs"], block_list=FILES["ort_node_block_list"],
                          shapes=shapes or [], forced=forced, compute_capabilities=spec.artifacts.targets or PORTABLE_TARGETS,
                          knob=knob, answer_for=tuple(answer_for))
    pairs = write_trtexec_io(run, fixed, kept_samples, kept_refs, write=not where)
    texts = emit.emit_all(model_file, "fixed.onnx", order, options, check_pairs=[p.under(up) for p in pairs])
    for key, name in SCRIPTS.items():
        write_text_atomic(out_dir / name, texts[key], writer=run)
        if name.endswith(".sh"):
            (out_dir / name).chmod(0o755)
    write_text_atomic(out_dir / "autocast_nodes_to_exclude.txt", emit.name_list(excluded), writer=run)
    folder = f"{where}/" if where else ""
    files = {k: folder + v for k, v in FILES.items() if not where or k not in ("inputs", "reference_outputs")}
    if placed.name == NAMED_ONNX:
        files["named_onnx"] = NAMED_ONNX
    elif placed.name == MODEL_LINK:
        files["model"] = MODEL_LINK
    if (root / TRTEXEC_IO).is_dir():
        files["trtexec_io"] = TRTEXEC_IO
    return Written({k: v for k, v in texts.items() if k not in SCRIPTS}, files, forced, placed.link)


def _placed(model, run: RunDir) -> PlacedModel:
    """The model as the run directory's first answer placed it (named.onnx or model.onnx there), for a second answer."""
    for name in (NAMED_ONNX, MODEL_LINK):
        if run.ours(run.root / name) or (run.root / name).is_symlink():
            return PlacedModel(name, None)
    return PlacedModel(str(Path(model.path).resolve()), None)


TARGET_METADATA = "precision_doctor.target"  # fixed.onnx's metadata_props: the runtime the answer is for
ANSWER_METADATA = "precision_doctor.answer"  # ... and the lines that say so


def answer_metadata(proto: onnx.ModelProto, target: str, answer_for: Sequence[str]) -> None:
    """Record in `proto`'s metadata_props which runtime its answer is for (ONNX keeps them; TensorRT's parser and ONNX
    Runtime ignore them)."""
    from onnx import helper

    helper.set_model_props(proto, {**{p.key: p.value for p in proto.metadata_props}, TARGET_METADATA: target,
                                   **({ANSWER_METADATA: " ".join(answer_for)} if answer_for else {})})


def write_trtexec_io(run: RunDir, fixed: onnx.ModelProto, samples: Sequence[Sample],
                     refs: Sequence[dict], write: bool = True) -> list[IOPair]:
    """The raw files of trtexec's accuracy check (`trtexec_io/s<i>.in<j>.bin`, `.out<k>.bin`: each array's bytes
    in the type fixed.onnx gives the tensor, as `numpy.ndarray.tofile` writes them) for the first
    `emit.TRTEXEC_CHECK_SAMPLES` samples; the pairs that name them (not `write`: only the pairs, of files an earlier
    call wrote: a second answer's fixed.onnx keeps the same FP32 inputs and outputs)."""
    from onnx import helper

    types = {v.name: helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)
             for v in [*fixed.graph.input, *fixed.graph.output]}
    dynamic = {i.name for i in fixed.graph.input if None in declared_dims(i.type.tensor_type.shape)}
    folder = run.root / TRTEXEC_IO
    pairs = []
    for i, (sample, ref) in enumerate(islice(zip(samples, refs), emit.TRTEXEC_CHECK_SAMPLES)):
        if write:
            folder.mkdir(exist_ok=True)
        files: dict[str, dict[str, str]] = {"in": {}, "out": {}}
        for kind, arrays in (("in", sample), ("out", ref)):
            for j, (name, arr) in enumerate(arrays.items()):
                path = folder / f"s{i}.{kind}{j}.bin"
                if write:
                    run.written(path)
                    np.ascontiguousarray(np.asarray(arr).astype(types.get(name, np.asarray(arr).dtype))).tofile(path)
                files[kind][name] = f"{TRTEXEC_IO}/{path.name}"
        shapes = {n: tuple(int(d) for d in np.shape(a)) for n, a in sample.items() if n in dynamic}
        pairs.append(IOPair(files["in"], files["out"], shapes))
    return pairs


def save_polygraphy_io(run: RunDir, samples: Sequence[Sample], refs: Sequence[dict]) -> None:
    """inputs.json and reference_outputs.json in polygraphy's formats (--load-inputs, --load-outputs): the
    samples the capture ran on (at most `capture.max_samples`, every shape group), not thousands."""
    from polygraphy.comparator import IterationResult, RunResults
    from polygraphy.json import save_json
    from polygraphy.logger import G_LOGGER

    G_LOGGER.module_severity = G_LOGGER.ERROR  # polygraphy's own progress lines are noise here

    out_dir = run.root
    run.written(out_dir / "inputs.json")
    run.written(out_dir / "reference_outputs.json")
    with _without_torch():
        save_json([dict(s) for s in samples], str(out_dir / "inputs.json"))
        results = RunResults()
        name = "onnxrt-fp32-reference"
        results.append((name, [IterationResult(dict(r), runner_name=name) for r in refs]))
        results.save(str(out_dir / "reference_outputs.json"))


@contextlib.contextmanager
def _without_torch() -> Iterator[None]:
    """Polygraphy imports torch where it is installed, to ask whether an array is a torch tensor
    (`util.array.is_torch`, which IterationResult calls on every output before asking whether it is a NumPy array)
    and to register its JSON encoder for them (`json/serde.py`): 4-7 s on the GPU machine, for arrays that are all
    NumPy here. While we save, torch cannot be imported (unless it is already); afterwards it can, as before. The
    block is process-wide: another thread importing torch meanwhile would get an ImportError (a run does not)."""
    blocked = "torch" not in sys.modules
    if blocked:
        sys.modules["torch"] = None  # type: ignore[assignment]  # an import of it raises ImportError meanwhile
    try:
        yield
    finally:
        if blocked and "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]
