"""What a capture writes into activations.h5, known before it starts (`estimate`), and the refusal of one that the run
directory's file system has no room for (`check_room`).

The streaming capture (`measure/capture.py`) stores every tensor's error statistics (JSON: `STATISTICS_BYTES` a node
output, with the kept analysis), and per captured sample the graph outputs of the reference, low-precision and local
runs and the tensors `capture.keep` names (data/keep_plan.py): those of the top layers of the ranking, not known
before the capture, are bounded by the largest layers' (their inputs and outputs in the reference and low-precision
runs, their outputs in the local run), for as many samples as fit in keep_plan.TENSORS_BYTES (the top layers of which
one sample's fit, where not all do); with `all`, the graph inputs and every node output of the reference run, every
floating node output of the low-precision run and the floating outputs of every candidate of the local run. A dataset
per tensor and shape group (`data/activations.py`: a chunk per sample, HDF5's own chunks over 4 MiB, whose edge chunks
are allocated whole; `stored_bytes`). The tensors' shapes are those ONNX shape inference gives at each captured shape
group's input shapes (`graph/cost.shapes_that_ran`, what the cost model prices). A tensor whose shape it cannot follow
(one that depends on the data: Range, NonZero, a Reshape to a computed shape) is counted as large as its largest input
(`guessed`). With `capture.compression` the file is smaller than this. A diagnosis with `capture.keep` all also copies
the file and adds the fixed run to the copy (`pipeline/compare.capture_fixed`): its peak is about twice the capture
(`copied`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from onnx import helper

from precision_doctor import storage
from precision_doctor.data.activations import DATASET_OVERHEAD, LOCAL, LOWP, REFERENCE, stored_bytes
from precision_doctor.data.inputs import Sample
from precision_doctor.data.keep_plan import TENSORS_BYTES, KeepPlan, layer_tensors
from precision_doctor.data.samples import ShapeGroup, groups_of
from precision_doctor.errors import SpecError
from precision_doctor.graph.cost import shapes_that_ran
from precision_doctor.graph.model import Model
from precision_doctor.render.numbers import counted, fmt_decimal_bytes

LARGE_BYTES = 2 << 30  # a capture this large is announced before it starts
STATISTICS_BYTES = 2048  # the statistics, shapes and kept analysis (JSON) per node output, measured: see the docstring
KEEP_FREE_SHARE, KEEP_FREE_MAX = 0.1, 1 << 30  # a capture leaves a tenth of the free space free, at most 1 GiB


@dataclass(frozen=True)
class GroupSize:
    """One shape group of the captured samples: how many, and the bytes each run stores for them."""

    group: ShapeGroup
    samples: int
    reference: int
    lowp: int
    local: int

    @property
    def nbytes(self) -> int:
        return self.reference + self.lowp + self.local


@dataclass(frozen=True)
class CaptureSize:
    """The estimated size of a capture: per shape group (`groups`), the HDF5 datasets it makes, the tensors whose
    size was guessed from their inputs', and whether the file is copied for the fixed run (`copied`)."""

    groups: tuple[GroupSize, ...]
    datasets: int
    guessed: tuple[str, ...] = ()
    copied: bool = False
    statistics: int = 0  # the per-tensor statistics and the kept analysis

    @property
    def samples(self) -> int:
        return sum(g.samples for g in self.groups)

    @property
    def nbytes(self) -> int:
        """activations.h5 once captured, before `capture.keep` reduces it."""
        return sum(g.nbytes for g in self.groups) + self.datasets * DATASET_OVERHEAD + self.statistics

    @property
    def peak(self) -> int:
        """The most the run directory holds of it at once: with `copied`, the file, its copy and the fixed run
        (whose tensors are the low-precision run's)."""
        return 2 * self.nbytes + sum(g.lowp for g in self.groups) if self.copied else self.nbytes

    def _peak_of(self, g: GroupSize) -> int:
        return 2 * g.nbytes + g.lowp if self.copied else g.nbytes

    @property
    def largest_file(self) -> int:
        """The largest single file of it (what a file size limit bounds): activations.h5, or with `copied` the copy
        that the fixed run is added to."""
        return self.nbytes + sum(g.lowp for g in self.groups) if self.copied else self.nbytes

    def _file_of(self, g: GroupSize) -> int:
        return g.nbytes + g.lowp if self.copied else g.nbytes

    @property
    def per_sample(self) -> int:
        """What one sample adds to the peak, in the shape group where that is the most."""
        return self._per_sample(self._peak_of)

    def _per_sample(self, part) -> int:
        return max((-(-part(g) // g.samples) for g in self.groups if g.samples), default=0)

    def samples_within(self, room: int, one_file: bool = False) -> int:
        """How many samples surely fit in `room` bytes (each counted as one of the largest shape group): of the peak,
        or (`one_file`) of the largest single file."""
        part, total = (self._file_of, self.largest_file) if one_file else (self._peak_of, self.peak)
        per = self._per_sample(part)
        if not per:
            return self.samples
        metadata = total - sum(part(g) for g in self.groups)
        return max(0, min(self.samples, (room - metadata) // per))


def estimate(model: Model, samples: Sequence[Sample], plan: KeepPlan | None = None,
             copied: bool = False) -> CaptureSize:
    """The size of the capture of `model` on `samples` (read from their headers: a SampleSet loads nothing) keeping
    what `plan` keeps (None: every tensor); `copied`: a diagnosis with `capture.keep` all (see the module
    docstring)."""
    every = plan is None or plan.every
    outputs = [t for n in model.nodes for t in n.outputs if t]
    if every:
        lowp = [t for t in outputs if model.is_float(t)]
        local = [t for n in model.candidates for t in n.float_outputs]
    else:
        kept = layer_tensors(model, [], [o for o in model.outputs if o in set(outputs)])
        named = plan.tensors(model, [])  # the names; the top layers are bounded per shape group below
        outputs, lowp, local = (list(dict.fromkeys(kept[r] + named[r])) for r in (REFERENCE, LOWP, LOCAL))
    sizes, guessed, datasets = [], set(), 0
    groups = groups_of(samples)
    bound = tensors_budget(groups)
    tensors_left = 0 if bound is None else bound
    producers = model.producers()
    for group, indices in groups.items():
        shapes, guesses = _shapes(model, group)
        guessed |= guesses
        inputs = [name for name, _ in group.shapes] if every else []
        rows = len(indices)

        def total(names: list[str], shapes=shapes, rows=rows) -> int:
            return sum(stored_bytes(rows, shapes[t], _dtype(model, t)) for t in names)

        ref, lo, lc = inputs + outputs, lowp, local
        top_bytes = [0, 0, 0]
        if not every and plan.top:  # the top layers, not known before the capture: the largest ones bound them
            layers = sorted(model.candidates, key=lambda n: -sum(
                total(ts) for ts in layer_tensors(model, [n], producers=producers).values()))
            top = layer_tensors(model, layers[:plan.top])
            extra = [[t for t in top[r] if t not in a] for a, r in ((ref, REFERENCE), (lo, LOWP), (lc, LOCAL))]
            one = [total(ts, rows=1) for ts in extra]  # a sample's: kept for as many samples as fit (keep_plan.py)
            if bound is None or not sum(one):
                top_bytes = [rows * b for b in one]
            else:  # of the largest layers, as many samples as fit; where one sample's do not, the layers that fit
                fit = min(rows, tensors_left // sum(one))
                top_bytes = [fit * b if fit else b * tensors_left // sum(one) for b in one]
                tensors_left -= sum(top_bytes)
            datasets += sum(len(ts) for ts in extra)
        sizes.append(GroupSize(group, rows, total(ref) + top_bytes[0], total(lo) + top_bytes[1], total(lc) + top_bytes[2]))
        datasets += len(ref) + len(lo) + len(lc)
    # the statistics (stats, shapes, the kept analysis: JSON) grow with the tensors, not with the samples
    statistics = sum(1 for n in model.nodes for t in n.outputs if t) * STATISTICS_BYTES
    return CaptureSize(tuple(sizes), datasets, tuple(sorted(guessed)), copied, statistics)


def tensors_budget(groups: Mapping) -> int | None:
    """The bytes the full tensors kept beyond the statistics and outputs may take (keep_plan.TENSORS_BYTES: as many
    captured samples' as fit) where the captured samples (`groups`: `groups_of` them) are of one shape group; None
    with several (every sample's: a bound by rows would leave later groups' datasets unmade)."""
    return TENSORS_BYTES if len(groups) == 1 else None


def _shapes(model: Model, group: ShapeGroup) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """Every node output's shape at `group`'s input shapes; one shape inference cannot follow is guessed as a
    flat tensor the size of the node's largest input (its name in the set returned)."""
    shapes, _ = shapes_that_ran(model, dict(group.shapes))
    guessed = set()
    for n in model.nodes:
        for t in n.outputs:
            if t and t not in shapes:
                sizes = [int(np.prod(shapes[i], dtype=np.int64)) for i in n.inputs
                         if i and i in shapes and i not in model.initializers]
                shapes[t] = (max(sizes, default=1),)
                guessed.add(t)
    return shapes, guessed


def _dtype(model: Model, tensor: str) -> np.dtype:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(model.tensor_types[tensor]))
    except (KeyError, TypeError, ValueError):
        return np.dtype(np.float32)


def keep_free(free: int) -> int:
    """What a capture leaves free of `free` bytes: a tenth, at most KEEP_FREE_MAX, at least the store's reserve."""
    return max(storage.RESERVE_BYTES, min(KEEP_FREE_MAX, int(free * KEEP_FREE_SHARE)))


def check_room(size: CaptureSize, out_dir: Path) -> int:
    """The free space of `out_dir`'s file system (`storage.free_space`); SpecError (of `capture.max_samples`) when
    the capture's peak would leave less than `keep_free` of it, or when its largest single file is over the file
    size limit (ulimit -f, which bounds each file, not the sum), naming the directory, the estimate, the room and
    the number of captured samples that fits."""
    free, limit = storage.free_space(out_dir), storage.file_size_limit()
    room = free - keep_free(free)
    per_file = None if limit is None else limit - storage.RESERVE_BYTES
    over_disk, over_limit = size.peak > room, per_file is not None and size.largest_file > per_file
    if not (over_disk or over_limit):
        return free
    copy = ", with the copy {capture.keep} all makes for the fixed run" if size.copied else ""
    n_disk = size.samples_within(room) if over_disk else size.samples
    n_file = size.samples_within(per_file, one_file=True) if over_limit and per_file is not None else size.samples
    n = min(n_disk, n_file)
    by_limit = n_file < n_disk or (n_file == n_disk and over_limit and not over_disk)
    if by_limit:
        where = (f"its largest file would be about {fmt_decimal_bytes(size.largest_file)} and the file size limit "
                 f"(ulimit -f) allows {fmt_decimal_bytes(limit or 0)} a file")
    else:
        where = (f"{fmt_decimal_bytes(free)} is free there and {fmt_decimal_bytes(keep_free(free))} must stay free")
    fits = ("{capture.max_samples} " + f"{n} fits" if n else "not even one sample fits: " +
            ("raise the file size limit" if by_limit else "free some space or choose another {out_dir}"))
    samples = counted(size.samples, "sample")
    raise SpecError("capture.max_samples", f"{out_dir}: the capture would write about {fmt_decimal_bytes(size.peak)} "
                    f"({samples}, up to {fmt_decimal_bytes(size.per_sample)} each{copy}) but {where}; {fits}")
