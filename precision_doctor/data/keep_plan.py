"""Which tensors a capture keeps in activations.h5 (`capture.keep`, `--keep-activations`), parsed and resolved.

Every capture keeps every tensor's error statistics (what the analysis, the ranking, `--resume` and the capture
cache read) and the graph outputs of every run (the verdict under any tolerance); `capture.keep` says which full
tensors it keeps beyond them:

- `summary` (the default): those of the `DEFAULT_TOP` top layers of the ranking (as `top:3`);
- `top:N`: those of the N top layers of the ranking (`top:0`: none, the statistics and outputs only);
- node or tensor names, comma-separated: those too, beside the top 3 unless a `top:N` says otherwise
  (`top:0,/blk3/Pow` keeps that node's alone);
- `all`: every tensor of every run, as `polygraphy --mark all` would (samples x the model's activations x 4 runs);
- `none`: what `summary` keeps until the report is written, then the file is removed (a run cut off keeps it,
  so that `--resume` does not capture again).

A layer's tensors are its inputs (not initializers) and outputs in the FP32 and low-precision runs and its outputs in
the local run (the node alone in low precision on exact inputs); a tensor's, that tensor in each run that computes
it. So the file's size is set by the answer (and the names), not by the model times the samples; and these full
tensors (the top layers' and the names') are kept for as many of the captured samples as fit in TENSORS_BYTES, 500 MB
(the hardest first) where the captured samples are of one shape group (with several, every sample's, not bounded
yet): at 1024x1024 one layer's tensors of 8 samples are gigabytes (a segmenter's top 3 layers wrote about 2.5 GB on
the H200). A top layer whose one sample's tensors do not fit beside those before it is left out (whisper-base's
encoder attention: 360 MB a layer and sample, 1.08 GB for one sample's top 3 layers); the names are kept for one
sample at least, whatever their size. Their datasets keep a row per captured sample, only the first
`tensors_samples` (the store's attribute) written: the other rows read as zeros.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from precision_doctor.data.activations import LOCAL, LOWP, REFERENCE
from precision_doctor.errors import SpecError
from precision_doctor.graph.model import Model, NodeInfo

DEFAULT_TOP = 3
SETTING = "capture.keep"
TENSORS_BYTES = 500 * 10**6  # the full tensors kept beyond the statistics and outputs: for as many samples as fit


@dataclass(frozen=True)
class KeepPlan:
    """`capture.keep` parsed: every tensor (`every`), the file removed after the report (`remove`), the `top` layers of
    the ranking and the `names` of nodes or tensors."""

    every: bool = False
    remove: bool = False
    top: int = DEFAULT_TOP
    names: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> KeepPlan:
        """The plan of a `capture.keep` value; SpecError naming the setting for one that is not one."""
        text = str(text).strip()
        if text in ("all", "none"):
            return cls(every=text == "all", remove=text == "none")
        top, names = DEFAULT_TOP, []
        items = text.split(",")
        for item in (i.strip() for i in items):
            if not item:
                raise SpecError(SETTING, f"{{{SETTING}}} {text!r}: an empty item; give summary, top:N, all, none or "
                                "node/tensor names, comma-separated")
            if item in ("all", "none"):
                raise SpecError(SETTING, f"{{{SETTING}}} {item} stands alone (got {text!r})")
            if item == "summary":
                continue
            if item.startswith("top:"):
                n = item[4:]
                if not n.isdigit() or int(n) > 1_000_000:
                    raise SpecError(SETTING, f"{{{SETTING}}} {item!r}: top:N takes a whole number of layers, e.g. top:5")
                top = int(n)
                continue
            names.append(item)
        return cls(top=top, names=tuple(dict.fromkeys(names)))

    @property
    def label(self) -> str:
        """The store's `kept` attribute: "all", or what a summary holds ("summary", "top:5", "top:3,NAME")."""
        if self.every:
            return "all"
        head = "summary" if self.top == DEFAULT_TOP and not self.names else f"top:{self.top}"
        return ",".join([head, *self.names])

    def check_names(self, model: Model) -> None:
        """SpecError naming the first name that is no node or tensor of `model`."""
        from precision_doctor.graph.names import shown

        tensors = set(model.inputs) | {t for n in model.nodes for t in n.outputs if t}
        for name in self.names:
            if name not in tensors and name not in {n.name for n in model.nodes}:
                raise SpecError(SETTING, f"{{{SETTING}}} {shown(name)}: no node or tensor of the model has this name "
                                "(node names as in layers.csv; a name with a comma cannot be given here)")

    def tensors(self, model: Model, ranking: list[str], budget: int | None = None,
                nbytes: Callable[[str], int] | None = None) -> dict[str, list[str]]:
        """The tensors kept beyond the statistics and the graph outputs, per run, for a capture whose ranking (node
        names, best first) is `ranking`. With a `budget` (bytes) and `nbytes` (a tensor's bytes in one sample), a top
        layer is kept only where one sample's tensors of it, the names' and the top layers' before it fit in the
        budget, so that the bound holds at one sample too (whisper-base's encoder attention: five tensors of 72 MB
        a layer); the names are kept whatever their size."""
        by_name = {n.name: n for n in model.nodes}
        named = [by_name[n] for n in self.names if n in by_name]
        tensors = [n for n in self.names if n not in by_name]
        top: list[NodeInfo] = []
        for node in (model.node(n) for n in ranking[:self.top]):
            more = layer_tensors(model, [*top, node, *named], tensors)
            if budget is None or nbytes is None or sum(nbytes(t) for ts in more.values() for t in ts) <= budget:
                top.append(node)
        return layer_tensors(model, [*top, *named], tensors)


def layer_tensors(model: Model, nodes: list[NodeInfo], tensors: list[str] = (),
                  producers: dict[str, NodeInfo] | None = None) -> dict[str, list[str]]:
    """Per run, the tensors of `nodes` (inputs and outputs; the local run: outputs of candidates) and `tensors` (in
    each run that computes them), each once, in order (`producers`: `model.producers()`, where already known)."""
    producers = model.producers() if producers is None else producers
    ref: dict[str, None] = {}
    lowp: dict[str, None] = {}
    local: dict[str, None] = {}
    for n in nodes:
        for t in [*n.inputs, *n.outputs]:
            if t and t not in model.initializers:
                ref[t] = None
                if t in producers and model.is_float(t):
                    lowp[t] = None
        if n.is_candidate:
            local.update(dict.fromkeys(n.float_outputs))
    for t in tensors:
        ref[t] = None
        p = producers.get(t)
        if p is not None and model.is_float(t):
            lowp[t] = None
            if p.is_candidate:
                local[t] = None
    return {REFERENCE: list(ref), LOWP: list(lowp), LOCAL: list(local)}
