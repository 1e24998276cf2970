"""How well the emulation rules predict a provider's real low precision, node by node.

Runs are stored in the activation store's layout (`activations.py`): `reference`, the emulator's
local runs (`local` for the standard rule, `local__<rules>` for other rules, holding only the
nodes those rules change), the provider's real local run `gpu_local` (`graph.native`), and the
whole all-low-precision graph as `lowp`/`lowp__<rules>` (emulated) and `gpu_lowp` (the real mixed
graph with every tensor marked as an output). `node_rows` turns a store into one row per node:
each run's error against the reference, the provider/emulator ratio and how many elements the
emulator reproduces bit for bit; `by_op` aggregates the rows per op type.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from precision_doctor import control
from precision_doctor.control import StopToken
from precision_doctor.data.activations import LOCAL, REFERENCE, ActivationStore
from precision_doctor.graph.emulate import local_output
from precision_doctor.graph.formats import Format
from precision_doctor.graph.model import Model, NodeInfo
from precision_doctor.graph.ort_session import make_session
from precision_doctor.measure.capture import _node_bytes, group_by_bytes

GPU_LOCAL, GPU_LOWP = "gpu_local", "gpu_lowp"
STANDARD = "standard"
MISMATCH = (0.9, 1.1)  # a provider/emulator error ratio outside this range is a mismatch
METRICS = ("max_rel", "max_ulp", "max_abs", "rel_l2")
_SUFFIX = re.compile(r"__pdn?\d+$")


def run_name(kind: str, label: str) -> str:
    """The store run of the emulator's `kind` ('local' or 'lowp') under rules `label`."""
    return kind if label == STANDARD else f"{kind}__{label}"


def with_observed_shapes(model: Model, store: ActivationStore) -> Model:
    """`model` with the shapes its inference left unknown taken from the stored reference run (rules
    that need static shapes then apply where the samples fix them)."""
    shapes = dict(model.tensor_shapes)
    for t in store.tensor_names(REFERENCE):
        s = shapes.get(t)
        if s is None or any(d is None for d in s):
            shapes[t] = tuple(int(d) for d in store.dataset(REFERENCE, t).shape[1:])
    return model.with_tensor_shapes(shapes)


def as_f32(a: np.ndarray) -> np.ndarray:
    """Floating arrays narrower than float32 widened to float32 (the store's type); others as they are."""
    return a.astype(np.float32) if a.dtype.kind == "f" and a.itemsize < 4 else a


def capture_local_with(
    store: ActivationStore,
    run: str,
    model: Model,
    build: Callable[[list[NodeInfo]], tuple[onnx.ModelProto, list[str]]],
    nodes: Sequence[NodeInfo],
    samples_n: int,
    budget: int,
    providers: Sequence = ("CPUExecutionProvider",),
    placement: dict[str, str] | None = None,
    stop: StopToken | None = None,
    kernels: list[dict] | None = None,
) -> float:
    """Each node's local output from `build(group)` (a local graph: `emulate.local_graph`, or
    `native.native_local_graph`), fed the stored reference tensors, into `run`. With `placement`, the
    provider each node ran on (from ORT's profile of the first sample) is recorded there, and with `kernels`
    every kernel the profile shows (ORT's node name, op type, provider: an op ORT replaced by its function
    body or split shows as several). Returns seconds."""
    t0 = time.perf_counter()
    for group in group_by_bytes(list(nodes), lambda n: _node_bytes(model, n), budget):
        proto, feeds = build(group)
        outputs = [o.name for o in proto.graph.output]
        with tempfile.TemporaryDirectory(prefix="pd-prof-") as tmp:
            sess = _session(proto, providers, Path(tmp) if placement is not None else None)
            for i in range(samples_n):
                control.check(stop)
                feed = {t: store.read(REFERENCE, t, i) for t in feeds}
                for oname, value in zip(outputs, sess.run(outputs, feed)):
                    store.write(run, oname.removesuffix(local_output("")), i, samples_n, as_f32(value))
                if i == 0 and placement is not None:
                    where, events = _placement(sess, {n.name for n in group})
                    placement.update(where)
                    if kernels is not None:
                        kernels += events
        del sess
    return time.perf_counter() - t0


def _session(proto: onnx.ModelProto, providers: Sequence, profile_dir: Path | None) -> ort.InferenceSession:
    if profile_dir is None:
        return make_session(proto, providers, optimize=False)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.log_severity_level = 4  # errors reach us as exceptions; ORT logs nothing of its own
    so.enable_profiling = True
    so.profile_file_prefix = str(profile_dir / "prof")
    return ort.InferenceSession(proto.SerializeToString(), so, providers=list(providers))


def _placement(sess: ort.InferenceSession, node_names: set[str]) -> tuple[dict[str, str], list[dict]]:
    """Node name -> provider of its copy in a local graph, and every kernel run (`node`: ORT's name, `op`,
    `provider`), from the session's profile (profiling stops)."""
    events = json.loads(Path(sess.end_profiling()).read_text())
    out: dict[str, str] = {}
    kernels: list[dict] = []
    for e in events:
        a = e.get("args") or {}
        if e.get("cat") == "Node" and "provider" in a and e["name"].endswith("_kernel_time"):
            raw = e["name"][: -len("_kernel_time")]
            provider = a["provider"].removesuffix("ExecutionProvider")
            kernels.append({"node": raw, "op": a.get("op_name"), "provider": provider})
            name = _SUFFIX.sub("", raw)
            if name in node_names:
                out[name] = provider
    return out, kernels


# -- metrics ---------------------------------------------------------------------------------------


def ulp(v: np.ndarray, fmt: Format) -> np.ndarray:
    """The spacing of the format's values at |v| (subnormal spacing below the normal range), float32."""
    mant = round(-np.log2(fmt.unit_roundoff)) - 1
    emin = round(np.log2(fmt.smallest_normal))
    bits = np.asarray(v, dtype=np.float32).view(np.int32)
    e = np.maximum(((bits >> 23) & 0xFF) - 127, emin) - mant  # float32 zeros and subnormals give -127: emin
    if emin - mant >= -126:  # a normal float32: build it from its exponent bits
        return ((e + 127) << 23).astype(np.int32).view(np.float32)
    return np.ldexp(np.float32(1.0), e)


class _Ref:
    """A tensor flattened, with what comparisons against it need (each computed once, when first asked)."""

    def __init__(self, ref: np.ndarray, fmt: Format):
        self.fmt = fmt
        self.r = np.asarray(ref, dtype=np.float32).ravel()
        self.finite = np.isfinite(self.r)
        self.all_finite = bool(self.finite.all())
        self._cache: dict[str, np.ndarray | float] = {}

    @property
    def rb(self) -> np.ndarray:
        """The finite elements."""
        return self.r if self.all_finite else self.r[self.finite]

    def _get(self, key: str, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def inv_floor(self) -> np.ndarray:
        """1 / max(|ref|, smallest normal) of the finite elements."""
        return self._get("inv_floor", lambda: 1.0 / np.maximum(np.abs(self.rb), np.float32(self.fmt.smallest_normal)))

    @property
    def inv_ulp(self) -> np.ndarray:
        return self._get("inv_ulp", lambda: 1.0 / ulp(self.rb, self.fmt))

    @property
    def norm(self) -> float:
        return self._get("norm", lambda: _norm(self.rb))


def _norm(a: np.ndarray) -> float:
    """The L2 norm of a float32 vector, in float32 where its square sum cannot overflow."""
    if not a.size:
        return 0.0
    m = float(np.abs(a).max())
    if m * m * a.size < 1e37:
        return float(np.sqrt(np.dot(a, a)))
    return float(np.linalg.norm(a.astype(np.float64)))


def error_stats(out: np.ndarray, ref: np.ndarray | _Ref, fmt: Format, only: str | None = None) -> dict:
    """Error of `out` against `ref`: max abs, max relative (|ref| floored at the smallest normal),
    max in units of the format's spacing at ref, relative L2, and new non-finite elements
    (`only`: just that statistic and the non-finite count)."""
    R = ref if isinstance(ref, _Ref) else _Ref(ref, fmt)
    o = np.asarray(out, dtype=np.float32).ravel()
    fin_o = np.isfinite(o)
    nonfinite = int(np.count_nonzero(~fin_o & R.finite))
    keep = None
    if R.all_finite and nonfinite == 0 and fin_o.all():
        d = np.abs(o - R.r)
    else:  # elements where either side is not finite are counted above, not measured
        both = fin_o & R.finite
        keep = both[R.finite]
        d = np.abs(o[both] - R.r[both])
    pick = (lambda a: a) if keep is None else (lambda a: a[keep])
    stats = {"max_abs": 0.0, "max_rel": 0.0, "max_ulp": 0.0, "rel_l2": 0.0}
    if d.size:
        want = stats if only is None else {only: 0.0}
        if "max_abs" in want:
            stats["max_abs"] = float(d.max())
        if "max_rel" in want:
            stats["max_rel"] = float((d * pick(R.inv_floor)).max())
        if "max_ulp" in want:
            stats["max_ulp"] = float((d * pick(R.inv_ulp)).max())
        if "rel_l2" in want:
            dn = _norm(d)
            stats["rel_l2"] = dn / R.norm if R.norm > 0 else float(dn > 0)
    if only is not None:
        stats = {only: stats[only]}
    return {**stats, "nonfinite": nonfinite}


def agreement(a: np.ndarray, b: np.ndarray | _Ref, fmt: Format) -> dict:
    """How closely `a` reproduces `b`: the share of elements equal bit for bit (NaN equals NaN) and the
    largest difference in units of the format's spacing at b (inf where only one side is finite)."""
    B = b if isinstance(b, _Ref) else _Ref(b, fmt)
    x = np.asarray(a, dtype=np.float32).ravel()
    y = B.r
    if not y.size:
        return {"exact": 1.0, "max_ulp_diff": 0.0}
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    fin_x = np.isfinite(x)
    if B.all_finite and fin_x.all():
        diff = np.abs(x - y) * B.inv_ulp
    else:
        both = fin_x & B.finite
        diff = np.abs(x[both] - y[both]) * B.inv_ulp[both[B.finite]]
    worst = float(diff.max()) if diff.size else 0.0
    if np.any(~same & ~(fin_x & B.finite)):
        worst = float("inf")
    return {"exact": float(np.count_nonzero(same) / y.size), "max_ulp_diff": worst}


def ratio(gpu: float, emu: float) -> float:
    """gpu / emu, 1 when both are 0, inf when only the emulator's is 0."""
    if emu == 0:
        return 1.0 if gpu == 0 else float("inf")
    return gpu / emu


def _all_samples(store: ActivationStore, run: str, t: str) -> np.ndarray:
    return np.asarray(store.dataset(run, t)[()])


def node_rows(
    store: ActivationStore,
    model: Model,
    fmt: Format,
    labels: Sequence[str],
    metric: str = "max_abs",
    forced: set[str] | None = None,
    placement: dict[str, str] | None = None,
    lowp_labels: Sequence[str] = (),
    fused: dict[str, str] | None = None,
) -> list[dict]:
    """One row per candidate node measured in `gpu_local`: its worst floating output's error in the
    provider's run and in each emulator run `labels` that holds it (`standard` holds every node), the
    ratio provider/emulator of `metric`, whether the ratio is a mismatch, the agreement of each
    emulator run with the provider, and with `lowp_labels` the same errors in the all-low-precision
    graphs (`gpu_lowp` against `lowp__<label>`: propagated error, not local)."""
    rows = []
    for info in model.candidates:
        outs = [t for t in info.float_outputs if store.has(GPU_LOCAL, t) and store.has(REFERENCE, t)]
        if not outs:
            continue
        per_out = []
        for t in outs:
            ref_arr = _all_samples(store, REFERENCE, t)
            ref = _Ref(ref_arr, fmt)
            gpu = _all_samples(store, GPU_LOCAL, t)
            entry = {"gpu": error_stats(gpu, ref, fmt), "emulated": {}, "agree": {}}
            gpu_ref = _Ref(gpu, fmt)
            for label in labels:
                run = run_name(LOCAL, label)
                if store.has(run, t):
                    emu = _all_samples(store, run, t)
                    entry["emulated"][label] = error_stats(emu, ref, fmt)
                    entry["agree"][label] = agreement(emu, gpu_ref, fmt)
            lowp = {}
            if store.has(GPU_LOWP, t):
                lowp["gpu"] = error_stats(_all_samples(store, GPU_LOWP, t), ref, fmt, metric)[metric]
                for label in lowp_labels:
                    if store.has(run_name("lowp", label), t):
                        lowp[label] = error_stats(_all_samples(store, run_name("lowp", label), t), ref, fmt, metric)[metric]
            entry["lowp"] = lowp
            per_out.append((entry["gpu"][metric], t, ref_arr.size // max(ref_arr.shape[0], 1), entry))
        _, t, numel, worst = max(per_out, key=lambda x: x[0])
        ratios = {k: ratio(worst["gpu"][metric], v[metric]) for k, v in worst["emulated"].items()}
        rows.append({
            "node": info.name, "op_type": info.op_type, "group": (fused or {}).get(info.name, info.op_type),
            "output": t, "numel": numel,
            "forced_fp32": bool(forced and info.name in forced),
            "provider": (placement or {}).get(info.name),
            "gpu": worst["gpu"], "emulated": worst["emulated"], "ratio": ratios,
            "mismatch": {k: not (MISMATCH[0] <= r <= MISMATCH[1]) for k, r in ratios.items()},
            "agree": worst["agree"], "lowp": worst["lowp"],
        })
    return rows


def effective(row: dict, label: str, key: str):
    """A row's `key` ('ratio', 'agree', 'emulated', 'mismatch') under rules `label`: that run where it
    holds the node, else the standard rule's (a rule that does not apply leaves the node standard)."""
    table = row[key]
    return table.get(label, table.get(STANDARD))


def by_op(rows: Sequence[dict], labels: Sequence[str]) -> dict[str, dict]:
    """Per op type (or fusion, for fused anchors) and rules label: nodes, nodes the label changes, ratio
    median/min/max, mismatches, median and minimum share of bit-exact elements, largest difference in
    units of the spacing."""
    out: dict[str, dict] = {}
    group = lambda r: r.get("group", r["op_type"])  # noqa: E731  an op type, or a fusion's name
    for op in sorted({group(r) for r in rows}):
        mine = [r for r in rows if group(r) == op and not r["forced_fp32"]]
        entry: dict = {"nodes": len(mine), "forced_fp32": sum(r["forced_fp32"] for r in rows if group(r) == op)}
        for label in labels:
            vals = [(effective(r, label, "ratio"), effective(r, label, "agree")) for r in mine]
            vals = [(x, a) for x, a in vals if x is not None]
            if not vals:
                continue
            ratios = np.array([x for x, _ in vals], dtype=np.float64)
            exact = np.array([a["exact"] for _, a in vals])
            entry[label] = {
                "applied": sum(label in r["ratio"] for r in mine),
                "ratio_median": float(np.median(ratios)),
                "ratio_min": float(ratios.min()),
                "ratio_max": float(ratios.max()),
                "mismatches": int(np.count_nonzero((ratios < MISMATCH[0]) | (ratios > MISMATCH[1]))),
                "exact_median": float(np.median(exact)),
                "exact_min": float(exact.min()),
                "max_ulp_diff": float(max(a["max_ulp_diff"] for _, a in vals)),
            }
        out[op] = entry
    return out
