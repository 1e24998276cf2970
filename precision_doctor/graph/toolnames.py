"""Names every tool will see: the names the report uses for nodes, against the names TensorRT and
ModelOpt AutoCast derive for the same nodes.

precision-doctor names an unnamed or duplicate-named node `<op>_<index>` (`model.name_nodes`). The
tools do not see those names unless the model they read carries them:

* TensorRT's ONNX parser calls an unnamed node `node_of_<its first output>` (layer name and
  metadata), and a name used twice gives the second node's layers a counter suffix;
* ModelOpt AutoCast names unnamed nodes itself (`modelopt/onnx/utils.py: name_onnx_nodes`, run by
  its GraphSanitizer): `<op>_<k>`, where k starts at the number of distinct names in the graph
  (the empty name counts) and goes up only when the name is taken; named nodes keep their names,
  duplicates included. Before naming, AutoCast fuses decomposed LayerNorm patterns into one
  `LayerNormalization` node (`LayerNorm_<ReduceMean name>`), whose parts then have no names at all.

So `--layerPrecisions` and `--nodes_to_exclude` written with our names match nothing in the original
file when it has unnamed nodes (and trtexec keeps them FP16 without a word). `named.onnx` is the
model with the report's names written in; every emitted command reads it instead of the original,
and each tool then sees exactly the report's names (tests check it with TensorRT-RTX's parser and
with AutoCast's rule above).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import onnx

from precision_doctor.graph.model import Model, over_protobuf_limit, save_with_external_data
from precision_doctor.runfiles import RunDir

UNNAMED_PREFIX = "node_of_"  # what TensorRT's parser calls an unnamed node (and its first layer)
NAMED_ONNX = "named.onnx"


def tensorrt_node_name(node: onnx.NodeProto) -> str:
    """The name TensorRT's ONNX parser gives a node's layers and metadata: the node's own name, or
    `node_of_<first output>` when it has none."""
    if node.name:
        return node.name
    first = next((o for o in node.output if o), "")
    return UNNAMED_PREFIX + first


def autocast_names(graph: onnx.GraphProto) -> list[str]:
    """The node names ModelOpt AutoCast ends up with for `graph` (its rule, above; the LayerNorm
    fusion that precedes it is not modelled: names of fused nodes disappear there)."""
    taken = {n.name for n in graph.node}
    k = len(taken)
    out = []
    for node in graph.node:
        name = node.name
        if not name:
            name = f"{node.op_type}_{k}"
            while name in taken:
                k += 1
                name = f"{node.op_type}_{k}"
            taken.add(name)
        out.append(name)
    return out


def tensorrt_layer_names(graph: onnx.GraphProto) -> list[str]:
    """The name TensorRT gives each node's layers and metadata: its own name, or `node_of_<output>`
    when it has none (a name used twice stays ambiguous: the second node's layers get a suffix)."""
    return [tensorrt_node_name(n) for n in graph.node]


@dataclass(frozen=True)
class NameMismatch:
    """A node whose name differs between the report and a tool reading the given model file."""

    ours: str
    tensorrt: str
    autocast: str


def tool_name_mismatches(graph: onnx.GraphProto, ours: list[str]) -> list[NameMismatch]:
    """Nodes (in order) whose report name TensorRT or AutoCast would not see in `graph`."""
    trt, ac = tensorrt_layer_names(graph), autocast_names(graph)
    return [NameMismatch(o, t, a) for o, t, a in zip(ours, trt, ac) if not (o == t == a)]


def save_model(proto: onnx.ModelProto, path: Path, writer: RunDir | None = None) -> Path:
    """Save a model (through a temporary file, then renamed); past protobuf's 2 GB limit the weights
    go to `<name>.data` beside it, and the two files are written in place. `writer`: the run directory `path`
    is in (its manifest lists the files); None: not recorded."""
    large = over_protobuf_limit(proto, margin=2**20)
    for p in (path, path.with_name(path.name + ".data"), path.with_name(f".{path.name}.partial")):
        if writer is not None:
            writer.written(p)
    if large:
        save_with_external_data(proto, path)
    else:
        tmp = path.with_name(f".{path.name}.partial")
        onnx.save(proto, str(tmp))
        tmp.replace(path)
    return path


def model_for_tools(model: Model, out_dir: str | Path, writer: RunDir | None = None) -> Path:
    """The ONNX file every emitted command should read: the model's own file when it already carries
    the report's names, else `out_dir/named.onnx` (written here: the model as diagnosed, every node
    named as in the report, input shapes as fixed for the run)."""
    if model.path is not None and not model.renamed_nodes:
        return Path(model.path)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return save_model(model.proto, Path(out_dir) / NAMED_ONNX, writer)


MODEL_LINK = "model.onnx"  # the model as the run directory's commands name it
COPY_LIMIT = 256 * 2**20  # where no link can be made, a model up to this size is copied (larger: named absolutely)
NEAR = 3  # a file at most this many directories up from the run directory is named relative to it


def near_path(path: str | Path, run_dir: str | Path) -> str:
    """`path` as a command run from `run_dir` names it: relative where the two are near (at most NEAR folders up,
    below a common folder other than the root), else absolute."""
    target, run_dir = Path(path).resolve(), Path(run_dir).resolve()
    try:
        common = Path(os.path.commonpath([target, run_dir]))
        rel = Path(os.path.relpath(target, run_dir))
    except ValueError:  # another drive
        return str(target)
    near = common != Path(common.anchor) and rel.parts.count("..") <= NEAR
    return str(rel) if near else str(target)


@dataclass(frozen=True)
class PlacedModel:
    """The model file the run directory's commands read: `name` relative to the run directory (or absolute where
    nothing could be placed there) and how it got there: "symlink" (relative), "copy", or None (named.onnx, which
    the run wrote, or the absolute path)."""

    name: str
    link: str | None


def place_model(model_file: Path, out_dir: Path, writer: RunDir | None = None) -> PlacedModel:
    """`out_dir/model.onnx` standing for `model_file` (and its external data files beside it, under their own
    names), so that commands run from `out_dir` name it relatively: a relative symbolic link, or a copy where
    links cannot be made (up to COPY_LIMIT); else `model_file`'s absolute path. A model file inside `out_dir`
    (named.onnx) is named as it is. `writer`: `out_dir`'s (its manifest lists what is placed there)."""
    model_file, out_dir = Path(model_file).resolve(), Path(out_dir).resolve()
    if model_file.parent == out_dir:
        return PlacedModel(model_file.name, None)
    data = _external_data(model_file)
    if data is None:
        return PlacedModel(str(model_file), None)
    names = [MODEL_LINK, *data]
    if writer is not None:  # placed by an earlier invocation of this run (a resume, --force): placed again
        for n in names:
            if "/" not in n and writer.ours(out_dir / n) and ((out_dir / n).is_symlink() or (out_dir / n).is_file()):
                (out_dir / n).unlink()
    if any((out_dir / n).exists() or (out_dir / n).is_symlink() or "/" in n or n == MODEL_LINK
                           for n in names[1:]) or (out_dir / MODEL_LINK).exists():
        return PlacedModel(str(model_file), None)
    for n in names:
        if writer is not None:
            writer.written(out_dir / n)
    sources = [model_file, *(model_file.parent / n for n in data)]
    try:
        for name, src in zip(names, sources):
            (out_dir / name).symlink_to(near_path(src, out_dir))
        return PlacedModel(MODEL_LINK, "symlink")
    except OSError:
        for name in names:
            (out_dir / name).unlink(missing_ok=True)
    if sum(s.stat().st_size for s in sources) > COPY_LIMIT:
        return PlacedModel(str(model_file), None)
    for name, src in zip(names, sources):
        shutil.copyfile(src, out_dir / name)
    return PlacedModel(MODEL_LINK, "copy")


def _external_data(model_file: Path) -> list[str] | None:
    """The external data files `model_file` names (relative to its folder); None when it cannot be read."""
    try:
        proto = onnx.load(str(model_file), load_external_data=False)
    except Exception:  # noqa: BLE001 (the model was read before; a file changed since is named absolutely)
        return None
    found = {e.value for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
             for e in t.external_data if e.key == "location"}
    return sorted(found)
