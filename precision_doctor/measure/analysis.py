"""Per-tensor error statistics, first divergence, local error per node, range facts and the ranking.

Everything here reads the activation store only, so a capture can be re-analysed without the model.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass, field, fields, replace

import numpy as np

from precision_doctor.codec import BadValue, from_json, to_json
from precision_doctor.data.activations import LOCAL, LOWP, REFERENCE, ActivationStore
from precision_doctor.fingerprint import code_fingerprint
from precision_doctor.graph.formats import Format, get_format
from precision_doctor.graph.model import Model
from precision_doctor.measure.tolerance import OutputCheck, Tolerance, check, merge

MEMO = "analysis"  # a dataset at the store's root: the analysis without its verdict (JSON), see keep_analysis
DIVERGENCE_ROUNDOFFS = 16.0  # a tensor diverges when its relative error exceeds this many unit roundoffs
INPUT_SENSITIVITY = 8.0  # local error this many times the output's own rounding error: inputs matter


@dataclass
class ErrorStats:
    """Error of a tensor against its reference, accumulated over samples."""

    size: int = 0
    max_abs: float = 0.0
    mean_abs: float = 0.0
    max_rel: float = 0.0
    rel_l2: float = 0.0
    cosine: float = 1.0
    nan: int = 0
    inf: int = 0
    ref_absmax: float = 0.0
    frac_above_max: float = 0.0
    frac_below_normal: float = 0.0

    @property
    def nonfinite(self) -> int:
        return self.nan + self.inf


@dataclass(frozen=True)
class _Pairs:
    """One sample of a tensor and its reference as float64, flat: the pairs where both are finite (all of them, not
    copied, in the usual case), |ref| over every finite reference element (None: `ref`'s, all finite), how many
    elements, the NaN and Inf the run added, and whether it made a finite reference element non-finite."""

    out: np.ndarray
    ref: np.ndarray
    ref_abs: np.ndarray | None
    size: int
    nan: int = 0
    inf: int = 0
    new_nonfinite: bool = False


def _finite_pairs(out: np.ndarray, ref: np.ndarray) -> _Pairs | None:
    """The pairs the error statistics sum over (None: the shapes differ)."""
    o = np.asarray(out, dtype=np.float64).ravel()
    r = np.asarray(ref, dtype=np.float64).ravel()
    if o.shape != r.shape:
        return None
    if not r.size:
        return _Pairs(o, r, None, 0)
    finite_ref, finite_out = np.isfinite(r), np.isfinite(o)
    if finite_ref.all() and finite_out.all():  # the usual case: no masked copies (the same sums, in the same order)
        return _Pairs(o, r, None, r.size)
    both = finite_ref & finite_out
    return _Pairs(o[both], r[both], np.abs(r[finite_ref]), r.size,
                  nan=int(np.count_nonzero(np.isnan(o) & ~np.isnan(r))),
                  inf=int(np.count_nonzero(np.isinf(o) & ~np.isinf(r))),
                  new_nonfinite=bool(np.any(~finite_out & finite_ref)))


@dataclass(frozen=True)
class _Ref:
    """One sample of a reference tensor, prepared once for every run compared with it (the low-precision run, the
    local run, the rounding of the reference itself): float64 and flat, and where every element is finite (else
    None: each comparison masks on its own), its |ref| with zeros as float64's smallest step, its sum of squares
    and its range facts under `fmt`. The comparisons then compute what they computed before, once instead of three
    times: the same numbers."""

    raw: np.ndarray
    flat: np.ndarray
    safe_abs: np.ndarray | None = None
    sq: float = 0.0
    absmax: float = 0.0
    above: int = 0
    below: int = 0

    @classmethod
    def of(cls, ref: np.ndarray, fmt: Format) -> _Ref:
        r = np.asarray(ref, dtype=np.float64).ravel()
        if not r.size or ref.dtype.kind != "f" or not np.isfinite(r).all():
            return cls(ref, r)
        return cls.of_pairs(ref, r, None, fmt)

    @classmethod
    def of_pairs(cls, raw: np.ndarray, rb: np.ndarray, a: np.ndarray | None, fmt: Format) -> _Ref:
        """The prepared form of the finite reference elements `rb` (float64, flat) that are compared; `a`: |ref|
        over every finite reference element, for the range facts (None: `rb`'s)."""
        with np.errstate(invalid="ignore", over="ignore"):
            absr = np.abs(rb)
            a = absr if a is None else a
            absmax = float(a.max()) if a.size else 0.0
            above = int(np.count_nonzero(a > fmt.max))
            below = int(np.count_nonzero((a > 0) & (a < fmt.smallest_normal)))
            absr[absr == 0] = 2.22e-16  # after the range facts: a zero reference divides by float64's smallest step
            return cls(raw, rb, absr, float(np.dot(rb, rb)), absmax, above, below)


class _Acc:
    """Streaming accumulator for `ErrorStats`."""

    def __init__(self, fmt: Format):
        self.fmt = fmt
        self.n = 0
        self.sum_abs = 0.0
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.sq_diff = 0.0
        self.sq_ref = 0.0
        self.sq_out = 0.0
        self.dot = 0.0
        self.nan = 0
        self.inf = 0
        self.ref_absmax = 0.0
        self.above = 0
        self.below = 0
        self.new_nonfinite = False

    def add(self, out: np.ndarray, ref: np.ndarray | _Ref) -> None:
        if isinstance(ref, _Ref):
            if ref.safe_abs is not None and np.shape(out) == np.shape(ref.raw):
                o = np.asarray(out, dtype=np.float64).ravel()
                if np.isfinite(o).all():
                    self.n += o.size
                    self._add_prepared(o, ref)
                    return
            ref = ref.raw
        p = _finite_pairs(out, ref)
        if p is None:
            self.new_nonfinite = True
            return
        self.n += p.size
        if not p.size:
            return
        self.nan += p.nan
        self.inf += p.inf
        self.new_nonfinite |= p.new_nonfinite
        self._add_finite(p.out, p.ref, p.ref_abs)

    def _add_finite(self, ob: np.ndarray, rb: np.ndarray, a: np.ndarray | None = None) -> None:
        """The sums over finite pairs (`ob`, `rb`: float64, flat); `a`: |ref| over every finite reference element
        (None: `rb`'s)."""
        self._add_prepared(ob, _Ref.of_pairs(rb, rb, a, self.fmt))

    def _add_prepared(self, ob: np.ndarray, ref: _Ref) -> None:
        """The sums of the finite `ob` against the prepared, finite reference elements it is paired with."""
        rb = ref.flat
        self.ref_absmax = max(self.ref_absmax, ref.absmax)
        self.above += ref.above
        self.below += ref.below
        with np.errstate(invalid="ignore", over="ignore"):
            d = ob - rb
            np.abs(d, out=d)
            self.sum_abs += float(d.sum())
            if d.size:
                self.max_abs = max(self.max_abs, float(d.max()))
                self.max_rel = max(self.max_rel, float((d / ref.safe_abs).max()))
            self.sq_diff += float(np.dot(d, d))
            self.sq_ref += ref.sq
            self.sq_out += float(np.dot(ob, ob))
            self.dot += float(np.dot(ob, rb))

    def result(self) -> ErrorStats:
        if self.new_nonfinite:
            rel_l2 = math.inf
            max_abs = max_rel = math.inf
        else:
            rel_l2 = _rel_l2(self.sq_diff, self.sq_ref)
            max_abs, max_rel = self.max_abs, self.max_rel
        denom = math.sqrt(self.sq_ref) * math.sqrt(self.sq_out)
        cos = self.dot / denom if denom > 0 else (1.0 if self.sq_ref == self.sq_out == 0 else 0.0)
        n = max(self.n, 1)
        return ErrorStats(
            size=self.n,
            max_abs=max_abs,
            mean_abs=self.sum_abs / n,
            max_rel=max_rel,
            rel_l2=rel_l2,
            cosine=cos,
            nan=self.nan,
            inf=self.inf,
            ref_absmax=self.ref_absmax,
            frac_above_max=self.above / n,
            frac_below_normal=self.below / n,
        )


class RelL2:
    """A streaming accumulator of one tensor's relative L2 error alone (`add(out, ref)` sample by sample, then
    `result()`): the same sums over the same finite pairs as `tensor_error`'s, so the same number, for a third
    of its passes over the data (the fixed run's per-layer errors need nothing else)."""

    def __init__(self) -> None:
        self.sq_diff = 0.0
        self.sq_ref = 0.0
        self.new_nonfinite = False

    def add(self, out: np.ndarray, ref: np.ndarray) -> None:
        p = _finite_pairs(out, ref)
        if p is None:
            self.new_nonfinite = True
            return
        if not p.size:
            return
        self.new_nonfinite |= p.new_nonfinite
        with np.errstate(invalid="ignore", over="ignore"):
            d = p.out - p.ref
            self.sq_diff += float(np.dot(d, d))
            self.sq_ref += float(np.dot(p.ref, p.ref))

    def result(self) -> float:
        return math.inf if self.new_nonfinite else _rel_l2(self.sq_diff, self.sq_ref)


def _rel_l2(sq_diff: float, sq_ref: float) -> float:
    """||out - ref|| / ||ref|| from the sums of squares (0 where both are 0)."""
    if sq_ref == 0 and sq_diff == 0:
        return 0.0
    return math.sqrt(sq_diff) / max(math.sqrt(sq_ref), 1e-30)


def tensor_error(store: ActivationStore, run: str, name: str, fmt: Format) -> ErrorStats:
    acc = _Acc(fmt)
    for out, ref in zip(store.iter_samples(run, name), store.iter_samples(REFERENCE, name)):
        acc.add(out, ref)
    return acc.result()


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
) -> Analysis:
    """Analyse a capture. Node facts come from `model` or, without it, from the store's attributes."""
    fmt = get_format(str(store.attr("precision", "fp16")))
    nodes = model_nodes if model_nodes is not None else store.attr("nodes", [])
    if model is not None:
        nodes = model.node_records()
    folded = store.attr("folded", None) or {}  # node -> the node it is folded into (captures before it: none)
    tol = tolerance or Tolerance()
    threshold = DIVERGENCE_ROUNDOFFS * fmt.unit_roundoff
    stats = _tensor_stats(store, nodes, fmt)

    tensors: list[TensorRow] = []
    first, first_node = None, None
    for nd in nodes:
        for t in nd["float_outputs"]:
            st = stats[t].lowp if t in stats else None
            if st is None:
                continue
            shape = store.shape(REFERENCE, t)  # -1 where shape groups differ
            tensors.append(TensorRow(t, nd["name"], nd["index"], shape, st))
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
    verdict = output_verdict(store, [str(o) for o in store.attr("model_outputs", [])], tol)
    return Analysis(fmt.name, layers, tensors, first, first_node, threshold, verdict)


@dataclass(frozen=True)
class _Stats:
    """What the analysis needs of one tensor: its low-precision run's error, its local error and the error of
    only rounding it (for a candidate's output), the largest finite |reference| (for a candidate's input)."""

    lowp: ErrorStats | None
    local: ErrorStats | None
    rounding: ErrorStats | None
    absmax: float | None


READ_MB = 64.0  # the analysis reads this many MiB of a tensor's samples at once


def _tensor_stats(store: ActivationStore, nodes: list[dict], fmt: Format) -> dict[str, _Stats]:
    """Every tensor's statistics, one pass over its samples each (the reference read once for all of them, blocks
    of samples at a time). Not on threads: on the H100 machine's 16 cores 8 threads took 6.9 s where one took
    4.9-5.9 s (NumPy's float64 dot products go through OpenBLAS, whose own threads the Python threads fight)."""
    lowp_names, local_names = set(store.tensor_names(LOWP)), set(store.tensor_names(LOCAL))
    lowp = {t for nd in nodes for t in nd["float_outputs"] if t in lowp_names}
    local = {t for nd in nodes if nd["candidate"] for t in nd["float_outputs"] if t in local_names}
    inputs = {t for nd in nodes if nd["candidate"] for t in nd["float_inputs"] if store.has(REFERENCE, t)}
    wanted = sorted(lowp | local | inputs)

    def one(t: str) -> _Stats:
        accs = {LOWP: _Acc(fmt) if t in lowp else None, LOCAL: _Acc(fmt) if t in local else None}
        rounding = _Acc(fmt) if t in local else None
        m = 0.0 if t in inputs else None
        runs = {run: store.iter_samples(run, t, READ_MB) for run, acc in accs.items() if acc is not None}
        for ref in store.iter_samples(REFERENCE, t, READ_MB) if runs or rounding or m is not None else ():
            prepared = _Ref.of(ref, fmt)  # once for the runs, the rounding and the input's range
            for run, it in runs.items():
                accs[run].add(next(it), prepared)
            if rounding is not None:
                rounding.add(fmt.round(ref), prepared)
            if m is not None and ref.dtype.kind == "f" and ref.size:
                if prepared.safe_abs is not None:
                    m = max(m, prepared.absmax)
                else:
                    with np.errstate(invalid="ignore"):
                        a = np.abs(ref[np.isfinite(ref)])
                    if a.size:
                        m = max(m, float(a.max()))
        done = {run: acc.result() if acc is not None else None for run, acc in accs.items()}
        return _Stats(done[LOWP], done[LOCAL], rounding.result() if rounding is not None else None, m)

    return {t: one(t) for t in wanted}


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
