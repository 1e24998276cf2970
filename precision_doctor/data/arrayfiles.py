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
  chunk shape) and an array with more elements than the model's input of that name holds (or, where a
  dimension is dynamic, `MAX_ELEMENTS`) is refused before any data is read or decompressed. A JSON
  array's data is its payload: a .npy payload must hold the bytes its header declares (it cannot be larger
  than the file; its shape is checked against the model after reading), while the old .npz payloads
  (compressed) are bounded like .npz files and may inflate to `MAX_ELEMENTS` elements per file in all.

Every refusal is a UserError naming the file and the array (exit 2).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib import format as npy

from precision_doctor.errors import UserError

MAX_ELEMENTS = 2**28  # per array where the model fixes no size (1 GiB of float32); also a JSON file's .npz payloads
MAX_SHOWN = "2**28 = 268,435,456"
# HDF5 filters built into the library (h5py.h5z.FILTER_*): any other needs a plugin loaded from disk.
BUILTIN_FILTERS = frozenset({1, 2, 3, 4, 5, 6, 32000})  # deflate, shuffle, fletcher32, szip, nbit, scaleoffset, lzf
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_POLYGRAPHY_ARRAY = ("ndarray", "__polygraphy_encoded_ndarray")
_POLYGRAPHY_TENSOR = ("Tensor", "__polygraphy_encoded_Tensor")


@dataclass(frozen=True)
class Bounds:
    """The most elements each named array of a file may hold, known before it is read. `sizes`: the model's
    inputs, each with its element count (None where a dimension is dynamic: MAX_ELEMENTS); a name outside it
    is refused before reading (the model has no such input). `sizes` None: no model, any name, MAX_ELEMENTS."""

    sizes: Mapping[str, int | None] | None = None

    @property
    def largest(self) -> int:
        if self.sizes is None:
            return MAX_ELEMENTS
        return max((MAX_ELEMENTS if n is None else n for n in self.sizes.values()), default=0)

    def check(self, where: str, name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
        """Refuse an array of `shape` and `dtype` (from its header) that the model has no input for, that is
        not plain numbers, or that holds more elements than the input can take."""
        if self.sizes is not None and name not in self.sizes:
            raise UserError(unknown_input(where, name, list(self.sizes)))
        size = self.sizes.get(name) if self.sizes is not None else None
        check_array(where, name, shape, dtype, MAX_ELEMENTS if size is None else size,
                    "" if size is None else f"the model's input '{name}'")


def check_array(where: str, name: str | None, shape: tuple[int, ...], dtype: np.dtype, limit: int, holder: str = "") -> None:
    """Refuse an array that is not plain numbers, or has more than `limit` elements (`holder` says whose
    limit it is: a model input; empty for MAX_ELEMENTS)."""
    label = f"array '{name}'" if name else "an array"
    if dtype.hasobject or dtype.fields is not None or dtype.kind not in "biufcSU":
        raise UserError(f"{where}: {label} holds {_dtype_words(dtype)}, not numbers; give numeric arrays")
    count = math.prod(int(d) for d in shape)
    if count > limit:
        what = f"{holder} holds {limit:,}" if holder else f"the limit for one array is {MAX_SHOWN} elements"
        raise UserError(f"{where}: {label} declares shape {list(shape)} ({count:,} elements), but {what}; "
                        "refused before reading it")


def unknown_input(where: str, name: str, inputs: list[str]) -> str:
    return f"{where}: unknown input '{name}'; model inputs are: {', '.join(inputs)}"


def _dtype_words(dtype: np.dtype) -> str:
    return "Python objects" if dtype.hasobject else f"values of type {dtype}"


# -- .npz ---------------------------------------------------------------------------------------------


def read_npz(path: Path, bounds: Bounds) -> dict[str, np.ndarray]:
    """One .npz sample: every member a .npy array, checked by its header, then read (numpy's reader,
    `allow_pickle=False`)."""
    with open(path, "rb") as f:
        head = f.read(8)
    if not head:
        raise UserError(f"inputs file {path} is empty")
    if head.startswith(npy.MAGIC_PREFIX):
        raise UserError(f"inputs file {path} is a single .npy array, not an .npz archive: save the sample with "
                        "np.savez(path, input_name=array)")
    if not head.startswith(_ZIP_MAGIC):
        raise UserError(f"inputs file {path} is not an .npz archive (no zip inside): save the sample with np.savez")
    where = f"inputs file {path}"
    try:
        with zipfile.ZipFile(path) as zf:
            return _npz_arrays(zf, where, lambda name, shape, dtype: bounds.check(where, name, shape, dtype))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
        raise UserError(f"{where} is a damaged .npz archive (cut short?): {exc}") from exc


def _npz_arrays(zf: zipfile.ZipFile, where: str, check: Callable[[str, tuple, np.dtype], None],
                first_only: bool = False) -> dict[str, np.ndarray]:
    """The arrays of an open .npz: all headers checked (`check(name, shape, dtype)`) before any is read."""
    members: dict[str, zipfile.ZipInfo] = {}
    for info in zf.infolist():
        name = info.filename.removesuffix(".npy")
        if name in members:
            raise UserError(f"{where}: array '{name}' is stored twice in the archive")
        shape, dtype = _member_header(zf, info, where, name)
        check(name, shape, dtype)
        members[name] = info
        if first_only:
            break
    out = {}
    for name, info in members.items():
        with zf.open(info) as member:
            try:
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
    version = npy.read_magic(f)
    if version == (1, 0):
        shape, _, dtype = npy.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, _, dtype = npy.read_array_header_2_0(f)
    else:
        raise ValueError(f".npy format version {version} (only 1.0 and 2.0 hold plain arrays)")
    return tuple(shape), dtype


# -- HDF5 ---------------------------------------------------------------------------------------------


def read_h5(path: Path, bounds: Bounds) -> dict[str, np.ndarray]:
    """One HDF5 sample: each dataset at the file's root (its `onnx_name` attribute or its own name), checked
    before it is read; links other than hard links, external storage, virtual datasets and plugin filters
    are refused. Groups are not read."""
    import h5py

    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise UserError(f"inputs file {path} is not a readable HDF5 file ({str(exc).split('(')[-1].rstrip(')')})") from exc
    out = {}
    with f:
        for key in f:
            link = f.get(key, getlink=True)
            where = f"inputs file {path}: dataset '{key}'"
            if isinstance(link, h5py.ExternalLink):
                raise UserError(f"{where} is an external link to {link.filename}:{link.path}; a sample file must "
                                "hold its data itself")
            if isinstance(link, h5py.SoftLink):
                raise UserError(f"{where} is a soft link to {link.path}; a sample file must hold its data itself "
                                "(hard links only)")
            if not isinstance(link, h5py.HardLink):
                raise UserError(f"{where} is a {type(link).__name__}; a sample file must hold its data itself")
            ds = f.get(key)
            if not isinstance(ds, h5py.Dataset):
                continue
            if ds.is_virtual:
                raise UserError(f"{where} is a virtual dataset (it maps other files); a sample file must hold its "
                                "data itself")
            if ds.external:
                files = ", ".join(sorted({str(e[0]) for e in ds.external}))
                raise UserError(f"{where} keeps its data in external file(s) ({files}); a sample file must hold its "
                                "data itself")
            name = _onnx_name(ds, key, where)
            _check_filters(ds, where)
            bounds.check(f"inputs file {path}", name, tuple(ds.shape), ds.dtype)
            if ds.chunks is not None:  # a chunk is decompressed whole: its declared size counts too
                bounds.check(f"inputs file {path}", name, tuple(ds.chunks), ds.dtype)
            out[name] = ds[()]
    return out


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
    data it declares, up to MAX_ELEMENTS; an .npz payload at most `limit` elements, and all of them together
    MAX_ELEMENTS). `where`
    begins every message (default "inputs file PATH"); `holder` says whose size `limit` is ("" for MAX_ELEMENTS)."""
    from polygraphy import constants
    from polygraphy.json import Decoder, from_json

    from_json("null")  # polygraphy registers its decoders on first use
    decoder = Decoder()
    budget = [MAX_ELEMENTS]
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
    need = math.prod(int(d) for d in shape) * dtype.itemsize
    if need > len(data) - f.tell():
        raise UserError(f"{where}: an array declares shape {list(shape)} ({need:,} bytes) but its payload holds "
                        f"{len(data) - f.tell():,} bytes (cut short?)")
    return np.load(io.BytesIO(data), allow_pickle=False)


def _npz_payload(data: bytes, where: str, limit: int, holder: str, budget: list[int]) -> np.ndarray:
    def check(name: str, shape: tuple, dtype: np.dtype) -> None:
        check_array(where, name, shape, dtype, limit, holder)
        check_array(where, name, shape, dtype, budget[0], f"what is left of the {MAX_SHOWN} elements the file's "
                    ".npz payloads may inflate to")
        budget[0] -= math.prod(int(d) for d in shape)

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            arrays = _npz_arrays(zf, where, check, first_only=True)  # polygraphy reads the first array only
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
        raise UserError(f"{where}: an array's .npz payload is damaged: {exc}") from exc
    if not arrays:
        raise UserError(f"{where}: an array's .npz payload holds no array")
    return next(iter(arrays.values()))
