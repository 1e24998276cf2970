"""Arrays from files someone hands over (.npz, HDF5, polygraphy JSON): read as data, never as references,
and bounded before they are read.

A sample file can come from anyone (a colleague, a download, a daemon's upload), so:

* Nothing in it may make the reader open another file: HDF5 datasets with external raw storage, virtual
  datasets, external and soft links are refused (only hard links inside the file), and so are datasets
  whose filters need an HDF5 plugin. Nothing is unpickled: .npy headers of object arrays are refused
  before reading, every numpy load says `allow_pickle=False`, and polygraphy JSON arrays are decoded
  here (numpy's own reader) rather than by polygraphy's decoder (torch payloads are refused).
* Nothing in it may make the reader allocate more than the model can take: each array's shape and dtype
  are read from its header (the .npy header inside the zip member, the HDF5 dataset's shape, dtype and
  chunk shape) and counted in bytes (elements x itemsize) before any data is read or decompressed: an
  array of a kind the model's input is not (text or bytes for a float input), with a negative dimension,
  with more elements than the model's input of that name holds (or, where a dimension is dynamic,
  `MAX_ELEMENTS`), one sample of more than `MAX_SAMPLE_BYTES`, a file declaring more than `MAX_FILE_BYTES`
  and a run more than `MAX_RUN_SAMPLES` samples or `MAX_RUN_BYTES` (`Budget`) are refused (the limits are
  data/input_spec.py's). A JSON array's data is its payload: a .npy payload must hold the bytes its header
  declares (it cannot be larger than the file; its shape is checked against the model after reading),
  while the old .npz payloads (compressed) are bounded like .npz files and may inflate to
  `MAX_SAMPLE_BYTES` per file in all (a JSON file is decoded whole, in memory).

Every refusal is a UserError naming the file and the array (exit 2).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
import os
import threading
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.lib import format as npy

from precision_doctor.data.input_spec import (
    MAX_ELEMENTS,
    MAX_FILE_BYTES,
    MAX_RUN_BYTES,
    MAX_RUN_SAMPLES,
    MAX_SAMPLE_BYTES,
)
from precision_doctor.data.input_spec import MAX_ELEMENTS_SHOWN as MAX_SHOWN
from precision_doctor.errors import UserError

# HDF5 filters built into the library (h5py.h5z.FILTER_*): any other needs a plugin loaded from disk.
BUILTIN_FILTERS = frozenset({1, 2, 3, 4, 5, 6, 32000})  # deflate, shuffle, fletcher32, szip, nbit, scaleoffset, lzf
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
WIDEST_NUMBER = np.dtype(np.clongdouble).itemsize  # bytes of the widest plain number numpy has (32)
_POLYGRAPHY_ARRAY = ("ndarray", "__polygraphy_encoded_ndarray")
_POLYGRAPHY_TENSOR = ("Tensor", "__polygraphy_encoded_Tensor")


def binary(n: int) -> str:
    """A byte count as the limits are written: "2 GiB", "64 GiB", "1 TiB" (exact where it is no power of two)."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift:,} {unit}"
    return f"{n:,} bytes"


def declared_bytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """What an array of `shape` and `dtype` takes in memory: elements x itemsize."""
    return math.prod(int(d) for d in shape) * dtype.itemsize


@dataclass
class Budget:
    """The samples and bytes a run's files have declared so far (search and held-out samples, every loader sample);
    `add` refuses past MAX_RUN_SAMPLES or MAX_RUN_BYTES, before anything of the file that goes past is read."""

    samples: int = 0
    nbytes: int = 0

    def add(self, where: str, samples: int, nbytes: int) -> None:
        if self.samples + samples > MAX_RUN_SAMPLES:
            raise UserError(f"{where} brings the run's samples to {self.samples + samples:,}, more than the "
                            f"{MAX_RUN_SAMPLES:,} one run may hold; give fewer files (or fewer samples per file)")
        if self.nbytes + nbytes > MAX_RUN_BYTES:
            raise UserError(f"{where} brings what the run's samples declare to {self.nbytes + nbytes:,} bytes, more "
                            f"than the {binary(MAX_RUN_BYTES)} one run may read; give fewer samples")
        self.samples += samples
        self.nbytes += nbytes


@dataclass(frozen=True)
class Bounds:
    """The most each named array of a file may hold, known before it is read. `sizes`: the model's inputs, each with
    its element count (None where a dimension is dynamic: MAX_ELEMENTS); a name outside it is refused before reading
    (the model has no such input). `sizes` None: no model, any name, MAX_ELEMENTS. `dtypes`: the model's input
    types (an array must be of its input's kind: floating for a float input); None: any numbers. `budget`: what the
    run's files have declared so far (one Bounds per run, shared by its search and held-out files)."""

    sizes: Mapping[str, int | None] | None = None
    dtypes: Mapping[str, np.dtype] | None = None
    budget: Budget = field(default_factory=Budget, compare=False)

    @property
    def largest(self) -> int:
        if self.sizes is None:
            return MAX_ELEMENTS
        return max((MAX_ELEMENTS if n is None else n for n in self.sizes.values()), default=0)

    def check(self, where: str, name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
        """Refuse an array of one sample, of `shape` and `dtype` (from its header), that the model has no input for,
        that is not plain numbers of its input's kind, or that holds more elements than the input can take or more
        bytes than one sample may."""
        if self.sizes is not None and name not in self.sizes:
            raise UserError(unknown_input(where, name, list(self.sizes)))
        want = self.dtypes.get(name) if self.dtypes is not None else None
        if want is not None and dtype.kind in "biufcSU" and not dtype.hasobject and dtype.kind != want.kind:
            raise UserError(f"{where}: array '{name}' holds {_dtype_words(dtype)}, but the model's input '{name}' is "
                            f"{want}; refused before reading it")
        if want is None and dtype.kind in "SU":
            raise UserError(f"{where}: array '{name}' holds {_dtype_words(dtype)}, not numbers; give numeric arrays")
        size = self.sizes.get(name) if self.sizes is not None else None
        check_array(where, name, shape, dtype, MAX_ELEMENTS if size is None else size,
                    "" if size is None else f"the model's input '{name}'", MAX_SAMPLE_BYTES)

    def sample(self, where: str, arrays: Mapping[str, tuple[tuple[int, ...], np.dtype]]) -> int:
        """The bytes one sample's arrays (name -> (shape, dtype)) declare together; refused above MAX_SAMPLE_BYTES."""
        total = sum(declared_bytes(shape, dtype) for shape, dtype in arrays.values())
        if total > MAX_SAMPLE_BYTES:
            raise UserError(f"{where}: one sample's arrays declare {total:,} bytes together, more than the "
                            f"{binary(MAX_SAMPLE_BYTES)} one sample may hold; refused before reading it")
        return total

    def file(self, where: str, nbytes: int) -> None:
        """Refuse a file whose arrays declare more than MAX_FILE_BYTES in all."""
        if nbytes > MAX_FILE_BYTES:
            raise UserError(f"{where}: its arrays declare {nbytes:,} bytes, more than the {binary(MAX_FILE_BYTES)} one "
                            "file may hold; refused before reading it")

    def count(self, where: str, samples: int, nbytes: int) -> None:
        """Count `samples` samples of `nbytes` in all into the run's budget (refused past its limits)."""
        self.budget.add(where, samples, nbytes)


def check_array(where: str, name: str | None, shape: tuple[int, ...], dtype: np.dtype, limit: float,
                holder: str = "", byte_limit: int = MAX_FILE_BYTES) -> None:
    """Refuse an array that is not plain numbers (or text), has a negative dimension, more than `limit` elements
    (`holder` says whose limit it is: a model input; empty for MAX_ELEMENTS) or more than `byte_limit` bytes
    (MAX_SAMPLE_BYTES for one sample's array; MAX_FILE_BYTES, the default, for an array of many)."""
    label = f"array '{name}'" if name else "an array"
    if dtype.hasobject or dtype.fields is not None or dtype.kind not in "biufcSU":
        raise UserError(f"{where}: {label} holds {_dtype_words(dtype)}, not numbers; give numeric arrays")
    if any(int(d) < 0 for d in shape):
        raise UserError(f"{where}: {label} declares shape {list(shape)}, with a negative dimension; refused before "
                        "reading it")
    count = math.prod(int(d) for d in shape)
    if count > limit:
        what = f"{holder} holds {int(limit):,}" if holder else f"the limit for one array is {MAX_SHOWN} elements"
        raise UserError(f"{where}: {label} declares shape {list(shape)} ({count:,} elements), but {what}; "
                        "refused before reading it")
    nbytes = count * dtype.itemsize
    if nbytes > byte_limit:
        whose = "one sample" if byte_limit == MAX_SAMPLE_BYTES else "one file"
        raise UserError(f"{where}: {label} declares shape {list(shape)} of {dtype} ({nbytes:,} bytes), more than the "
                        f"{binary(byte_limit)} {whose} may hold; refused before reading it")


def unknown_input(where: str, name: str, inputs: list[str]) -> str:
    return f"{where}: unknown input '{name}'; model inputs are: {', '.join(inputs)}"


def _dtype_words(dtype: np.dtype) -> str:
    if dtype.hasobject:
        return "Python objects"
    return f"text of type {dtype}" if dtype.kind in "SU" else f"values of type {dtype}"


# -- .npz ---------------------------------------------------------------------------------------------


def read_npz(path: Path, bounds: Bounds) -> dict[str, np.ndarray]:
    """One .npz sample: every member a .npy array, checked by its header, then read (numpy's reader,
    `allow_pickle=False`)."""
    _check_zip_magic(path)
    where = f"inputs file {path}"
    try:
        with zipfile.ZipFile(path) as zf:
            return _npz_arrays(zf, where, lambda name, shape, dtype: bounds.check(where, name, shape, dtype),
                               whole=lambda headers: bounds.sample(where, headers))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
        raise UserError(f"{where} is a damaged .npz archive (cut short?): {exc}") from exc


def _npz_arrays(zf: zipfile.ZipFile, where: str, check: Callable[[str, tuple, np.dtype], None],
                first_only: bool = False, whole: Callable[[dict], object] | None = None) -> dict[str, np.ndarray]:
    """The arrays of an open .npz: all headers checked (`check(name, shape, dtype)`, then `whole` of all of them:
    name -> (shape, dtype)) before any is read."""
    members: dict[str, zipfile.ZipInfo] = {}
    headers: dict[str, tuple[tuple, np.dtype]] = {}
    for info in zf.infolist():
        name = info.filename.removesuffix(".npy")
        if name in members:
            raise UserError(f"{where}: array '{name}' is stored twice in the archive")
        shape, dtype = _member_header(zf, info, where, name)
        check(name, shape, dtype)
        members[name], headers[name] = info, (shape, dtype)
        if first_only:
            break
    if whole is not None:
        whole(headers)
    out = {}
    for name, info in members.items():
        with zf.open(info) as member:
            try:
                with NPY_HEADERS:
                    out[name] = npy.read_array(member, allow_pickle=False)
            except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
                raise UserError(f"{where}: array '{name}' is damaged (file cut short?): {exc}") from exc
    return out


def _member_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo, where: str, name: str) -> tuple[tuple, np.dtype]:
    """Shape and dtype from a member's .npy header (only the header is decompressed)."""
    try:
        with zf.open(info) as member:
            return _npy_header(member)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise UserError(f"{where}: member '{info.filename}' is not a readable .npy array ({exc})") from exc


def _npy_header(f) -> tuple[tuple, np.dtype]:
    shape, dtype, _ = _full_header(f)
    return shape, dtype


def npz_headers(path: Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Every member of an .npz as name -> (shape, dtype), read from the .npy headers only (non-.npy members,
    damaged archives and arrays that are not plain numbers refused); no data read. The caller bounds them and
    refuses an archive without arrays (naming the model's inputs)."""
    where = f"inputs file {path}"
    _check_zip_magic(path)
    out: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                name = info.filename.removesuffix(".npy")
                if name in out:
                    raise UserError(f"{where}: array '{name}' is stored twice in the archive")
                shape, dtype = _member_header(zf, info, where, name)
                check_array(where, name, shape, dtype, math.inf)
                out[name] = (shape, dtype)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
        raise UserError(f"{where} is a damaged .npz archive (cut short?): {exc}") from exc
    return out  # empty: the caller names the arrays it wanted


def npy_header(path: Path) -> tuple[tuple[int, ...], np.dtype]:
    """A .npy file's (shape, dtype) from its header; no data read."""
    where = f"inputs file {path}"
    with open(path, "rb") as f:
        if not f.read(len(npy.MAGIC_PREFIX)).startswith(npy.MAGIC_PREFIX):
            raise UserError(f"{where} is not a .npy array (save it with np.save)")
        f.seek(0)
        try:
            shape, dtype = _npy_header(f)
        except ValueError as exc:
            raise UserError(f"{where}: its .npy header cannot be read ({exc})") from exc
    check_array(where, None, shape, dtype, math.inf)
    return shape, dtype


def _check_zip_magic(path: Path) -> None:
    with open(path, "rb") as f:
        head = f.read(8)
    if not head:
        raise UserError(f"inputs file {path} is empty")
    if head.startswith(npy.MAGIC_PREFIX):
        raise UserError(f"inputs file {path} is a single .npy array, not an .npz archive: name it .npy, or save the "
                        "sample with np.savez(path, input_name=array)")
    if not head.startswith(_ZIP_MAGIC):
        raise UserError(f"inputs file {path} is not an .npz archive (no zip inside): save the sample with np.savez")


MAX_OPEN_ARRAYS = 16  # ArrayRows holding a file open at once (the least recently read is closed first)
_open_rows: OrderedDict[int, ArrayRows] = OrderedDict()


class ArrayRows:
    """Stretches of one array along its first axis (a .npy file, or an .npz member when `member` is given),
    read on demand without reading the rest: `read(start, count)` -> the array's rows [start, start+count).
    The array's header was checked by the caller; what its header declares must be in the file (checked when
    opened: the bytes of a .npy file or a stored member, the declared size of a compressed one). A compressed
    member is read forward from the last position (reading in order costs one pass). At most MAX_OPEN_ARRAYS
    stay open across all of them (a directory of thousands of multi-sample files must not run out of file
    descriptors); a closed one opens again when read."""

    def __init__(self, path: Path, member: str | None = None):
        self.path, self.member = Path(path), member
        self.where = f"inputs file {path}" + (f": array '{member}'" if member is not None else "")
        self._file = None  # the raw file (a .npy, or the zip read at an offset)
        self._zip = self._stream = None  # a compressed member: the archive and the open member
        self._pos = 0  # position of `_stream` within the member's data
        self._data = 0  # where the array's data starts (in the raw file, or in the member)
        self.shape: tuple[int, ...] = ()
        self.dtype = np.dtype("f4")

    def _open(self) -> None:
        if self._file is not None or self._zip is not None:
            return
        try:
            if self.member is None:
                self._file = open(self.path, "rb")
                self.shape, self.dtype, fortran = _full_header(self._file)
                self._data = self._file.tell()
                available = os.fstat(self._file.fileno()).st_size - self._data
            else:
                zf = zipfile.ZipFile(self.path)
                info = _member_info(zf, self.member)
                with zf.open(info) as m:
                    self.shape, self.dtype, fortran = _full_header(m)
                    header = m.tell()
                if info.compress_type == zipfile.ZIP_STORED:
                    self._file = open(self.path, "rb")
                    self._data = _stored_offset(self._file, info) + header
                    available = info.file_size - header
                    zf.close()
                else:
                    self._zip, self._data, available = zf, header, info.file_size - header
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, OSError) as exc:
            self.close()
            raise UserError(f"{self.where} cannot be read ({exc})") from exc
        if fortran and len(self.shape) > 1:
            self.close()
            raise UserError(f"{self.where} is stored in Fortran order; save it with np.ascontiguousarray to read its "
                            "samples one at a time")
        need = declared_bytes(self.shape, self.dtype)
        if need > available:
            self.close()
            raise UserError(f"{self.where} declares shape {list(self.shape)} ({need:,} bytes) but holds {available:,} "
                            "bytes (cut short?)")

    @property
    def row_bytes(self) -> int:
        return math.prod(self.shape[1:]) * self.dtype.itemsize

    def read(self, start: int, count: int) -> np.ndarray:
        self._open()
        _open_rows[id(self)] = self
        _open_rows.move_to_end(id(self))
        while len(_open_rows) > MAX_OPEN_ARRAYS:
            _, oldest = _open_rows.popitem(last=False)
            oldest.close()
        out = np.empty((count, *self.shape[1:]), dtype=self.dtype)
        view = memoryview(out).cast("B") if out.nbytes else memoryview(b"")
        offset = start * self.row_bytes
        try:
            if self._file is not None:
                self._file.seek(self._data + offset)
                got = self._file.readinto(view) if out.nbytes else 0
            else:
                got = self._read_member(self._data + offset, view)
        except (zipfile.BadZipFile, EOFError, OSError) as exc:
            raise UserError(f"{self.where} is damaged (file cut short?): {exc}") from exc
        if got != out.nbytes:
            raise UserError(f"{self.where} is cut short: rows {start} to {start + count - 1} are not all there")
        return out

    def _read_member(self, position: int, view: memoryview) -> int:
        if self._stream is None or position < self._pos:
            if self._stream is not None:
                self._stream.close()
            self._stream, self._pos = self._zip.open(_member_info(self._zip, self.member)), 0
        while self._pos < position:  # forward: decompress and drop
            skipped = len(self._stream.read(min(position - self._pos, 1 << 20)))
            if not skipped:
                return 0
            self._pos += skipped
        got = 0
        while got < len(view):
            n = self._stream.readinto(view[got:])
            if not n:
                break
            got += n
        self._pos += got
        return got

    def close(self) -> None:
        for f in (self._stream, self._zip, self._file):
            if f is not None:
                f.close()
        self._file = self._zip = self._stream = None
        if _open_rows.get(id(self)) is self:
            del _open_rows[id(self)]


# NumPy parses a .npy header with ast.literal_eval, which CPython 3.11 cannot run in two threads at once ("SystemError:
# AST constructor recursion depth mismatch", python/cpython gh-106905): every header this module parses, one at a time
# (threads of one process reading samples: a service's thread workers, an embedding application)
NPY_HEADERS = threading.RLock()


def _full_header(f) -> tuple[tuple[int, ...], np.dtype, bool]:
    version = npy.read_magic(f)
    with NPY_HEADERS:
        if version == (1, 0):
            shape, fortran, dtype = npy.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = npy.read_array_header_2_0(f)
        else:
            raise ValueError(f".npy format version {version} (only 1.0 and 2.0 hold plain arrays)")
    return tuple(shape), dtype, bool(fortran)


def _member_info(zf: zipfile.ZipFile, member: str) -> zipfile.ZipInfo:
    for name in (f"{member}.npy", member):
        try:
            return zf.getinfo(name)
        except KeyError:
            continue
    raise ValueError(f"no array '{member}' in the archive")


def _stored_offset(f, info: zipfile.ZipInfo) -> int:
    """Where a stored (uncompressed) member's bytes start in the zip file: after its local header."""
    f.seek(info.header_offset)
    local = f.read(30)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        raise ValueError("a member's local header is damaged")
    name_len, extra_len = int.from_bytes(local[26:28], "little"), int.from_bytes(local[28:30], "little")
    return info.header_offset + 30 + name_len + extra_len


# -- HDF5 ---------------------------------------------------------------------------------------------


def read_h5(path: Path, bounds: Bounds) -> dict[str, np.ndarray]:
    """One HDF5 sample: each dataset at the file's root (its `onnx_name` attribute or its own name), checked
    before it is read; links other than hard links, external storage, virtual datasets and plugin filters
    are refused. Groups are not read."""
    with open_h5(path) as f:
        return {name: ds[()] for name, ds in h5_sample(f, "/", path, bounds).items()}


def h5_shapes(path: Path, bounds: Bounds) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """What `read_h5` would read, by name: (shape, dtype), every check made, no data read."""
    with open_h5(path) as f:
        return {name: (tuple(ds.shape), ds.dtype) for name, ds in h5_sample(f, "/", path, bounds).items()}


def h5_sample(f, group: str, path: Path, bounds: Bounds) -> dict[str, object]:
    """The datasets of one sample (`group` of the open file `f`) by onnx name, each checked (`h5_datasets`) and
    all of them together within one sample's bytes (`Bounds.sample`); no data read."""
    found = dict(h5_datasets(f, group, path, bounds))
    where = f"inputs file {path}" + (f": group '{group}'" if group != "/" else "")
    bounds.sample(where, {name: (tuple(ds.shape), ds.dtype) for name, ds in found.items()})
    return found


def open_h5(path: Path):
    """An HDF5 file opened for reading; a UserError naming it when it is not one."""
    import h5py

    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise UserError(f"inputs file {path} is not a readable HDF5 file ({str(exc).split('(')[-1].rstrip(')')})") from exc


def h5_datasets(f, group: str, path: Path, bounds: Bounds) -> Iterator[tuple[str, object]]:
    """The datasets of `group` in the open file `f` as (onnx name, dataset), each checked before it is
    yielded (hard links only, data in the file, built-in filters, within `bounds`)."""
    import h5py

    where_group = f"inputs file {path}" + (f": group '{group}'" if group != "/" else "")
    grp = f.get(group, getlink=False)
    if not isinstance(grp, h5py.Group):
        raise UserError(f"{where_group} is not an HDF5 group")
    for key in grp:
        link = grp.get(key, getlink=True)
        where = f"inputs file {path}: dataset '{key}'" if group == "/" else f"{where_group}: dataset '{key}'"
        if isinstance(link, h5py.ExternalLink):
            raise UserError(f"{where} is an external link to {link.filename}:{link.path}; a sample file must "
                            "hold its data itself")
        if isinstance(link, h5py.SoftLink):
            raise UserError(f"{where} is a soft link to {link.path}; a sample file must hold its data itself "
                            "(hard links only)")
        if not isinstance(link, h5py.HardLink):
            raise UserError(f"{where} is a {type(link).__name__}; a sample file must hold its data itself")
        ds = grp.get(key)
        if not isinstance(ds, h5py.Dataset):
            continue
        if ds.is_virtual:
            raise UserError(f"{where} is a virtual dataset (it maps other files); a sample file must hold its "
                            "data itself")
        if ds.external:
            files = ", ".join(sorted({str(e[0]) for e in ds.external}))
            raise UserError(f"{where} keeps its data in external files ({files}); a sample file must hold its "
                            "data itself")
        name = _onnx_name(ds, key, where)
        _check_filters(ds, where)
        bounds.check(where_group, name, tuple(ds.shape), ds.dtype)
        if ds.chunks is not None:  # a chunk is decompressed whole: its declared size counts too
            bounds.check(where_group, name, tuple(ds.chunks), ds.dtype)
        yield name, ds


def _onnx_name(ds, key: str, where: str) -> str:
    name = ds.attrs.get("onnx_name", key)
    if isinstance(name, bytes):
        name = name.decode("utf-8", errors="replace")
    if not isinstance(name, str):
        raise UserError(f"{where}: its onnx_name attribute is not text")
    return name


def _check_filters(ds, where: str) -> None:
    plist = ds.id.get_create_plist()
    for i in range(plist.get_nfilters()):
        code = plist.get_filter(i)[0]
        if code not in BUILTIN_FILTERS:
            raise UserError(f"{where} is compressed with HDF5 filter {code}, which needs a plugin; save it "
                            "uncompressed or with gzip/lzf")


# -- polygraphy JSON ----------------------------------------------------------------------------------


def read_polygraphy_json(path: Path, limit: int, where: str | None = None, holder: str = "") -> object:
    """A polygraphy JSON file (`--save-inputs`, `--save-outputs`): its objects decoded by polygraphy's
    decoder, but its arrays by this module (each checked before it is read: a .npy payload must hold the
    data it declares, up to MAX_ELEMENTS; an .npz payload at most `limit` elements of a plain number's width,
    WIDEST_NUMBER bytes (wide text is refused before it inflates), and all of them together MAX_SAMPLE_BYTES: the
    file is decoded whole, in memory). `where` begins every message (default "inputs file PATH"); `holder` says
    whose size `limit` is ("" for MAX_ELEMENTS)."""
    from polygraphy import constants
    from polygraphy.json import Decoder, from_json

    from_json("null")  # polygraphy registers its decoders on first use
    decoder = Decoder()
    budget = [MAX_SAMPLE_BYTES]  # bytes the file's .npz payloads may still inflate to
    where = where or f"inputs file {path}"

    def hook(pairs: list) -> object:
        d = dict(pairs)
        legacy = [k for k, v in d.items() if isinstance(v, str) and v == constants.LEGACY_TYPE_MARKER]
        kind = legacy[0] if legacy else d.get(constants.TYPE_MARKER)
        kind = kind if isinstance(kind, str) else None
        if kind in _POLYGRAPHY_ARRAY:
            return _decode_array(d.get("array"), where, limit, holder, budget)
        if kind in _POLYGRAPHY_TENSOR:
            raise UserError(f"{where} holds a torch tensor; give numpy arrays (polygraphy saves those by default)")
        return decoder(pairs)

    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{where} is not valid JSON (not UTF-8 text)") from exc
    try:
        return json.loads(text, object_pairs_hook=hook)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where} is not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from exc
    except RecursionError as exc:
        raise UserError(f"{where} is not a polygraphy file (JSON nested too deeply)") from exc


def _decode_array(payload: object, where: str, limit: int, holder: str, budget: list[int]) -> np.ndarray:
    """A polygraphy array payload (base64 of a .npy, or of an .npz from older versions; latin-1 text in the
    oldest), checked by its header before it is read."""
    if not isinstance(payload, str):
        raise UserError(f"{where}: an array's payload is not text")
    candidates = []
    try:
        candidates.append(base64.b64decode(payload.encode("ascii"), validate=True))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        pass
    try:
        candidates.append(payload.encode("latin-1"))  # polygraphy's fallback for its oldest files
    except UnicodeEncodeError:
        pass
    for data in candidates:
        if data.startswith(npy.MAGIC_PREFIX):
            return _npy_payload(data, where)
        if data.startswith(_ZIP_MAGIC):
            return _npz_payload(data, where, limit, holder, budget)
    raise UserError(f"{where}: an array's payload is neither a .npy nor an .npz array")


def _npy_payload(data: bytes, where: str) -> np.ndarray:
    f = io.BytesIO(data)
    try:
        shape, dtype = _npy_header(f)
    except ValueError as exc:
        raise UserError(f"{where}: an array's .npy header cannot be read ({exc})") from exc
    check_array(where, None, shape, dtype, MAX_ELEMENTS)
    need = declared_bytes(shape, dtype)
    if need > len(data) - f.tell():
        raise UserError(f"{where}: an array declares shape {list(shape)} ({need:,} bytes) but its payload holds "
                        f"{len(data) - f.tell():,} bytes (cut short?)")
    with NPY_HEADERS:
        return np.load(io.BytesIO(data), allow_pickle=False)


def _npz_payload(data: bytes, where: str, limit: int, holder: str, budget: list[int]) -> np.ndarray:
    def check(name: str, shape: tuple, dtype: np.dtype) -> None:
        check_array(where, name, shape, dtype, limit, holder)
        nbytes = declared_bytes(shape, dtype)
        if nbytes > limit * WIDEST_NUMBER:
            raise UserError(f"{where}: an .npz payload's array '{name}' declares shape {list(shape)} of {dtype} "
                            f"({nbytes:,} bytes), more than {limit:,} numbers take (" + (holder or "the limit for one array")
                            + f" holds {limit:,}); refused before reading it")
        if nbytes > budget[0]:
            raise UserError(f"{where}: an .npz payload's array '{name}' declares shape {list(shape)} of {dtype} "
                            f"({nbytes:,} bytes), more than is left of the {binary(MAX_SAMPLE_BYTES)} a file's .npz "
                            "payloads may inflate to; refused before reading it")
        budget[0] -= nbytes

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            arrays = _npz_arrays(zf, where, check, first_only=True)  # polygraphy reads the first array only
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
        raise UserError(f"{where}: an array's .npz payload is damaged: {exc}") from exc
    if not arrays:
        raise UserError(f"{where}: an array's .npz payload holds no array")
    return next(iter(arrays.values()))
