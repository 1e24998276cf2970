"""Large weights in files, not in the graphs that ONNX Runtime sessions are made of.

A model's FP32 reference graph, its emulation graphs (with their rounded weights), the capture's segments and local
graphs refer to each initializer of at least `MIN_BYTES` as external data: a file written once per model (and once
per rounding of a weight, `WeightFiles.derived`), under one temporary directory of the process (`root()`). A graph
copied, cut into segments, given other outputs or serialized then carries none of those weights, and ONNX Runtime
maps each file from the page cache when it makes a session (`graph/ort_session.make_session` loads such a graph from
a path in `root()`): a session holds no copy of its own of the bytes, only what its kernels prepack (a MatMul's
packed weight, one per weight and session). The same bytes go to the file as the proto held, so sessions compute
what they computed from the proto itself, bit for bit.

Before this (2026-12-03), every session held its weights twice (ONNX Runtime's copy and its parsed graph's), and
every graph built for one held them once more while it lived: a run's peak was 20x a model's weights
(docs/history/large-models.md). The files take the model's weights and their rounded copies on the temporary
directory's disk (`TMPDIR`); each `WeightFiles` removes its directory when it is garbage-collected, `root()` goes at
the process's exit."""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import math
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Hashable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from precision_doctor import storage

MIN_BYTES = 1 << 20  # an initializer this large goes to a file (below, its bytes stay in the graph)

_lock = threading.Lock()
_root: Path | None = None
_held: list = []  # the open lock file of this process's root: locked while the process lives
ROOT_PREFIX = "pd-weights-"
LOCK = ".lock"


def root() -> Path:
    """The process's directory of weight files (made when first asked, removed at exit), locked while the process
    lives; making it removes the directories of processes that died without removing theirs (killed: no exit ran)."""
    global _root
    with _lock:
        if _root is None or not _root.is_dir():
            sweep_stale(Path(tempfile.gettempdir()))
            _root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX))
            lock = open(_root / (LOCK + ".new"), "w")  # noqa: SIM115 (held open for the process's life)
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(_root / (LOCK + ".new"), _root / LOCK)  # locked before another process can see it
            _held.append(lock)
            atexit.register(shutil.rmtree, _root, True)
        return _root


def sweep_stale(tmp: Path) -> list[Path]:
    """Remove the weight directories under `tmp` whose lock no process holds (their process was killed); those
    without a lock file (being made, or older) stay. Returns what it removed."""
    gone = []
    for d in tmp.glob(ROOT_PREFIX + "*"):
        try:
            with open(d / LOCK) as f:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # no lock file, or a live process holds it
            continue
        shutil.rmtree(d, ignore_errors=True)
        gone.append(d)
    return gone


def nbytes(t: onnx.TensorProto) -> int:
    """The size of `t`'s data held in the proto (0 for data already outside it), without reading it."""
    if t.data_location == TensorProto.EXTERNAL:
        return 0
    try:
        itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return 0
    return int(np.prod(t.dims, dtype=np.int64)) * itemsize if t.HasField("raw_data") else 0


_FLOATING = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)


def large(t: onnx.TensorProto) -> bool:
    """Whether `t` is a floating tensor of at least `MIN_BYTES` of raw data (what goes to a file). Integer tensors
    stay: ONNX Runtime's shape inference reads shapes, axes and indices from the graph, not from files."""
    return t.data_type in _FLOATING and nbytes(t) >= MIN_BYTES


def weightless(proto: onnx.ModelProto, keep_elements: int = 0) -> onnx.ModelProto:
    """`proto`'s graph for shape inference, no weight copied: its initializers of more than `keep_elements` elements
    as typed graph inputs (their shapes known, their values not), the others kept (what shapes are computed from);
    no value infos, no metadata."""
    g = proto.graph
    kept = [i for i in g.initializer if math.prod(i.dims) <= keep_elements]
    declared = {i.name for i in g.input}
    as_inputs = [helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in g.initializer
                 if math.prod(i.dims) > keep_elements and i.name not in declared]
    graph = helper.make_graph(list(g.node), g.name, [*g.input, *as_inputs], list(g.output), kept)
    light = helper.make_model(graph, opset_imports=list(proto.opset_import), ir_version=proto.ir_version)
    light.functions.extend(proto.functions)
    return light


def in_files(proto: onnx.ModelProto) -> bool:
    """Whether any initializer of `proto`'s graph refers to a file of `root()` (made by a `WeightFiles`)."""
    return any(t.data_location == TensorProto.EXTERNAL and _location(t).startswith(_PREFIX)
               for t in proto.graph.initializer)


_PREFIX = "pdw-"  # the name of every WeightFiles directory in root()


def _location(t: onnx.TensorProto) -> str:
    return next((e.value for e in t.external_data if e.key == "location"), "")


def _stub(name: str, data_type: int, dims, location: str, length: int) -> onnx.TensorProto:
    t = onnx.TensorProto(name=name, data_type=data_type, dims=list(dims))
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(length))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


class WeightFiles:
    """One model's weight files: a directory in `root()` of one file per tensor, and the initializers that refer
    to them (`stub`), each written once per key."""

    def __init__(self):
        self.dir: Path | None = None  # made with the first file
        self._lock = threading.Lock()
        self._files: dict[Hashable, tuple[int, tuple[int, ...], str, int]] = {}  # key -> type, dims, location, bytes
        self._finalizer: weakref.finalize | None = None
        self.full = False  # the temporary directory had no room for a file: the weights since stay in the graphs

    @property
    def written(self) -> int:
        """How many files were written (each weight, or rounded weight, once)."""
        return len(self._files)

    def _entry(self, key: Hashable, data_type: int, dims: tuple[int, ...], data: bytes | np.ndarray):
        """The file of `key` (written with `data` the first time), or None where the temporary directory has no
        room for it: then, and for every file after, the caller keeps the tensor in the graph (as before files were
        used: more memory, nothing refused)."""
        with self._lock:
            if key not in self._files:
                if self.full:
                    return None
                size = data.nbytes if isinstance(data, np.ndarray) else len(data)
                if self.dir is None:
                    self.dir = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=root()))
                    self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.dir), True)
                path = self.dir / f"{len(self._files) + 1}.bin"
                try:
                    storage.check_room(path, size)
                    with open(path, "wb") as f:
                        if isinstance(data, np.ndarray):
                            np.ascontiguousarray(data).tofile(f)
                        else:
                            f.write(data)
                except (OSError, storage.DiskFull) as exc:
                    if storage.disk_full(exc) is None:
                        raise
                    path.unlink(missing_ok=True)
                    self.full = True
                    return None
                self._files[key] = (data_type, dims, f"{self.dir.name}/{path.name}", size)
            return self._files[key]

    def stub(self, t: onnx.TensorProto) -> onnx.TensorProto:
        """`t` (an initializer with raw data) as a reference to a file of its bytes (`t` itself where there is no
        room for one)."""
        key = ("tensor", t.name)
        if self.full and key not in self._files:
            return t
        entry = self._entry(key, t.data_type, tuple(t.dims), t.raw_data)
        return t if entry is None else _stub(t.name, *entry)

    def derived(self, name: str, key: Hashable, compute: Callable[[], np.ndarray]) -> onnx.TensorProto:
        """An initializer `name` whose value `compute()` gives (a weight's rounded copy), as a reference to its file:
        computed and written once per `key` (the tensor itself where there is no room for a file)."""
        if key in self._files:
            return _stub(name, *self._files[key])
        a = np.asarray(compute())
        entry = self._entry(key, helper.np_dtype_to_tensor_dtype(a.dtype), tuple(a.shape),
                            a.astype(a.dtype.newbyteorder("<"), copy=False))
        return numpy_helper.from_array(a, name) if entry is None else _stub(name, *entry)

    def array(self, name: str, value: np.ndarray) -> onnx.TensorProto:
        """A new initializer `name` of `value`: a reference to a file where it is large (one file per distinct value:
        a folded weight that every graph of the model computes again is written once), else the tensor itself."""
        if value.nbytes < MIN_BYTES:
            return numpy_helper.from_array(value, name)
        a = np.ascontiguousarray(value)
        key = ("array", a.dtype.str, a.shape, hashlib.blake2b(a.data, digest_size=20).digest())
        return self.derived(name, key, lambda: a)

    def close(self) -> None:
        """Remove the files (sessions made from them keep what they mapped)."""
        if self._finalizer is not None:
            self._finalizer()


def lean_copy(proto: onnx.ModelProto, files: WeightFiles) -> onnx.ModelProto:
    """A copy of `proto` whose main graph's large initializers (`large`) refer to files of `files`, the rest as it is:
    made without copying those weights' bytes in memory (each is read once, to its file); `proto` itself where it
    has none."""
    if not any(large(t) for t in proto.graph.initializer):
        return proto
    out = onnx.ModelProto()
    _copy_fields(proto, out, skip="graph")
    _copy_fields(proto.graph, out.graph, skip="initializer")
    out.graph.initializer.extend(files.stub(t) if large(t) else t for t in proto.graph.initializer)
    return out


def _copy_fields(src, dst, skip: str) -> None:
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        if repeated:
            getattr(dst, field.name).extend(value)
        elif field.message_type is not None:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)
