"""Mark-all capture streamed into HDF5, in bounded groups so memory does not grow with the model.

Three runs are written (see `activations`): the FP32 reference, the emulated low-precision run for a
fallback set, and each node's local output (low precision on exact reference inputs). Each group
of tensors gets its own session whose graph outputs are only that group, so ONNX Runtime never
holds more than one group's outputs at once.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
from onnx import helper

from precision_doctor import __version__
from precision_doctor.control import CaptureEvent, ProgressSink, StopToken, check, notify
from precision_doctor.data.activations import LOCAL, LOWP, REFERENCE, ActivationStore
from precision_doctor.data.inputs import Sample
from precision_doctor.data.samples import ShapeGroup, groups_of, release_heap
from precision_doctor.graph.emulate import MASK_INPUT, gated_graph, local_graph, local_output
from precision_doctor.graph.formats import Format
from precision_doctor.graph.model import Model, NodeInfo
from precision_doctor.graph.ort_session import make_session, run_session, with_outputs
from precision_doctor.graph.rules import resolve_rules

_UNKNOWN_BYTES = 1 << 20


def tensor_bytes(model: Model, name: str) -> int:
    shape = model.tensor_shapes.get(name)
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


def capture(
    model: Model,
    samples: Sequence[Sample],
    fmt: Format,
    out_path: Path,
    fallback: frozenset[str] = frozenset(),
    *,
    group_mb: float,
    compression: str | None,
    attrs: dict | None = None,
    progress: ProgressSink | None = None,
    stop: StopToken | None = None,
    rules: str | None = None,
) -> Path:
    """Capture reference, low-precision and local runs of `model` on `samples` into `out_path`, the
    low-precision ones under the emulation `rules` (`backends.rules`; None: standard), in groups of tensors of at
    most `group_mb` MiB (`capture.group_mb`), stored with HDF5's `compression` (`capture.compression`). The samples of
    one shape group must be consecutive (`data.samples.grouped` orders them so)."""
    budget = int(group_mb * (1 << 20))
    groups = shape_runs(samples)
    node_outputs = [t for n in model.nodes for t in n.outputs if t]
    float_outputs = [t for t in node_outputs if model.is_float(t)]
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
            rules=resolve_rules(rules).label,
            folded=resolve_rules(rules).folded(model, fmt),  # the analysis ranks a folded node as what runs
            **(attrs or {}),
        )
        store.set_shape_groups([(g.as_dict(), n) for g, n in groups])
        for i, s in enumerate(samples):
            for name, value in s.items():
                store.write(REFERENCE, name, i, len(samples), value)
        capture_run(store, REFERENCE, model.proto, model, node_outputs, samples, {}, budget, progress, stop)
        gated = gated_graph(model, fmt, rules=rules)
        mask = {MASK_INPUT: gated.mask(fallback)}
        capture_run(store, LOWP, gated.proto, model, float_outputs, samples, mask, budget, progress, stop)
        capture_local(store, model, fmt, samples_n=len(samples), budget=budget, progress=progress, stop=stop,
                      rules=rules)
    return out_path


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


def capture_local(
    store: ActivationStore,
    model: Model,
    fmt: Format,
    samples_n: int,
    budget: int,
    progress: ProgressSink | None = None,
    stop: StopToken | None = None,
    rules: str | None = None,
) -> None:
    """Each candidate node computed in low precision from the stored exact reference inputs (under the
    emulation `rules`: at a fusion site, the fused kernel from the pattern's exact inputs)."""
    nodes = model.candidates
    groups = group_by_bytes(nodes, lambda n: _node_bytes(model, n), budget)
    done = 0
    for group in groups:
        proto, feeds = local_graph(model, fmt, group, rules)
        sess = make_session(proto, optimize=False)
        outputs = [o.name for o in proto.graph.output]
        with Batches(store, LOCAL, [_strip_local(o) for o in outputs], samples_n, budget) as out:
            for i in range(samples_n):
                check(stop)
                feed = {t: store.read(REFERENCE, t, i) for t in feeds}
                out.add(i, run_session(sess, outputs, feed, model))
        del sess
        done += len(group)
        notify(progress, CaptureEvent(LOCAL, done, len(nodes)))


def _strip_local(name: str) -> str:
    suffix = local_output("")
    return name[: -len(suffix)] if name.endswith(suffix) else name
