"""The samples of a run as a lazy collection: thousands of samples, a few in memory at a time.

`SampleSet` is a `Sequence[Sample]` (a `Sample` is a feed dict: input name -> array). It holds where each
sample lives (an `Entry`: a file, one sample of a multi-sample file, a sample spilled to disk, or an array
in memory), not the arrays: `samples[i]` loads sample i on demand, and a small LRU cache (CACHE_SAMPLES
samples, at most CACHE_BYTES) keeps the last ones used. The entries are kept compactly (`Entries`): the rows of
a multi-sample file are one `Rows` block whose entries are made when asked for, and a subset is an array of
positions, so a million samples cost a few bytes each before any is read. What the rest of the pipeline may
rely on:

- `len(samples)`, `samples[i]` (a `FileSample`: a dict with `.source`, its label), iteration, `samples[a:b]`;
- `samples.label(i)`: how messages and reports name sample i ("data/x.npz", "calib.npz (sample 3)");
- `samples.shape_group(i)`: its `ShapeGroup` (every input's shape), known without loading the sample;
  `samples.groups()`: {ShapeGroup: [indices]} in the order groups first appear;
- `samples.subset(indices)`: another SampleSet over those samples, sharing the cache;
- `samples + other` (a SampleSet or a list of samples, e.g. perturbed copies) and `list + samples`: a
  SampleSet of both, still lazy.

Choosing samples:

- `spread_choice(groups, k, seed)`: k of n samples, seeded and spread out (each shape group keeps its
  share; within a group one sample per equal stretch of the list): `--max-samples`.
- `capture_choice(scores, groups, k)`: the samples the mark-all capture runs on (`capture.max_samples`):
  the k whose all-low-precision error is largest (`scores[i]`, the share of the tolerance sample i uses
  with every node in low precision; NaN or inf count as largest), taken from the shape groups in turn
  (the group of the largest score first), so that every shape group is captured before a second sample
  of any group. Without scores (None), spread over each group's list, the groups in their order.
"""

from __future__ import annotations

import ctypes
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar, overload

import numpy as np

from precision_doctor.words import counted

Sample = dict[str, np.ndarray]
T = TypeVar("T")
CACHE_SAMPLES = 32  # samples kept in memory once loaded (a search's working set fits)
CACHE_BYTES = 256 << 20  # and at most this many bytes of them


class FileSample(dict):
    """A sample read from a file: `source` names the file (and the sample within it) in messages."""

    def __init__(self, arrays: Mapping[str, np.ndarray], source: str):
        super().__init__(arrays)
        self.source = source


@dataclass(frozen=True, order=True)
class ShapeGroup:
    """Samples whose every input has the same shape: the (input name, shape) pairs, sorted by name."""

    shapes: tuple[tuple[str, tuple[int, ...]], ...]

    @classmethod
    def of(cls, shapes: Mapping[str, Sequence[int]]) -> ShapeGroup:
        return cls(tuple(sorted((str(k), tuple(int(d) for d in v)) for k, v in shapes.items())))

    @classmethod
    def of_sample(cls, sample: Mapping[str, np.ndarray]) -> ShapeGroup:
        return cls.of({k: np.shape(v) for k, v in sample.items()})

    def as_dict(self) -> dict[str, list[int]]:
        return {k: list(v) for k, v in self.shapes}

    def __str__(self) -> str:
        """"x:1x3x48x192;y:1x8": every input's shape (the form search/cegis.py's shape_group uses)."""
        return ";".join(f"{k}:{'x'.join(map(str, v))}" for k, v in self.shapes)


@dataclass(frozen=True)
class Shaped:
    """An array's shape without its data (`np.shape(Shaped((1, 3)))` is (1, 3))."""

    shape: tuple[int, ...]


class Entry(Protocol):
    """Where one sample lives: its label, its shape group (known before loading), whether loading it is worth
    caching, and `load()`. Entries are compared as the cache's keys: by identity, unless the entry says otherwise
    (a row of a multi-sample file is its block and its index)."""

    label: str
    group: ShapeGroup
    cached: bool

    def load(self) -> Mapping[str, np.ndarray]: ...


class Rows:
    """A block of samples held alike, whose entries are made when asked for (the rows of one multi-sample file):
    subclasses give `group` (every row's), `path`, `__len__` and `entry(i)`."""

    group: ShapeGroup
    path: Path | None = None

    def __len__(self) -> int:
        raise NotImplementedError

    def entry(self, i: int) -> Entry:
        raise NotImplementedError


class Entries(Sequence[Entry]):
    """Where each sample of a set lives, compactly: `blocks` (an Entry is a block of one sample, a `Rows` a block
    of many) and, for a subset, the positions it takes from them (an int64 array; None: every one, in order)."""

    def __init__(self, blocks: Iterable[Entry | Rows] = (), positions: np.ndarray | None = None,
                 starts: np.ndarray | None = None):
        self.blocks: tuple[Entry | Rows, ...] = tuple(blocks)
        if starts is None:
            sizes = np.fromiter((len(b) if isinstance(b, Rows) else 1 for b in self.blocks), np.int64, len(self.blocks))
            starts = np.concatenate([np.zeros(1, np.int64), np.cumsum(sizes, dtype=np.int64)])
        self.starts = starts  # where each block's samples begin among all of them (and their number, last)
        self.positions = positions

    def _picked(self, positions: np.ndarray) -> Entries:
        return Entries(self.blocks, positions, self.starts)

    @classmethod
    def of(cls, entries: Iterable[Entry | Rows]) -> Entries:
        return entries if isinstance(entries, Entries) else cls(entries)

    def _positions(self) -> np.ndarray:
        return self.positions if self.positions is not None else np.arange(self.starts[-1], dtype=np.int64)

    def __len__(self) -> int:
        return int(self.positions.size if self.positions is not None else self.starts[-1])

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return self._picked(self._positions()[index])
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(index)
        pos = int(self.positions[index]) if self.positions is not None else index
        b = int(np.searchsorted(self.starts, pos, side="right")) - 1
        block = self.blocks[b]
        return block.entry(pos - int(self.starts[b])) if isinstance(block, Rows) else block

    def take(self, indices: Iterable[int]) -> Entries:
        """The entries at `indices`, in that order."""
        picked = np.asarray(list(indices) if not isinstance(indices, np.ndarray) else indices, dtype=np.int64)
        if picked.size and (picked.min() < -len(self) or picked.max() >= len(self)):
            raise IndexError("sample index out of range")
        return self._picked(self._positions()[picked])

    def __add__(self, other: Entries) -> Entries:
        if self.positions is None and other.positions is None:
            return Entries(self.blocks + other.blocks)
        return Entries(self.blocks + other.blocks,
                       np.concatenate([self._positions(), other._positions() + self.starts[-1]]))

    def block_of(self) -> np.ndarray:
        """The block each entry comes from (an index into `blocks`), in order."""
        return np.searchsorted(self.starts, self._positions(), side="right") - 1

    def groups(self) -> dict[ShapeGroup, list[int]]:
        """The entry indices of each shape group, groups in the order they first appear."""
        if self.positions is None and len(self.blocks) == len(self):  # one sample per block, in order
            out: dict[ShapeGroup, list[int]] = {}
            for i, block in enumerate(self.blocks):
                out.setdefault(block.group, []).append(i)
            return out
        ids: dict[ShapeGroup, int] = {}
        of_block = np.array([ids.setdefault(b.group, len(ids)) for b in self.blocks], dtype=np.int64)
        gid = of_block[self.block_of()] if len(self) else np.zeros(0, np.int64)
        order = np.argsort(gid, kind="stable")  # each group's indices together, ascending
        parts = np.split(order, np.flatnonzero(np.diff(gid[order])) + 1) if gid.size else []
        by_id = list(ids)
        return {by_id[int(gid[a[0]])]: a.tolist() for a in sorted(parts, key=lambda a: int(a[0]))}

    def paths(self) -> list[Path]:
        """The files the entries are read from, each once, in the order of their first entry."""
        used = dict.fromkeys(self.block_of().tolist()) if self.positions is not None else range(len(self.blocks))
        found = (getattr(self.blocks[b], "path", None) for b in used)
        return list(dict.fromkeys(p for p in found if isinstance(p, Path)))


class MemoryEntry:
    """A sample already in memory (generated samples, perturbed copies)."""

    cached = False

    def __init__(self, sample: Mapping[str, np.ndarray], label: str):
        self.sample, self.label = sample, label
        self.group = ShapeGroup.of_sample(sample)

    def load(self) -> Mapping[str, np.ndarray]:
        return self.sample


MMAP_THRESHOLD = 64 << 10  # arrays from this size get their own mapping once samples cycle through the cache
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
_heap_bounded = [False]


def release_heap() -> None:
    """Give freed heap memory back to the OS (glibc's `malloc_trim`)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def bound_heap() -> None:
    """Once per process, when samples start cycling through memory: arrays of MMAP_THRESHOLD bytes or more are
    mapped and unmapped by themselves (glibc's mallopt M_MMAP_THRESHOLD; it also stops glibc from raising the
    threshold as it frees large blocks). Reading, checking and dropping thousands of 64 KiB samples between
    HDF5's and ONNX Runtime's own allocations otherwise fragments the heap: one pass over 800 such samples (FP32
    reference, emulated run, tolerance check) grew the peak RSS by 250 MiB; with this and `release_heap` every
    CACHE_SAMPLES samples, by 19 MiB (bench numbers in docs/ARCHITECTURE.md)."""
    if _heap_bounded[0]:
        return
    _heap_bounded[0] = True
    try:
        ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except (OSError, AttributeError):
        pass


class HeapTrim:
    """Calls `release_heap` once every `every` calls of `tick()`."""

    def __init__(self, every: int = CACHE_SAMPLES):
        self.every, self.count = every, 0

    def tick(self) -> None:
        self.count += 1
        if self.count % self.every == 0:
            bound_heap()
            release_heap()


class _Cache:
    """The last samples loaded, by entry (its identity, or what it compares by: `Entry`), at most CACHE_SAMPLES of them
    and CACHE_BYTES in all."""

    def __init__(self, samples: int = CACHE_SAMPLES, nbytes: int = CACHE_BYTES):
        self.limit, self.byte_limit = samples, nbytes
        self.items: OrderedDict[Entry, FileSample] = OrderedDict()
        self.bytes = 0
        self.trim = HeapTrim()

    def get(self, entry: Entry, make: Callable[[], FileSample]) -> FileSample:
        hit = self.items.get(entry)  # the dict holds the entry itself: an identity key cannot be reused meanwhile
        if hit is not None:
            self.items.move_to_end(entry)
            return hit
        sample = make()
        self.trim.tick()
        size = sum(int(v.nbytes) for v in sample.values())
        if size <= self.byte_limit:
            self.items[entry] = sample
            self.bytes += size
            while len(self.items) > self.limit or self.bytes > self.byte_limit:
                _, old = self.items.popitem(last=False)
                self.bytes -= sum(int(v.nbytes) for v in old.values())
        return sample


Conform = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]


class SampleSet(Sequence[Sample]):
    """Samples loaded on demand (see the module docstring). `conform` (e.g. casting to the model's dtypes)
    is applied to each sample as it is loaded."""

    def __init__(self, entries: Iterable[Entry | Rows], conform: Conform | None = None, cache: _Cache | None = None):
        self.entries: Entries = Entries.of(entries)
        self.conform = conform
        self._cache = cache if cache is not None else _Cache()

    @classmethod
    def of(cls, samples: Iterable[Mapping[str, np.ndarray]], label: str = "sample") -> SampleSet:
        """Samples held in memory, labelled "{label} {i}" (a FileSample keeps its own source)."""
        return cls(_memory_entries(samples, label))

    # -- Sequence -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.entries)

    @overload
    def __getitem__(self, index: int) -> Sample: ...

    @overload
    def __getitem__(self, index: slice) -> SampleSet: ...

    def __getitem__(self, index: int | slice) -> Sample | SampleSet:
        if isinstance(index, slice):
            return SampleSet(self.entries[index], self.conform, self._cache)
        entry = self.entries[index]
        return self._cache.get(entry, lambda: self._load(entry)) if entry.cached else self._load(entry)

    def __iter__(self) -> Iterator[Sample]:
        for i in range(len(self.entries)):
            yield self[i]

    def _load(self, entry: Entry) -> FileSample:
        arrays = entry.load()
        return FileSample(self.conform(arrays) if self.conform is not None else arrays, entry.label)

    # -- what is known without loading ------------------------------------------------------------------
    def label(self, index: int) -> str:
        return self.entries[index].label

    def shape_group(self, index: int) -> ShapeGroup:
        return self.entries[index].group

    def shapes(self) -> list[dict[str, Shaped]]:
        """Each sample's arrays as their shapes only (`np.shape` reads them), from the headers: for code that
        needs every sample's shapes without their data (one dict per shape group, shared by its samples)."""
        out: list[dict[str, Shaped] | None] = [None] * len(self)
        for group, indices in self.groups().items():
            shaped = {name: Shaped(shape) for name, shape in group.shapes}
            for i in indices:
                out[i] = shaped
        return out  # type: ignore[return-value]

    def groups(self) -> dict[ShapeGroup, list[int]]:
        """The sample indices of each shape group, groups in the order they first appear."""
        return self.entries.groups()

    def files(self) -> list[Path]:
        """The files the samples are read from, each once, in order (samples in memory or spilled have none)."""
        return self.entries.paths()

    # -- new sets -------------------------------------------------------------------------------------
    def subset(self, indices: Iterable[int]) -> SampleSet:
        return SampleSet(self.entries.take(indices), self.conform, self._cache)

    def with_conform(self, conform: Conform | None) -> SampleSet:
        return SampleSet(self.entries, conform, self._cache)

    def __add__(self, other: object) -> SampleSet:
        if isinstance(other, SampleSet):
            return SampleSet(self.entries + other.entries, self.conform, self._cache)
        if isinstance(other, Sequence):
            return SampleSet(self.entries + Entries(_memory_entries(other, "added sample", len(self))),
                             self.conform, self._cache)
        return NotImplemented

    def __radd__(self, other: object) -> SampleSet:
        if isinstance(other, Sequence):
            return SampleSet(Entries(_memory_entries(other, "sample")) + self.entries, self.conform, self._cache)
        return NotImplemented

    def __repr__(self) -> str:
        return f"SampleSet({len(self)} samples, {counted(len(self.groups()), 'shape group')})"


def _memory_entries(samples: Iterable[Mapping[str, np.ndarray]], label: str, start: int = 0) -> list[Entry]:
    return [MemoryEntry(s, getattr(s, "source", None) or f"{label} {i}") for i, s in enumerate(samples, start)]


def as_sample_set(samples: Sequence[Sample] | SampleSet) -> SampleSet:
    """`samples` as a SampleSet (a list of samples is wrapped, not copied)."""
    return samples if isinstance(samples, SampleSet) else SampleSet.of(samples)


def groups_of(samples: Sequence[Sample]) -> dict[ShapeGroup, list[int]]:
    """{ShapeGroup: indices} of any sequence of samples (a SampleSet answers from its headers)."""
    if isinstance(samples, SampleSet):
        return samples.groups()
    out: dict[ShapeGroup, list[int]] = {}
    for i, s in enumerate(samples):
        out.setdefault(ShapeGroup.of_sample(s), []).append(i)
    return out


class Picked(Sequence[T]):
    """The items of a sequence at `indices`, in that order, none copied (search samples by index, loaded on demand)."""

    def __init__(self, items: Sequence[T], indices: Sequence[int]):
        self.items, self.indices = items, list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self.items[self.indices[index]]

    def __add__(self, other: Sequence[T]) -> Concat[T]:
        return Concat(self, other)

    def __radd__(self, other: Sequence[T]) -> Concat[T]:
        return Concat(other, self)


class Concat(Sequence[T]):
    """Two sequences end to end, neither copied (FP32 references of samples, then of their copies)."""

    def __init__(self, first: Sequence[T], second: Sequence[T]):
        self.first, self.second = first, second

    def __len__(self) -> int:
        return len(self.first) + len(self.second)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self.first)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.first[index] if index < n else self.second[index - n]

    def __add__(self, other: Sequence[T]) -> Concat[T]:
        return Concat(self, other)

    def __radd__(self, other: Sequence[T]) -> Concat[T]:
        return Concat(other, self)


# -- choosing samples ---------------------------------------------------------------------------------


def spread_choice(groups: Mapping[ShapeGroup, Sequence[int]], k: int, seed: int) -> list[int]:
    """k of the samples, seeded and spread out, in their order: each shape group gets its share of k (largest
    remainder, every group at least one while k allows), and within a group one sample from each of its equal
    stretches, at a seeded position inside the stretch. All of them when k is not smaller than their number."""
    n = sum(len(v) for v in groups.values())
    if k >= n:
        return sorted(i for v in groups.values() for i in v)
    shares = _shares({g: len(v) for g, v in groups.items()}, k)
    rng = np.random.default_rng([seed, n, k])
    chosen = []
    for g, indices in groups.items():
        m = shares[g]
        for j in range(m):
            lo, hi = (j * len(indices)) // m, ((j + 1) * len(indices)) // m
            chosen.append(indices[lo + int(rng.integers(0, hi - lo))])
    return sorted(chosen)


def _shares(sizes: Mapping[ShapeGroup, int], k: int) -> dict[ShapeGroup, int]:
    """k split over groups in proportion to their sizes, at least one each while k allows (the largest groups
    first): each further sample goes to the group furthest below its proportional share that has room."""
    total = sum(sizes.values())
    order = sorted(sizes, key=lambda g: -sizes[g])
    out = {g: 1 if i < k else 0 for i, g in enumerate(order)}
    for _ in range(k - sum(out.values())):
        g = max((g for g in order if out[g] < sizes[g]), key=lambda g: sizes[g] * k / total - out[g])
        out[g] += 1
    return out


def grouped(groups: Mapping[ShapeGroup, Sequence[int]], indices: Iterable[int] | None = None) -> list[int]:
    """`indices` (default: every sample) ordered so that each shape group's samples are consecutive: the groups
    in the order they first appear among `indices`, each group's samples in their order."""
    group_of = {i: g for g, v in groups.items() for i in v}
    wanted = list(indices) if indices is not None else sorted(group_of)
    order: dict[ShapeGroup, list[int]] = {}
    for i in wanted:
        order.setdefault(group_of[i], []).append(i)
    return [i for v in order.values() for i in v]


def capture_choice(scores: Sequence[float] | None, groups: Mapping[ShapeGroup, Sequence[int]], k: int) -> list[int]:
    """The samples the capture runs on (see the module docstring): with `scores` (indexed like the samples),
    the largest first within each group, the groups in turn, the group holding the largest score first;
    without, spread over each group's list (its middle, then its quarters, ...), the groups in their order.
    Returned in capture order: by group in that turn order, then by index (each shape group one stretch)."""
    if k <= 0:
        return []
    if scores is None:
        queues = [_interleave_spread(list(v)) for v in groups.values() if v]
    else:
        def key(i: int) -> tuple[float, int]:
            s = float(scores[i])
            return (-(math.inf if math.isnan(s) else s), i)

        queues = sorted(([*sorted(v, key=key)] for v in groups.values() if v), key=lambda q: key(q[0]))
    picked: dict[int, list[int]] = {}
    taken = 0
    while taken < k and any(queues):
        for gi, q in enumerate(queues):
            if q and taken < k:
                picked.setdefault(gi, []).append(q.pop(0))
                taken += 1
    return [i for gi in sorted(picked) for i in sorted(picked[gi])]


def _interleave_spread(indices: list[int]) -> list[int]:
    """Indices reordered so that any prefix is spread over the list (middle, then quarters, ...)."""
    out: list[int] = []
    seen: set[int] = set()
    n, step = len(indices), len(indices)
    while len(out) < n:
        for j in range(step // 2, n, max(step, 1)):
            if j not in seen:
                seen.add(j)
                out.append(indices[j])
        if step == 1:
            break
        step = max(1, step // 2)
    out += [indices[j] for j in range(n) if j not in seen]
    return out
