"""The HDF5 activation store: a group per run, a dataset per tensor (per shape group) with the sample axis first.

Layout:
    /                attrs: format version, model hash and path, settings (JSON), inputs (JSON),
                     `shape_groups` (JSON: per shape group its input shapes and its number of samples),
                     `kept` (which tensors the runs hold: `capture.keep`, pipeline/keep.py; "all": every one)
    /shapes          (JSON) every tensor of the reference run (graph inputs, node outputs) with one sample's shape
                     per shape group: the shapes that ran, whether or not the tensor is stored
    /stats           (JSON) every captured tensor's error statistics (`measure/analysis.keep_stats`)
    /analysis        (optional) the analysis of the runs, kept so that it is not computed twice
    /<run>/<escaped> one dataset per stored tensor, shape (samples, *tensor_shape), chunked, compressed;
                     attr `onnx_name` holds the tensor's real name
    /<run>/<escaped>@<k>  with several shape groups: one dataset per tensor and group k (k = 0, 1, ...),
                     shape (samples of group k, *its shape); `@` never appears in an escaped name
    /<run>           attr `tensor_names`: JSON list of real names of the stored tensors in capture order
Runs: `reference` (FP32), `lowp` (emulated low precision, floating tensors), `local` (each node's outputs computed in
low precision from exact inputs), `fixed` (the emulated run with the answer in FP32). The streaming capture
(`measure/capture.py`) stores the graph outputs of each run and the tensors `capture.keep` names; with `all`, every
tensor (graph inputs and node outputs). Samples are numbered across the store (0 .. n-1); the samples of a shape group
are consecutive (the capture orders them so), so reading every sample in order reads each group's datasets in turn.
`whole` says whether a store holds every captured tensor.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import h5py
import numpy as np

from precision_doctor import storage
from precision_doctor.errors import UserError

FORMAT_VERSION = 2  # 2: streamed statistics (`stats`, `shapes`), tensors kept by `capture.keep`; 1: every tensor
REFERENCE, LOWP, LOCAL = "reference", "lowp", "local"
KEPT = "kept"  # root attribute: which tensors the runs hold ("all": every one; absent: a version-1 store of every one)
SHAPES = "shapes"  # root dataset: every reference tensor's shape per shape group (JSON)
STATS = "stats"  # root dataset: every captured tensor's error statistics (JSON, `measure/analysis.keep_stats`)
_CHUNK_BYTES = 4 << 20
# The file's bytes beyond the tensors' data, per dataset: its object header, chunk index and `onnx_name`, and the
# root's attributes and the kept analysis spread over them; 3.9 to 4.8 kB on four zoo models (docs/ARCHITECTURE.md).
DATASET_OVERHEAD = 4608


def escape(name: str) -> str:
    """An HDF5-safe, reversible key for a tensor name ('/' and '%' and a leading '.' are quoted)."""
    key = quote(name, safe="")
    return "%2E" + key[1:] if key.startswith(".") else key or "%00"


class ActivationStore:
    """Read and write captured tensors. Use as a context manager.

    Writing stops with `storage.DiskFull` while `storage.RESERVE_BYTES` are still free (HDF5 cannot recover
    from a failed write); a write that fails anyway abandons the file: it is never closed (`storage`)."""

    def __init__(self, path: str | Path, mode: str = "r", compression: str | None = "lzf"):
        self.path = Path(path)
        self.broken = False
        try:
            self.file = h5py.File(self.path, mode)
        except OSError as exc:
            raise UserError(f"cannot open activations file {self.path}: {exc}") from exc
        self.compression = compression
        self._names: dict[str, list[str]] = {}
        self._sizes: list[int] = []  # samples per shape group (empty: one group of all samples)
        if mode == "r" and self.file.attrs.get("format") != "precision-doctor-activations":
            raise UserError(f"{self.path} is not a precision-doctor activations file")
        groups = self.attr("shape_groups", None) if mode != "w" else None
        if isinstance(groups, list) and len(groups) > 1:
            self._sizes = [int(g["samples"]) for g in groups]

    def __enter__(self) -> ActivationStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.broken or not self.file.id.valid:
            return
        if self.file.mode == "r":
            self.file.close()
            return
        with self._writing(0):
            self.flush_names()
            self.file.close()

    @contextlib.contextmanager
    def _writing(self, nbytes: int) -> Iterator[None]:
        """Around every write: room for `nbytes` checked first; a disk-full error abandons the file (it is
        never touched again) and becomes `storage.DiskFull`."""
        if self.broken:
            raise UserError(f"{self.path}: an earlier write failed; the file is abandoned")
        storage.check_room(self.path, nbytes)
        try:
            yield
        except Exception as exc:
            full = storage.as_disk_full(exc, self.path.parent)
            if full is None:
                raise
            self.broken = True
            storage.abandon(self.file)
            raise full from exc

    # -- attributes -------------------------------------------------------------------------
    def set_attrs(self, **attrs) -> None:
        with self._writing(0):
            self.file.attrs["format"] = "precision-doctor-activations"
            self.file.attrs["format_version"] = FORMAT_VERSION
            for k, v in attrs.items():
                self.file.attrs[k] = v if isinstance(v, (str, int, float)) else json.dumps(v)

    def set_shape_groups(self, groups: list[tuple[dict[str, list[int]], int]]) -> None:
        """The shape groups of the samples about to be written, in sample order: (input shapes, samples)."""
        self.set_attrs(shape_groups=[{"shapes": shapes, "samples": n} for shapes, n in groups])
        self._sizes = [n for _, n in groups] if len(groups) > 1 else []

    def _where(self, sample: int) -> tuple[str, int, int]:
        """(dataset key suffix, index within it, its number of samples) of a sample."""
        start = 0
        for k, n in enumerate(self._sizes):
            if sample < start + n:
                return f"@{k}", sample - start, n
            start += n
        if self._sizes:
            raise IndexError(f"sample {sample} of {start}")
        return "", sample, -1

    def attr(self, key: str, default=None):
        v = self.file.attrs.get(key, default)
        if isinstance(v, str) and v[:1] in "[{":
            return json.loads(v)
        return v

    # -- writing ----------------------------------------------------------------------------
    def write(self, run: str, name: str, sample: int, n_samples: int, value: np.ndarray) -> None:
        """Store `value` as sample `sample` of tensor `name` in `run` (the dataset is closed right after, so
        that its chunk reaches the disk here, where a failure can be seen, not when h5py frees it)."""
        self.write_many(run, name, sample, n_samples, [value])

    def write_many(self, run: str, name: str, first: int, n_samples: int, values: Sequence[np.ndarray]) -> None:
        """Store `values` as samples first, first + 1, ... of tensor `name` in `run`: one write per shape group
        they span (a write per sample costs about a millisecond in h5py, thousands of them per capture)."""
        values = [np.asarray(v) for v in values]
        start = 0
        while start < len(values):
            suffix, index, size = self._where(first + start)
            end = start + 1
            while end < len(values) and self._where(first + end)[0] == suffix:
                end += 1
            self._write_block(run, name, suffix, index, n_samples if size < 0 else size, values[start:end], first + start)
            start = end

    def _write_block(self, run: str, name: str, suffix: str, index: int, rows: int, values: list[np.ndarray],
                     sample: int) -> None:
        value = values[0]
        with self._writing(sum(v.nbytes for v in values)):
            grp = self.file.require_group(run)
            key = escape(name) + suffix
            if key not in grp:
                chunks = _chunking(value.shape, value.nbytes)
                ds = grp.create_dataset(
                    key,
                    shape=(rows, *value.shape),
                    dtype=value.dtype,
                    chunks=chunks,
                    compression=self.compression if chunks else None,
                )
                ds.attrs["onnx_name"] = name
                if suffix in ("", "@0"):
                    self._names.setdefault(run, self.tensor_names(run)).append(name)
            else:
                ds = grp[key]
            for k, v in enumerate(values):
                if ds.shape[1:] != v.shape:
                    raise UserError(
                        f"tensor '{name}' has shape {list(v.shape)} in sample {sample + k} but {list(ds.shape[1:])} in "
                        "another sample of the same input shapes; the model's shapes depend on more than its inputs' "
                        "shapes"
                    )
            if len(values) == 1:
                ds[index] = value
            else:
                ds[index:index + len(values)] = np.stack(values)
            ds.id.close()

    def write_text(self, key: str, text: str) -> None:
        """A text dataset `key` at the root (not a run), replaced if present."""
        with self._writing(len(text.encode())):
            if key in self.file:
                del self.file[key]
            self.file[key] = text

    def remove(self, run: str, names: Sequence[str]) -> None:
        """Remove tensors `names` of `run` (each shape group's dataset) where stored; the others stay."""
        if run not in self.file:
            return
        gone = set(names)
        with self._writing(0):
            grp = self.file[run]
            for key in [k for k in grp if grp[k].attrs.get("onnx_name") in gone]:
                del grp[key]
            self._names[run] = [n for n in self.tensor_names(run) if n not in gone]

    def flush_names(self) -> None:
        with self._writing(0):
            for run, names in self._names.items():
                self.file[run].attrs["tensor_names"] = json.dumps(names)

    # -- reading ----------------------------------------------------------------------------
    def runs(self) -> list[str]:
        return [k for k in self.file.keys() if isinstance(self.file[k], h5py.Group)]

    def tensor_names(self, run: str) -> list[str]:
        if run in self._names:
            return self._names[run]
        if run not in self.file:
            return []
        return json.loads(self.file[run].attrs.get("tensor_names", "[]"))

    def has(self, run: str, name: str) -> bool:
        return run in self.file and escape(name) + ("@0" if self._sizes else "") in self.file[run]

    def dataset(self, run: str, name: str, group: int = 0) -> h5py.Dataset:
        """The dataset of tensor `name` in `run` for shape group `group`."""
        return self.file[run][escape(name) + (f"@{group}" if self._sizes else "")]

    def set_shapes(self, shapes: Mapping[str, Sequence[Sequence[int]]]) -> None:
        """Each reference tensor's shape per shape group (`SHAPES`), what `shape` and `captured_shapes` read."""
        doc = {t: [list(map(int, s)) for s in per] for t, per in shapes.items()}
        self.write_text(SHAPES, json.dumps(doc))
        self.__dict__["_shapes"] = doc  # the cached property, now known

    @functools.cached_property
    def _shapes(self) -> dict[str, list[list[int]]]:
        text = self.read_text(SHAPES)
        return json.loads(text) if text is not None else {}

    def shape(self, run: str, name: str) -> list[int]:
        """The tensor's shape (without the sample axis); -1 for a dimension that differs between shape groups. A
        tensor not stored: the shape that ran in the reference run (`SHAPES`)."""
        if name in self._shapes and not self.has(run, name):
            return merged_shape(self._shapes[name])
        shapes = [self.dataset(run, name, k).shape[1:] for k in range(max(1, len(self._sizes)))]
        return merged_shape(shapes)

    def one_shape(self, name: str) -> tuple[int, ...] | None:
        """One sample's shape of reference tensor `name` in the first shape group (None: not captured)."""
        if name in self._shapes:
            return tuple(self._shapes[name][0])
        if self.has(REFERENCE, name):
            return tuple(int(d) for d in self.dataset(REFERENCE, name).shape[1:])
        return None

    def captured_tensors(self) -> list[str]:
        """Every tensor of the reference run, stored or not (graph inputs and node outputs)."""
        return list(self._shapes) or self.tensor_names(REFERENCE)

    def read(self, run: str, name: str, sample: int | None = None) -> np.ndarray:
        """Sample `sample` of the tensor (None: every sample stacked, with one shape group only)."""
        if sample is None:
            return np.asarray(self.dataset(run, name)[()])
        suffix, index, _ = self._where(sample)
        return np.asarray(self.file[run][escape(name) + suffix][index])  # 0-d stays an array for ORT

    def read_text(self, key: str) -> str | None:
        """The text dataset `key` at the root, or None."""
        if key not in self.file or isinstance(self.file[key], h5py.Group):
            return None
        value = self.file[key][()]
        return value.decode() if isinstance(value, bytes) else str(value)

    def n_samples(self) -> int:
        return int(self.file.attrs.get("samples", 0))

    def iter_samples(self, run: str, name: str, block_mb: float = 0.0) -> Iterator[np.ndarray]:
        """Every sample of the tensor in sample order (shape group after shape group); `block_mb`: read as many
        consecutive samples at once as fit in that many MiB (fewer HDF5 reads; 0: one at a time)."""
        for k in range(max(1, len(self._sizes))):
            ds = self.dataset(run, name, k)
            n = ds.shape[0]
            one = max(1, ds.dtype.itemsize * int(np.prod(ds.shape[1:], dtype=np.int64)))
            step = max(1, int(block_mb * (1 << 20)) // one) if block_mb else 1
            for start in range(0, n, step):
                if step == 1:
                    yield ds[start]
                    continue
                yield from ds[start:start + step]


def merged_shape(shapes: Sequence[Sequence[int]]) -> list[int]:
    """One shape of a tensor's shapes in the shape groups: -1 for a dimension that differs (every one where the ranks
    differ)."""
    shapes = [tuple(s) for s in shapes]
    if len({len(s) for s in shapes}) > 1:
        return [-1] * max(len(s) for s in shapes)
    return [int(d[0]) if len(set(d)) == 1 else -1 for d in zip(*shapes)] if shapes and shapes[0] else []


def _chunking(shape: tuple[int, ...], nbytes: int) -> tuple[int, ...] | bool | None:
    """How a tensor of one sample's `shape` (`nbytes`) is chunked: a chunk per sample up to `_CHUNK_BYTES`, HDF5's
    own chunks above (True), none (contiguous) when it is empty."""
    if not nbytes:
        return None
    return (1, *shape) if nbytes <= _CHUNK_BYTES else True


@functools.lru_cache(maxsize=4096)
def stored_bytes(rows: int, shape: tuple[int, ...], dtype: np.dtype) -> int:
    """The bytes the dataset of a tensor of `shape` and `dtype` takes for `rows` samples, uncompressed: HDF5 allocates
    whole chunks, so the edge chunks of a tensor it chunks itself (over `_CHUNK_BYTES`) count in full (their shape
    asked of h5py in a file held in memory)."""
    itemsize = np.dtype(dtype).itemsize
    one = itemsize * math.prod(shape)
    chunks = _chunking(shape, one)
    if chunks is not True:
        return rows * one
    full = (rows, *shape)
    with h5py.File("precision-doctor-layout", "w", driver="core", backing_store=False) as f:
        chunks = f.create_dataset("x", shape=full, dtype=dtype, chunks=True).chunks
    return itemsize * math.prod(-(-d // c) * c for d, c in zip(full, chunks))


def captured_shapes(path: str | Path | None) -> dict[str, tuple[int, ...]] | None:
    """Each tensor of the reference run in the store at `path` with one sample's shape (the shapes that ran: what
    `graph/cost.py` prices); None where there is no store."""
    if path is None or not Path(path).exists():
        return None
    with ActivationStore(path) as store:
        return {name: shape for name in store.captured_tensors() if (shape := store.one_shape(name)) is not None}


def analysable(path: Path) -> bool:
    """Whether `path` is a complete capture that can be analysed again without capturing: one with its statistics
    (`STATS`), or one of every tensor."""
    try:
        with h5py.File(path, "r") as f:
            return f.attrs.get("format") == "precision-doctor-activations" and (
                STATS in f or f.attrs.get(KEPT, "all") == "all")
    except OSError:
        return False


def whole(path: Path) -> bool:
    """Whether `path` is a store holding every captured tensor (`capture.keep` all, or a version-1 store)."""
    try:
        with h5py.File(path, "r") as f:
            return f.attrs.get("format") == "precision-doctor-activations" and f.attrs.get(KEPT, "all") == "all"
    except OSError:
        return False


@dataclass(frozen=True)
class ExtraRun:
    """A run computed without being stored in a capture (the fixed run), to add to it: its tensors' values per sample,
    its attributes."""

    values: Mapping[str, Sequence[np.ndarray]]
    attrs: Mapping[str, str]


def append_runs(path: Path, extra: Mapping[str, ExtraRun]) -> None:
    """Add the `extra` runs' values to the store at `path`: written into a copy beside it (`summary_path`), renamed over
    it when complete, so that an interruption or a full disk leaves the store as it was."""
    tmp = summary_path(path)
    try:
        storage.check_room(tmp, path.stat().st_size)
        shutil.copyfile(path, tmp)
        with ActivationStore(tmp, "a", compression=None) as dst:
            for run, r in extra.items():
                for name, values in r.values.items():
                    if values:
                        dst.write_many(run, name, 0, len(values), list(values))
                if run in dst.file:
                    dst.file[run].attrs.update(dict(r.attrs))
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)


def summary_path(path: Path) -> Path:
    """Where `append_runs` writes its copy of `path` before renaming it over `path`."""
    return path.with_name(f".{path.name}.summary")
