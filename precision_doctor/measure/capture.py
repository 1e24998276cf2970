"""The capture: the FP32 reference, the emulated low-precision run for a fallback set and each node's local output (low
precision on exact reference inputs), streamed in bounded groups so that memory does not grow with the model and
the file does not grow with the model times the samples.

`capture` measures every tensor's error statistics while the runs execute, one sample and one group of layers at a
time (`run_groups`: each run is a chain of one segment per group, `measure/chain.py`, so the model is computed once
per sample and run), and writes only the tensors asked for (the graph outputs; every one with `capture.keep` all).
`store_tensors` writes more of them afterwards (the top layers of the ranking), `local_errors` gives nodes' local
errors without writing anything. `run_in_groups`, `capture_run` and `Batches` write whole runs group by group
(`probe-ops`, the fixed run under `capture.keep` all).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import helper

from precision_doctor import __version__
from precision_doctor.control import CaptureEvent, ProgressSink, StopToken, check, notify
from precision_doctor.data.activations import LOCAL, LOWP, REFERENCE, ActivationStore
from precision_doctor.data.inputs import Sample
from precision_doctor.data.samples import ShapeGroup, groups_of, release_heap
from precision_doctor.errors import UserError
from precision_doctor.graph.emulate import MASK_INPUT, GatedGraph, gated_graph, local_graph, local_output
from precision_doctor.graph.formats import Format
from precision_doctor.graph.model import Model, NodeInfo
from precision_doctor.graph.ort_session import GpuRunError, make_session, run_session, shrinking_gpu_arena, with_outputs
from precision_doctor.graph.rules import resolve_rules
from precision_doctor.measure.accumulate import StepAdder
from precision_doctor.measure.chain import Chain, plan_chain
from precision_doctor.measure.stats import ErrorStats, TensorAccumulator, TensorStats

_UNKNOWN_BYTES = 1 << 20


def tensor_bytes(model: Model, name: str, shape: Sequence[int | None] | None = None) -> int:
    """One sample's bytes of tensor `name`, at `shape` (None: the model's own, inferred; _UNKNOWN_BYTES where unknown)."""
    shape = model.tensor_shapes.get(name) if shape is None else shape
    elem = model.tensor_types.get(name)
    if shape is None or elem is None or any(d is None for d in shape):
        return _UNKNOWN_BYTES
    try:
        itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(elem)).itemsize
    except (KeyError, TypeError):
        itemsize = 4
    return int(np.prod(shape, dtype=np.int64)) * itemsize


def group_by_bytes(items: Sequence, size: Callable[[object], int], budget: int) -> list[list]:
    """Consecutive groups whose sizes sum to at most `budget` (an oversized item is its own group)."""
    groups: list[list] = []
    cur: list = []
    total = 0
    for it in items:
        b = size(it)
        if cur and total + b > budget:
            groups.append(cur)
            cur, total = [], 0
        cur.append(it)
        total += b
    if cur:
        groups.append(cur)
    return groups


def run_in_groups(
    proto, model: Model, names: list[str], samples: Sequence[Sample], extra_feed: dict[str, np.ndarray], budget: int,
    run: str, progress: ProgressSink | None = None, stop: StopToken | None = None,
) -> Iterator[tuple[list[str], Iterator[tuple[int, list[np.ndarray]]]]]:
    """`proto` run on every sample, a bounded group of the tensors `names` at a time (one session each, whose graph
    outputs are only that group): yields each group and an iterator of (sample index, the group's values); a
    CaptureEvent of `run` once a group's samples are consumed."""
    done = 0
    for group in group_by_bytes(names, lambda t: tensor_bytes(model, t), budget):
        sess = make_session(with_outputs(proto, group, model.tensor_types), optimize=False)

        def runs(sess=sess, group=group) -> Iterator[tuple[int, list[np.ndarray]]]:
            for i, s in enumerate(samples):
                check(stop)
                yield i, run_session(sess, group, {**s, **extra_feed}, model)

        yield group, runs()
        del sess
        release_heap()  # between groups: glibc keeps freed heap otherwise (see BENCHMARKS)
        done += len(group)
        notify(progress, CaptureEvent(run, done, len(names)))


def capture_run(
    store: ActivationStore,
    run: str,
    proto,
    model: Model,
    names: list[str],
    samples: Sequence[Sample],
    extra_feed: dict[str, np.ndarray],
    budget: int,
    progress: ProgressSink | None = None,
    stop: StopToken | None = None,
) -> None:
    """Run `proto` on every sample, a bounded group of the tensors `names` at a time, into `store`'s `run`."""
    for group, runs in run_in_groups(proto, model, names, samples, extra_feed, budget, run, progress, stop):
        with Batches(store, run, group, len(samples), budget) as out:
            for i, values in runs:
                out.add(i, values)


class Batches:
    """The outputs of consecutive samples for `names`, held until they reach `budget` bytes (at most one sample's
    beyond), then written to `store`'s `run` in one write per tensor (`ActivationStore.write_many`); the rest on
    leaving the `with` block normally."""

    def __init__(self, store: ActivationStore, run: str, names: list[str], n_samples: int, budget: int):
        self.store, self.run, self.names, self.n_samples, self.budget = store, run, names, n_samples, budget
        self.first, self.held, self.nbytes = 0, [], 0

    def add(self, sample: int, values: Sequence[np.ndarray]) -> None:
        if not self.held:
            self.first = sample
        self.held.append(list(values))
        self.nbytes += sum(np.asarray(v).nbytes for v in values)
        if self.nbytes >= self.budget:
            self.flush()

    def flush(self) -> None:
        for k, name in enumerate(self.names):
            self.store.write_many(self.run, name, self.first, self.n_samples, [vals[k] for vals in self.held])
        self.held, self.nbytes = [], 0

    def __enter__(self) -> Batches:
        return self

    def __exit__(self, kind, *_) -> None:
        if kind is None and self.held:
            self.flush()


def shape_runs(samples: Sequence[Sample]) -> list[tuple[ShapeGroup, int]]:
    """The shape groups of `samples` with their sizes, in order; each group must be one run of consecutive
    samples."""
    groups = groups_of(samples)
    for g, idx in groups.items():
        if idx[-1] - idx[0] + 1 != len(idx):
            raise ValueError(f"the samples of shape group {g} are not consecutive: order them with data.samples.grouped")
    return [(g, len(idx)) for g, idx in sorted(groups.items(), key=lambda kv: kv[1][0])]


def _node_bytes(model: Model, node: NodeInfo) -> int:
    return sum(tensor_bytes(model, t) for t in node.inputs + node.outputs if t and t not in model.initializers)


# -- the streaming capture ---------------------------------------------------------------------------------------

DEVICES = ("auto", "cpu", "cuda")  # capture.device
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


def capture_providers(device: str) -> list:
    """ONNX Runtime's providers for the capture's sessions on `device` (`capture.device`): `cpu`; `cuda` (true FP32:
    no TF32, heuristic convolution algorithms; ops without a CUDA kernel on the CPU); `auto`: `cuda` where a CUDA GPU
    runs (`backends.registry.cuda_machine`), else `cpu`. UserError for `cuda` where there is none."""
    from precision_doctor.backends.registry import cuda_machine

    if device == "cpu" or (device == "auto" and not cuda_machine()):
        return [CPU]
    if not cuda_machine():
        raise UserError("capture.device cuda: ONNX Runtime has no working CUDA provider here (onnxruntime-gpu and a "
                        "CUDA GPU are needed); use auto or cpu")
    return [(CUDA, {"use_tf32": "0", "cudnn_conv_algo_search": "HEURISTIC"}), CPU]


def device_of(providers: Sequence) -> str:
    """"cuda" or "cpu": where sessions with `providers` compute."""
    return "cuda" if any((p[0] if isinstance(p, tuple) else p) == CUDA for p in providers) else "cpu"


@dataclass(frozen=True)
class RunGroup:
    """One bounded group of what the runs compute: the FP32 tensors (`reference`), the low-precision run's (`lowp`,
    floating tensors) and the nodes computed alone in low precision from exact FP32 inputs (`local`: candidates).
    Graph inputs come from the sample, never from a session."""

    reference: tuple[str, ...]
    lowp: tuple[str, ...] = ()
    local: tuple[NodeInfo, ...] = ()


@dataclass(frozen=True)
class SampleValues:
    """One sample's values of one `RunGroup`, by tensor name: the reference run's (with the graph inputs), the
    low-precision run's and the local run's (by the node output they stand for)."""

    index: int
    reference: dict[str, np.ndarray]
    lowp: dict[str, np.ndarray]
    local: dict[str, np.ndarray]


def layer_groups(model: Model, nodes: Sequence[NodeInfo], budget: int, lowp: bool = True,
                 local: bool = True) -> list[RunGroup]:
    """`nodes` in consecutive groups whose FP32 values of one sample (each tensor a group's nodes read or write,
    initializers aside, counted once) take at most `budget` bytes (a node over it is a group of its own), each a
    RunGroup of their outputs (and, with `lowp`, their floating outputs in the low-precision run; with `local`,
    their candidates computed alone). The low-precision and local runs' values of the group come on top (up to
    about 3x the budget in all): every group's sessions compute the model up to its tensors again, so fewer, larger
    groups cost less time."""
    groups: list[list[NodeInfo]] = []
    seen: set[str] = set()
    total = 0
    for n in nodes:
        new = {t for t in n.inputs + n.outputs if t and t not in model.initializers} - seen
        size = sum(tensor_bytes(model, t) for t in new)
        if groups and groups[-1] and total + size > budget:
            groups.append([])
            seen, total = set(), 0
            new = {t for t in n.inputs + n.outputs if t and t not in model.initializers}
            size = sum(tensor_bytes(model, t) for t in new)
        if not groups:
            groups.append([])
        groups[-1].append(n)
        seen |= new
        total += size
    return [RunGroup(tuple(t for n in g for t in n.outputs if t),
                     tuple(t for n in g for t in n.float_outputs) if lowp else (),
                     tuple(n for n in g if n.is_candidate) if local else ()) for g in groups]


# A capture's failure on the GPU: every layer group's sessions are alive there at once
CAPTURE_ON_GPU = ("in the capture, whose sessions hold every layer group on the GPU at once, the GPU may be out of "
                  "memory or busy with other processes: run again with --capture-device cpu (the capture on the "
                  "CPU; the search and its checks stay on the GPU), or with the GPU to itself")


def run_groups(
    model: Model, samples: Sequence[Sample], fmt: Format, groups: Sequence[RunGroup], *,
    fallback: frozenset[str] = frozenset(), rules: str | None = None, providers: Sequence = (CPU,), stage: str,
    progress: ProgressSink | None = None, stop: StopToken | None = None, gated: GatedGraph | None = None,
) -> Iterator[tuple[int, SampleValues]]:
    """`_run_groups`; a failure of ONNX Runtime's CUDA provider says what to do in a capture (`CAPTURE_ON_GPU`)."""
    try:
        yield from _run_groups(model, samples, fmt, groups, fallback=fallback, rules=rules, providers=providers,
                               stage=stage, progress=progress, stop=stop, gated=gated)
    except GpuRunError as exc:
        raise exc.elsewhere(CAPTURE_ON_GPU) from None


def _run_groups(
    model: Model, samples: Sequence[Sample], fmt: Format, groups: Sequence[RunGroup], *,
    fallback: frozenset[str] = frozenset(), rules: str | None = None, providers: Sequence = (CPU,), stage: str,
    progress: ProgressSink | None = None, stop: StopToken | None = None, gated: GatedGraph | None = None,
) -> Iterator[tuple[int, SampleValues]]:
    """The FP32, low-precision (the emulation `rules` with `fallback` in FP32) and local runs of `model` on every
    sample, each run a chain (`measure/chain.py`) of one segment per `RunGroup`: a segment's graph outputs are its
    group's tensors and what later segments read, so each run computes the model once per sample and no more than
    one sample's values of one group (and the tensors still to be read) are held at once. Yields, sample by sample
    and each group in turn, the group's index and its values; a `CaptureEvent` of `stage` after each segment's
    session is made and after each group of each sample. `gated`: `gated_graph(model, fmt, rules=rules)` where
    already made (seconds for a large model)."""
    inputs = set(model.inputs) | (set(samples[0]) if len(samples) else set())
    if gated is None and any(g.lowp for g in groups):
        gated = gated_graph(model, fmt, rules=rules)
    mask = {MASK_INPUT: gated.mask(fallback)} if gated is not None else {}
    total, done = len(groups) * len(samples), 0

    def made(proto) -> ort.InferenceSession:
        sess = make_session(proto, providers, optimize=False, shrinkable=device_of(providers) == "cuda")
        notify(progress, CaptureEvent(stage, done, total))  # a large model's session takes seconds to make
        return sess

    local_runs: list[tuple | None] = []  # per group: its local session, outputs, feeds and run options
    for g in groups:  # one local graph at a time: each holds its nodes' rounded weights until its session has them
        p, feeds = local_graph(model, fmt, list(g.local), rules) if g.local else (None, [])
        sess = made(p) if p is not None else None
        local_runs.append(None if sess is None else (sess, [o.name for o in p.graph.output], feeds,
                                                     shrinking_gpu_arena(sess)))
        del p
    ref_targets = [list(dict.fromkeys([*g.reference, *(r[2] if r else [])])) for g, r in zip(groups, local_runs)]
    lowp_targets = [[t for t in g.lowp if t not in inputs] for g in groups]
    carried = model.tensor_types
    ref = Chain(model.lean_proto(), plan_chain(model.proto, ref_targets, carried), carried, made)
    lowp = (Chain(gated.proto, plan_chain(gated.proto, lowp_targets, carried), carried, made)
            if gated is not None and any(lowp_targets) else None)
    for i, s in enumerate(samples):
        check(stop)
        lowp_values = lowp.run({**s, **mask}, model) if lowp is not None else None
        for k, values in enumerate(ref.run(s, model)):
            reference = {**s, **values}
            low = next(lowp_values) if lowp_values is not None else {}
            local = {}
            if local_runs[k] is not None:
                sess, outs, feeds, options = local_runs[k]
                local = {_strip_local(o): v for o, v in
                         zip(outs, run_session(sess, outs, {t: reference[t] for t in feeds}, model, options))}
            yield k, SampleValues(i, reference, low, local)
            del reference, low, local, values
            done += 1
            notify(progress, CaptureEvent(stage, done, total))
        release_heap()  # between samples: glibc keeps freed heap otherwise (see BENCHMARKS)


Stored = Mapping[str, "frozenset[str] | None"]  # run -> the tensors written to the store (None: every one)


def capture(
    model: Model,
    samples: Sequence[Sample],
    fmt: Format,
    out_path: Path,
    fallback: frozenset[str] = frozenset(),
    *,
    group_mb: float,
    compression: str | None,
    stored: Stored | None = None,
    kept: str | None = None,
    attrs: dict | None = None,
    progress: ProgressSink | None = None,
    stop: StopToken | None = None,
    rules: str | None = None,
    providers: Sequence = (CPU,),
    gated: GatedGraph | None = None,
) -> dict[str, TensorStats]:
    """Capture the reference, low-precision and local runs of `model` on `samples` into the store `out_path`,
    streaming: each tensor's statistics (`measure/stats.TensorStats`, kept in the store: `analysis.keep_stats`) are
    accumulated as the runs execute, a group of layers of at most `group_mb` MiB (`capture.group_mb`) and one sample
    at a time, and only the tensors `stored` names per run are written (None: every one; default: the graph
    outputs), with HDF5's `compression`; `kept` says which in the store's attribute `kept` (`capture.keep`'s label;
    None: "all" where every tensor is stored, else "top:0").
    The low-precision runs follow the emulation `rules` (`backends.rules`; None: standard) with `fallback` in FP32
    (`gated`: their graph, where already made).
    The samples of one shape group must be consecutive (`data.samples.grouped` orders them so). Returns the
    statistics; a `CaptureEvent` ("statistics") after each sample of each group."""
    from precision_doctor.measure.analysis import keep_stats, roles

    budget = int(group_mb * (1 << 20))
    shape_groups = shape_runs(samples)
    if stored is None:
        outputs = frozenset(model.outputs)
        stored = {REFERENCE: outputs, LOWP: outputs, LOCAL: outputs}
    if kept is None:
        kept = "all" if all(stored.get(run, frozenset()) is None for run in (REFERENCE, LOWP, LOCAL)) else "top:0"
    ruleset = resolve_rules(rules)
    with ActivationStore(out_path, "w", compression=compression) as store:
        store.set_attrs(
            model_hash=model.model_hash,
            model_path=str(model.path or ""),
            precision=fmt.name,
            fallback=sorted(fallback),
            samples=len(samples),
            created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            tool_version=__version__,
            nodes=model.node_records(),
            model_outputs=model.outputs,
            inputs=[{"name": k, "shape": list(v.shape), "dtype": str(v.dtype)} for k, v in samples[0].items()],
            rules=ruleset.label,
            folded=ruleset.folded(model, fmt),  # the analysis ranks a folded node as what runs
            device=device_of(providers),
            kept=kept,
            **(attrs or {}),
        )
        store.set_shape_groups([(g.as_dict(), n) for g, n in shape_groups])
        records = model.node_records()
        graph_inputs = list(samples[0])
        captured = set(graph_inputs) | {t for n in model.nodes for t in n.outputs if t}
        accs = {t: TensorAccumulator(fmt, lowp=lo, local=lc, absmax=a) for t, (lo, lc, a) in roles(records, captured).items()}
        shapes = _Shapes([n for _, n in shape_groups])
        with _Writer(store, REFERENCE, [t for t in graph_inputs if _stores(stored, REFERENCE, t)], len(samples),
                     budget) as out:
            for i, s in enumerate(samples):
                check(stop)
                shapes.add(i, s)
                for t, v in s.items():
                    if t in accs:
                        accs[t].add(v)
                out.add(i, s)
        groups = layer_groups(model, model.nodes, budget)
        names = [{run: [t for t in tensors if _stores(stored, run, t)] for run, tensors in
                  ((REFERENCE, g.reference), (LOWP, g.lowp), (LOCAL, [t for n in g.local for t in n.float_outputs]))}
                 for g in groups]
        with _GroupWriters(store, names, len(samples), budget) as out, StepAdder() as adder:
            for k, v in run_groups(model, samples, fmt, groups, fallback=fallback, rules=rules, providers=providers,
                                   stage="statistics", progress=progress, stop=stop, gated=gated):
                shapes.add(v.index, {t: v.reference[t] for t in groups[k].reference})
                adder.start([(v.reference[t].size, partial(accs[t].add, v.reference[t], v.lowp.get(t), v.local.get(t)))
                             for t in groups[k].reference if t in accs and accs[t].needed])
                out.add(k, v)  # the store's writes while the statistics are summed, and the next step's run
        stats = {t: acc.result() for t, acc in accs.items()}
        keep_stats(store, stats)
        store.set_shapes(shapes.shapes)
    return stats


def store_tensors(
    path: Path, model: Model, samples: Sequence[Sample], fmt: Format, tensors: Mapping[str, Sequence[str]], *,
    group_mb: float, compression: str | None, fallback: frozenset[str] = frozenset(), rules: str | None = None,
    providers: Sequence = (CPU,), progress: ProgressSink | None = None, stop: StopToken | None = None,
    gated: GatedGraph | None = None, max_bytes: int | None = None,
) -> int:
    """Write `tensors` (run -> tensor names: `reference`, `lowp`, `local`) into the capture at `path` (with HDF5's
    `compression`), computed again for them alone: what a summary keeps beyond the statistics (the top layers of the
    ranking, the tensors a user names). A `CaptureEvent` ("tensors") after each sample of each group. With
    `max_bytes`, a sample starts only where it would fit in that many bytes with those before it, as large as their
    average (the first always runs). Returns how many samples were written (the store's `tensors_samples` too)."""
    budget = int(group_mb * (1 << 20))
    producers = model.producers()
    ref = [t for t in tensors.get(REFERENCE, ())]
    lowp = [t for t in tensors.get(LOWP, ()) if t in producers and model.is_float(t)]  # computed, floating
    local_nodes = list(dict.fromkeys(producers[t].name for t in tensors.get(LOCAL, ()) if t in producers))
    local = [model.node(n) for n in local_nodes if model.node(n).is_candidate]
    items = [("t", t) for t in dict.fromkeys(ref + lowp)] + [("n", n) for n in local]
    size = {"t": lambda t: tensor_bytes(model, t), "n": lambda n: _node_bytes(model, n)}
    groups = [RunGroup(tuple(t for k, t in g if k == "t" and t in ref), tuple(t for k, t in g if k == "t" and t in lowp),
                       tuple(n for k, n in g if k == "n"))
              for g in group_by_bytes(items, lambda it: size[it[0]](it[1]), budget)]
    names = [{REFERENCE: list(g.reference), LOWP: list(g.lowp),
              LOCAL: [t for n in g.local for t in n.float_outputs if t in tensors.get(LOCAL, ())]} for g in groups]
    written, done = 0, len(samples)
    with ActivationStore(path, "a", compression=compression) as store, \
            _GroupWriters(store, names, len(samples), budget) as out:
        steps = run_groups(model, samples, fmt, groups, fallback=fallback, rules=rules, providers=providers,
                           stage="tensors", progress=progress, stop=stop, gated=gated)
        for k, v in steps:
            out.add(k, v)
            runs = {REFERENCE: v.reference, LOWP: v.lowp, LOCAL: v.local}
            written += sum(runs[run][t].nbytes for run, ts in names[k].items() for t in ts if t in runs[run])
            if (max_bytes is not None and k == len(groups) - 1 and v.index + 1 < len(samples)
                    and written + written / (v.index + 1) > max_bytes):  # the next sample would not fit
                done = v.index + 1
                steps.close()
                break
        store.file.attrs["tensors_samples"] = done
    return done


def local_errors(
    model: Model, fmt: Format, samples: Sequence[Sample], *, rules: str | None = None, nodes: Sequence[str] | None = None,
    group_mb: float = 256.0, providers: Sequence = (CPU,), progress: ProgressSink | None = None,
    stop: StopToken | None = None,
) -> dict[str, ErrorStats]:
    """Each candidate node's local error on `samples`: the node alone in low precision (format `fmt`, emulation
    `rules`; at a fusion site the fused kernel), fed the exact FP32 inputs, against its FP32 output, over every
    sample (the worst of its floating outputs, by relative L2 error: a layer table's `local_*` columns; the numbers
    the capture computes for the same samples, tests/measure/test_streaming_capture.py). For attributing a failing sample's
    error to nodes: e.g. `local_errors(model, fmt, [failing], rules=spec.backends.rules)`, then the nodes whose
    local error on it is largest.

    `nodes`: only these (candidate names; None: every candidate). Streaming: the FP32 run marks a bounded group of
    layers at a time (`group_mb`) and nothing is written; memory holds one sample's values of one group. The FP32
    run is needed whatever references are known: a node's exact inputs are interior tensors, which a model's
    output references do not give. `providers`: `capture_providers(device)`. A `CaptureEvent` ("local") after each
    sample of each group; `stop` is checked before each sample. Returns {node name: ErrorStats}."""
    return _local_errors(model, fmt, samples, lambda i: 0, 1, rules=rules, nodes=nodes, group_mb=group_mb,
                         providers=providers, progress=progress, stop=stop)[0]


def local_errors_each(
    model: Model, fmt: Format, samples: Sequence[Sample], *, rules: str | None = None, nodes: Sequence[str] | None = None,
    group_mb: float = 256.0, providers: Sequence = (CPU,), progress: ProgressSink | None = None,
    stop: StopToken | None = None,
) -> list[dict[str, ErrorStats]]:
    """`local_errors` of each sample on its own (one entry per sample, in order), in one pass: the chain's sessions
    are made once for all of them (seconds each for a large model)."""
    return _local_errors(model, fmt, samples, lambda i: i, len(samples), rules=rules, nodes=nodes, group_mb=group_mb,
                         providers=providers, progress=progress, stop=stop)


def _local_errors(
    model: Model, fmt: Format, samples: Sequence[Sample], slot: Callable[[int], int], slots: int, *,
    rules: str | None, nodes: Sequence[str] | None, group_mb: float, providers: Sequence,
    progress: ProgressSink | None, stop: StopToken | None,
) -> list[dict[str, ErrorStats]]:
    """The local errors summed into `slots` sets of accumulators, sample `i` into `slot(i)`."""
    wanted = model.candidates if nodes is None else [model.node(n) for n in nodes]
    wanted = [n for n in wanted if n.is_candidate]
    accs = [{t: TensorAccumulator(fmt, local=True, rounding=False)  # the local error only: what attribution reads
             for n in wanted for t in n.float_outputs} for _ in range(slots)]
    groups = [RunGroup(tuple(t for n in g.local for t in n.float_outputs), (), g.local)
              for g in layer_groups(model, wanted, int(group_mb * (1 << 20)), lowp=False)]
    with StepAdder() as adder:
        for _, v in run_groups(model, samples, fmt, groups, rules=rules, providers=providers, stage="local",
                               progress=progress, stop=stop):
            mine = accs[slot(v.index)]
            adder.start([(value.size, partial(mine[t].add, v.reference[t], local=value))
                         for t, value in v.local.items() if t in mine])
    out = []
    for acc in accs:
        errors = {}
        for n in wanted:
            stats = [acc[t].result().local for t in n.float_outputs]
            errors[n.name] = max(stats, key=lambda s: (s.rel_l2, s.max_abs)) if stats else ErrorStats()
        out.append(errors)
    return out


def _stores(stored: Stored, run: str, tensor: str) -> bool:
    names = stored.get(run, frozenset())
    return names is None or tensor in names


class _Shapes:
    """Each tensor's one-sample shape per shape group (`store.set_shapes`), from the first sample of each group."""

    def __init__(self, sizes: list[int]):
        self.starts = list(np.cumsum([0, *sizes[:-1]]))
        self.shapes: dict[str, list[list[int]]] = {}

    def add(self, sample: int, values: Mapping[str, np.ndarray]) -> None:
        if sample not in self.starts:
            return
        for t, v in values.items():
            self.shapes.setdefault(t, []).append(list(np.shape(v)))


class _Writer(Batches):
    """`Batches` fed whole dicts of values (only its `names` taken)."""

    def add(self, sample: int, values: Mapping[str, np.ndarray]) -> None:  # type: ignore[override]
        if self.names:
            super().add(sample, [values[t] for t in self.names])


class _Writers:
    """One `_Writer` per run of a `RunGroup`'s values: `names` per run."""

    def __init__(self, store: ActivationStore, names: Mapping[str, list[str]], n_samples: int, budget: int):
        self.writers = {run: _Writer(store, run, list(ts), n_samples, budget) for run, ts in names.items()}

    def add(self, v: SampleValues) -> None:
        for run, values in ((REFERENCE, v.reference), (LOWP, v.lowp), (LOCAL, v.local)):
            if run in self.writers:
                self.writers[run].add(v.index, values)

    def __enter__(self) -> _Writers:
        return self

    def __exit__(self, kind, *rest) -> None:
        for w in self.writers.values():
            w.__exit__(kind, *rest)


class _GroupWriters:
    """One `_Writers` per `RunGroup` (`names[k]`: its tensors per run), fed each group's values as a chain yields
    them: each holds up to its share of `budget`, so that all of them together hold about `budget`."""

    def __init__(self, store: ActivationStore, names: Sequence[Mapping[str, list[str]]], n_samples: int, budget: int):
        share = max(budget // max(len(names), 1), 1)
        self.groups = [_Writers(store, n, n_samples, share) for n in names]

    def add(self, k: int, v: SampleValues) -> None:
        self.groups[k].add(v)

    def __enter__(self) -> _GroupWriters:
        return self

    def __exit__(self, kind, *rest) -> None:
        for w in self.groups:
            w.__exit__(kind, *rest)


def _strip_local(name: str) -> str:
    suffix = local_output("")
    return name[: -len(suffix)] if name.endswith(suffix) else name
