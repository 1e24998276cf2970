"""TensorRT layers and the ONNX nodes they come from (pure helpers: no TensorRT needed).

TensorRT's ONNX parser names the first layer of a node after the node and further layers of the
same node `<node>_<n>` (a parser-wide counter), and records the source node in the layer's
metadata as `[ONNX Layer: <node>]` (`[ONNX Layer: <node> | <caller> (<function>) ...]` inside
local functions); engine-level layer info joins the entries of fused layers with `\\x1f`. A node
without a name is called `node_of_<its first output>` in both (seen with TensorRT-RTX 1.7's parser),
and a name used twice gives one metadata string for both nodes (the second node's layers get the
counter suffix), so only unique names map back without doubt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import onnx

from precision_doctor.graph.toolnames import tensorrt_node_name

ONNX_LAYER_TAG = "[ONNX Layer: "
# Separators TensorRT puts between the metadata entries of fused (engine) layers.
_METADATA_SEPARATORS = "\x1e\x1f"
# The ONNX parser's unique name for extra layers of one node: `<node>_<counter>`.
_SUBLAYER_NAME = re.compile(r"(.+)_\d+", re.DOTALL)
# Local-function frames in metadata: `<calling node> (<function name>)`.
_FUNCTION_FRAME = re.compile(r"^(.*) \([^()]*\)$")


def metadata_entries(metadata: str | None) -> list[str]:
    """The `[ONNX Layer: ...]` entries of a layer's metadata, without the tag and closing bracket.

    Network layers carry one entry; layer info of a built engine joins the entries of a fused
    layer with `\\x1f` (sometimes `\\x1e`), or puts them side by side. A node name may itself
    contain `]`: only the bracket that closes an entry is removed.
    """
    if not metadata or ONNX_LAYER_TAG not in metadata:
        return []
    out = []
    for part in metadata.split(ONNX_LAYER_TAG)[1:]:
        part = part.rstrip(_METADATA_SEPARATORS + " \t\r\n")
        if part.endswith("]"):
            part = part[:-1]
        if part:
            out.append(part)
    return out


def _entry_candidates(entry: str) -> list[str]:
    """Node names an entry may refer to, best first: the whole entry (a name may contain ` | `),
    the node itself, then the calling nodes of local functions, innermost first."""
    pieces = entry.split(" | ")
    cands = [entry] if len(pieces) > 1 else []
    cands.append(pieces[0])
    for frame in pieces[1:]:
        m = _FUNCTION_FRAME.match(frame)
        cands.append(m.group(1) if m else frame)
    return cands


def onnx_nodes_of_layer(layer_name: str, metadata: str | None, onnx_names: Iterable[str] | None) -> list[str]:
    """All ONNX nodes a TensorRT layer comes from (several for a fused engine layer), in order.

    Metadata first; without usable metadata the layer name: an exact node name, else the node name
    that the layer name extends by the parser's sub-layer suffix `_<digits>`.
    With `onnx_names` empty or None, metadata names are returned as they are.
    """
    names = set(onnx_names or ())
    found: list[str] = []
    for entry in metadata_entries(metadata):
        if names:
            hit = next((c for c in _entry_candidates(entry) if c in names), None)
        else:
            hit = entry.split(" | ")[0]
        if hit is not None and hit not in found:
            found.append(hit)
    if found:
        return found
    if layer_name in names:
        return [layer_name]
    # Extra layers of a node are `<node>_<counter>`: one suffix on the node's own name.
    m = _SUBLAYER_NAME.fullmatch(layer_name)
    if m and m.group(1) in names:
        return [m.group(1)]
    return []


def onnx_node_of_layer(layer_name: str, metadata: str | None, onnx_names: Iterable[str] | None) -> str | None:
    """The ONNX node a TensorRT layer comes from (the first, for a fused layer), or None."""
    nodes = onnx_nodes_of_layer(layer_name, metadata, onnx_names)
    return nodes[0] if nodes else None


def map_layers(layers: Sequence[tuple[str, str | None]], onnx_names: Iterable[str] | None) -> dict[str, list[str]]:
    """Layer name -> ONNX nodes it comes from, for `(name, metadata)` pairs in network order."""
    names = set(onnx_names or ())
    return {name: onnx_nodes_of_layer(name, meta, names) for name, meta in layers}


def layers_for_fallback(
    layers: Sequence[tuple[str, str | None]], fallback: Iterable[str], onnx_names: Iterable[str] | None
) -> list[str]:
    """Names of the layers (network order, no duplicates) that come from a node of `fallback`."""
    fb = set(fallback)
    out: list[str] = []
    seen: set[str] = set()
    for name, nodes in map_layers(layers, onnx_names).items():
        if name not in seen and any(n in fb for n in nodes):
            out.append(name)
            seen.add(name)
    return out


def unmapped_nodes(
    layers: Sequence[tuple[str, str | None]], fallback: Iterable[str], onnx_names: Iterable[str] | None
) -> list[str]:
    """Fallback nodes that no layer comes from (folded away, shape-only, or unknown names)."""
    covered = {n for nodes in map_layers(layers, onnx_names).values() for n in nodes}
    return [n for n in fallback if n not in covered]


def tensorrt_names(graph: onnx.GraphProto, our_names: Sequence[str] | None = None) -> dict[str, str]:
    """TensorRT's name for each node of `graph` -> the name precision-doctor uses for it (`our_names`,
    in node order: e.g. what `model.name_nodes` gave a copy of the graph; default the node's own
    name). A name used by several nodes keeps its first node (TensorRT cannot tell them apart)."""
    ours = list(our_names) if our_names is not None else [n.name for n in graph.node]
    out: dict[str, str] = {}
    for node, mine in zip(graph.node, ours):
        out.setdefault(tensorrt_node_name(node), mine or tensorrt_node_name(node))
    return out


def resolve_nodes(layer_name: str, metadata: str | None, names: Mapping[str, str]) -> list[str]:
    """Our names of the ONNX nodes a layer comes from, through TensorRT's names (`tensorrt_names`)."""
    return [names[n] for n in onnx_nodes_of_layer(layer_name, metadata, names)]
