"""The analysis of a capture: per-tensor error statistics, first divergence, local error per node, range facts and the
ranking.

It is computed from each tensor's statistics (`measure/stats.TensorStats`), which the streaming capture measures as
it runs (`measure/capture.py`) and keeps in the store (`keep_stats`), so a capture can be re-analysed without the
model and without its tensors; a store of every tensor without statistics is read tensor by tensor (`tensor_stats`).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace

import numpy as np

from precision_doctor.codec import BadValue, from_json, to_json
from precision_doctor.control import CaptureEvent, ProgressSink, notify
from precision_doctor.data.activations import LOCAL, LOWP, REFERENCE, STATS, ActivationStore
from precision_doctor.fingerprint import code_fingerprint
from precision_doctor.graph.formats import Format, get_format
from precision_doctor.graph.model import Model
from precision_doctor.measure.stats import ErrorStats, TensorAccumulator, TensorStats
from precision_doctor.measure.tolerance import OutputCheck, Tolerance, check, merge

MEMO = "analysis"  # a dataset at the store's root: the analysis without its verdict (JSON), see keep_analysis
STATS_VERSION = 1
DIVERGENCE_ROUNDOFFS = 16.0  # a tensor diverges when its relative error exceeds this many unit roundoffs
INPUT_SENSITIVITY = 8.0  # local error this many times the output's own rounding error: inputs matter


def _worst(stats: list[ErrorStats]) -> ErrorStats:
    if not stats:
        return ErrorStats()
    return max(stats, key=lambda s: (s.rel_l2, s.max_abs))


@dataclass
class LayerRow:
    """One node's line of the layer table. `folded_into`: under the emulation rules the node is folded into that one
    where both are low precision (a BatchNormalization into the Conv before it): its local error is then the folded
    kernel's, computed by that node, and the rankings users read show it as that node (render/layers.py)."""

    index: int
    name: str
    op_type: str
    outputs: list[str]
    flops: int
    local_rel_l2: float
    local_max_abs: float
    local_nonfinite: int
    rounding_rel_l2: float
    lowp_rel_l2: float
    lowp_max_abs: float
    lowp_cosine: float
    lowp_nonfinite: int
    ref_absmax: float
    frac_above_max: float
    frac_below_normal: float
    input_ref_absmax: float
    input_sensitive: bool
    score: float
    rank: int = 0
    folded_into: str | None = None


@dataclass
class TensorRow:
    name: str
    producer: str
    index: int
    shape: list[int]
    stats: ErrorStats


@dataclass
class Analysis:
    """What the capture says: the layer table, per-tensor errors, first divergence, verdict."""

    precision: str
    layers: list[LayerRow]
    tensors: list[TensorRow]
    first_divergence: str | None
    first_divergence_node: str | None
    divergence_threshold: float
    verdict: dict[str, OutputCheck] = field(default_factory=dict)

    @property
    def ranking(self) -> list[str]:
        return [r.name for r in sorted(self.layers, key=lambda r: r.rank)]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.verdict.values())

    def to_dict(self) -> dict:
        return {
            "precision": self.precision,
            "passed": self.passed,
            "first_divergence": self.first_divergence,
            "first_divergence_node": self.first_divergence_node,
            "divergence_threshold": self.divergence_threshold,
            "ranking": self.ranking,
            "outputs": {k: v.to_dict() for k, v in self.verdict.items()},
            "layers": [asdict(r) for r in self.layers],
            "tensors": [
                {"name": t.name, "producer": t.producer, "index": t.index, "shape": t.shape, **asdict(t.stats)}
                for t in self.tensors
            ],
        }

    def with_flops(self, flops: dict[str, int]) -> Analysis:
        """This analysis with each layer's FLOPs from `flops` (a cost model's, at the shapes that ran: a dynamic
        model's declared shapes give none); layers it does not name keep theirs."""
        return replace(self, layers=[replace(r, flops=flops.get(r.name, r.flops)) for r in self.layers])

    def layers_csv(self) -> str:
        buf = io.StringIO()
        fields = list(LayerRow.__dataclass_fields__)
        w = csv.DictWriter(buf, fieldnames=fields)
        w.writeheader()
        for r in sorted(self.layers, key=lambda r: r.index):
            row = asdict(r)
            row["outputs"] = " ".join(r.outputs)
            w.writerow(row)
        return buf.getvalue()


def analyse(
    store: ActivationStore,
    model_nodes: list[dict] | None = None,
    tolerance: Tolerance | None = None,
    model: Model | None = None,
    progress: ProgressSink | None = None,
) -> Analysis:
    """Analyse a capture: from the statistics it holds (`STATS`, what the streaming capture measured), or, in a store
    of every tensor without them (an earlier version's capture), from its tensors (`tensor_stats`, with a
    `CaptureEvent` per tensor to `progress`). Node facts come from `model` or, without it, from the store's
    attributes."""
    fmt = get_format(str(store.attr("precision", "fp16")))
    nodes = model_nodes if model_nodes is not None else store.attr("nodes", [])
    if model is not None:
        nodes = model.node_records()
    stats = stored_stats(store)
    if stats is None:
        stats = tensor_stats(store, nodes, fmt, progress)
    verdict = output_verdict(store, [str(o) for o in store.attr("model_outputs", [])], tolerance or Tolerance())
    return analysis_of(stats, nodes, fmt, store.attr("folded", None) or {}, lambda t: store.shape(REFERENCE, t),
                       verdict)


def analysis_of(stats: dict[str, TensorStats], nodes: list[dict], fmt: Format, folded: dict[str, str],
                shape: Callable[[str], list[int]], verdict: dict[str, OutputCheck]) -> Analysis:
    """The analysis of a capture's per-tensor statistics: `nodes` (`Model.node_records`), `folded` (node -> the node
    it is folded into, the store's attribute), `shape(tensor)` (one sample's shape, -1 where shape groups differ)
    and the graph outputs' `verdict`."""
    threshold = DIVERGENCE_ROUNDOFFS * fmt.unit_roundoff
    tensors: list[TensorRow] = []
    first, first_node = None, None
    for nd in nodes:
        for t in nd["float_outputs"]:
            st = stats[t].lowp if t in stats else None
            if st is None:
                continue
            tensors.append(TensorRow(t, nd["name"], nd["index"], shape(t), st))
            if first is None and (st.nonfinite > 0 or st.rel_l2 > threshold):
                first, first_node = t, nd["name"]

    layers: list[LayerRow] = []
    for nd in nodes:
        if not nd["candidate"]:
            continue
        outs = [stats[t] for t in nd["float_outputs"] if t in stats and stats[t].local is not None]
        local = _worst([o.local for o in outs])
        rounding = _worst([o.rounding for o in outs])
        lowp = _worst([o.lowp for o in outs if o.lowp is not None])
        in_absmax = max([stats[t].absmax for t in nd["float_inputs"] if t in stats and stats[t].absmax is not None],
                        default=0.0)
        sensitive = local.rel_l2 > threshold and local.rel_l2 > INPUT_SENSITIVITY * max(rounding.rel_l2, 1e-30)
        layers.append(
            LayerRow(
                index=nd["index"],
                name=nd["name"],
                op_type=nd["op_type"],
                outputs=list(nd["float_outputs"]),
                flops=int(nd.get("flops", 0)),
                local_rel_l2=local.rel_l2,
                local_max_abs=local.max_abs,
                local_nonfinite=local.nonfinite,
                rounding_rel_l2=rounding.rel_l2,
                lowp_rel_l2=lowp.rel_l2,
                lowp_max_abs=lowp.max_abs,
                lowp_cosine=lowp.cosine,
                lowp_nonfinite=lowp.nonfinite,
                ref_absmax=local.ref_absmax,
                frac_above_max=local.frac_above_max,
                frac_below_normal=local.frac_below_normal,
                input_ref_absmax=in_absmax,
                input_sensitive=bool(sensitive),
                score=score(local, in_absmax, fmt),
                folded_into=folded.get(nd["name"]),
            )
        )
    order = sorted(layers, key=lambda r: (-r.score, -r.local_max_abs, r.index))
    for rank, r in enumerate(order, 1):
        r.rank = rank
    return Analysis(fmt.name, layers, tensors, first, first_node, threshold, verdict)


def roles(nodes: list[dict], captured: set[str]) -> dict[str, tuple[bool, bool, bool]]:
    """Each tensor the analysis needs, with its roles (low-precision error, local error, input range): every node's
    floating outputs, each candidate's floating outputs and its floating inputs among `captured` (the tensors the
    reference run holds: graph inputs and node outputs, not initializers)."""
    lowp = {t for nd in nodes for t in nd["float_outputs"]}
    local = {t for nd in nodes if nd["candidate"] for t in nd["float_outputs"]}
    inputs = {t for nd in nodes if nd["candidate"] for t in nd["float_inputs"] if t in captured}
    return {t: (t in lowp, t in local, t in inputs) for t in sorted(lowp | local | inputs)}


READ_MB = 64.0  # the analysis reads this many MiB of a tensor's samples at once


def tensor_stats(store: ActivationStore, nodes: list[dict], fmt: Format,
                 progress: ProgressSink | None = None) -> dict[str, TensorStats]:
    """Every tensor's statistics from a store of every tensor, one pass over its samples each (the reference read
    once for all of them, blocks of samples at a time), a `CaptureEvent` ("analysis") every few tensors. Not on
    threads, a large tensor's chunks neither: on the H100 machine's 16 cores 8 threads took 6.9 s where one took
    4.9-5.9 s (NumPy's float64 dot products go through OpenBLAS, whose own threads the Python threads fight)."""
    lowp_names, local_names = set(store.tensor_names(LOWP)), set(store.tensor_names(LOCAL))
    captured = {t for nd in nodes for t in nd["float_inputs"] if store.has(REFERENCE, t)}
    wanted = {t: (lo and t in lowp_names, lc and t in local_names, a)
              for t, (lo, lc, a) in roles(nodes, captured).items()}
    out: dict[str, TensorStats] = {}
    for k, (t, (lo, lc, a)) in enumerate(wanted.items(), 1):
        acc = TensorAccumulator(fmt, lowp=lo, local=lc, absmax=a, chunked=False)
        if acc.needed:
            runs = [store.iter_samples(run, t, READ_MB) if on else None for run, on in ((LOWP, lo), (LOCAL, lc))]
            for ref in store.iter_samples(REFERENCE, t, READ_MB):
                acc.add(ref, *(next(it) if it is not None else None for it in runs))
        out[t] = acc.result()
        if k % ANALYSIS_EVENT_EVERY == 0 or k == len(wanted):
            notify(progress, CaptureEvent("analysis", k, len(wanted)))
    return out


ANALYSIS_EVENT_EVERY = 16  # tensors between two progress events of `tensor_stats`


def keep_stats(store: ActivationStore, stats: dict[str, TensorStats]) -> None:
    """Keep the capture's per-tensor statistics in `store` (open for writing): what `analyse` reads."""
    store.write_text(STATS, json.dumps({"version": STATS_VERSION, "tensors": {t: s.to_json() for t, s in stats.items()}}))


def stored_stats(store: ActivationStore) -> dict[str, TensorStats] | None:
    """The statistics `keep_stats` kept, or None (none kept, or not a document of this version)."""
    text = store.read_text(STATS)
    if text is None:
        return None
    try:
        doc = json.loads(text)
        if doc.get("version") != STATS_VERSION:
            return None
        return {str(t): TensorStats.from_json(s) for t, s in doc["tensors"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def score(local: ErrorStats, input_absmax: float, fmt: Format) -> float:
    """Sensitivity: the local relative error; infinite where the node overflows the format."""
    if local.nonfinite or local.frac_above_max > 0 or input_absmax > fmt.max:
        return math.inf
    return float(local.rel_l2)


def output_verdict(store: ActivationStore, outputs: list[str], tol: Tolerance,
                   references: list[dict[str, np.ndarray]] | None = None) -> dict[str, OutputCheck]:
    """Graph outputs of the low-precision run against the reference (the stored FP32 run, or `references`:
    one dict of outputs per sample), per sample, under `tol`."""
    verdict = {}
    for name in outputs:
        if not store.has(LOWP, name):
            continue
        refs = (r[name] for r in references) if references is not None else store.iter_samples(REFERENCE, name)
        checks = [check(o, r, tol.for_output(name)) for o, r in zip(store.iter_samples(LOWP, name), refs)]
        verdict[name] = merge(checks)
    return verdict


def keep_analysis(store: ActivationStore, analysis: Analysis) -> None:
    """Keep `analysis` in the store (`store` open for writing) so that a later `kept_analysis` skips the
    work: everything but the verdict, the one part that depends on the tolerance."""
    memo = {"version": code_fingerprint(), **to_json(analysis)}
    del memo["verdict"]
    store.write_text(MEMO, json.dumps(memo))


def kept_analysis(store: ActivationStore, tolerance: Tolerance) -> Analysis | None:
    """The analysis `keep_analysis` stored, with its verdict under `tolerance`: what `analyse` would
    return. None when the store has none, or one written by other code (`code_fingerprint`), with other
    fields or values that do not read as theirs."""
    text = store.read_text(MEMO)
    if text is None:
        return None
    memo = json.loads(text)
    if not isinstance(memo, dict) or memo.get("version") != code_fingerprint() or \
            not _fields_match(memo.get("layers"), LayerRow) or \
            not _fields_match([t.get("stats") for t in memo.get("tensors", []) if isinstance(t, dict)], ErrorStats):
        return None
    try:
        kept = from_json(Analysis, memo, MEMO)
    except BadValue:
        return None
    return replace(kept, verdict=output_verdict(store, [str(o) for o in store.attr("model_outputs", [])], tolerance))


def _fields_match(rows: list | None, cls: type) -> bool:
    names = {f.name for f in fields(cls)}
    return isinstance(rows, list) and all(isinstance(r, dict) and set(r) == names for r in rows)
