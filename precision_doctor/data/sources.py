"""Sample files as users keep them: `--inputs` values expanded to files, and each file's samples found from
its headers (how many, of which shapes) without reading their data.

An `--inputs` value is
- a file: `.npz`, `.npy`, polygraphy `.json` (`--save-inputs`), `.h5`/`.hdf5`;
- a directory: every file in it with one of those suffixes, in sorted order (not recursive; hidden files
  and other suffixes are skipped);
- a glob (a value that names no file and holds `*`, `?` or `[`): the files it matches, sorted, each once (by
  real path); a `..` after a wildcard (`*/..` multiplies the matches) is refused, and so are more matches than a
  run may hold samples (`glob_files`);
- never a shape: `x:[1,3,48,192]` (polygraphy's `--inputs` of shapes) is refused with a pointer to
  `--input-shapes`.

How many samples a `.npz`/`.npy` holds is decided per array against the model input of its name (`layout`):
- rank = the input's rank + 1, the other dimensions fitting the input's: samples stacked on a leading axis
  (`np.stack`), one sample per index of that axis;
- rank = the input's rank, the input's first dimension fixed at b and the array's a multiple k*b with k > 1:
  k samples concatenated along the batch axis (the layout of ModelOpt's `--calibration_data_path`; ModelOpt
  AutoCast's `--calibration_data` reads an .npz as one sample);
- rank = the input's rank otherwise: the array is one sample (as every .npz always was);
- anything else, or arrays of one file that disagree (one stacked, one not; other counts), is refused with
  a one-line hint. A `.npy` holds one array: the model must have exactly one input.
An HDF5 file is one sample (datasets at its root). A polygraphy JSON file holds a list of samples; it is
decoded whole once and spilled to disk (data/spill.py), then read one sample at a time.

Every file's samples are counted in bytes from its headers before any is read (data/arrayfiles.py `Bounds`: one
sample, the file, and the run's budget of samples and bytes, data/input_spec.py's limits); a file whose leading
dimension declares no samples is refused by name. The samples of a multi-sample file are one `FileRows` block
(data/samples.py `Rows`): its entries are made when a sample is asked for, not one object per sample up front.
"""

from __future__ import annotations

import glob
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np

from precision_doctor.data.arrayfiles import (
    NPY_HEADERS,
    ArrayRows,
    Bounds,
    declared_bytes,
    h5_shapes,
    npy_header,
    npz_headers,
    read_h5,
    read_npz,
    read_polygraphy_json,
)
from precision_doctor.data.input_spec import MAX_FILE_SAMPLES, MAX_RUN_SAMPLES
from precision_doctor.data.samples import Entry, Rows, ShapeGroup
from precision_doctor.data.spill import Spill
from precision_doctor.errors import SpecError, UserError
from precision_doctor.words import counted

SAMPLE_SUFFIXES = (".npz", ".npy", ".json", ".h5", ".hdf5")
SUFFIXES_SHOWN = ", ".join(SAMPLE_SUFFIXES)
FILES = "inputs.files"
_SHAPE = re.compile(r"^\s*(?:[^\s:/\\][^:/\\]*:)?\[\s*[-?\d]+(?:\s*,\s*[-?\d]+)*\s*\]\s*$")
_GLOB = re.compile(r"[*?\[]")


def looks_like_shape(value: str) -> bool:
    """`x:[1,3,48,192]` or `[1,3]`: polygraphy's shape syntax, not a file."""
    return bool(_SHAPE.match(value))


def expand_inputs(values: Sequence[str | Path], setting: str = FILES) -> list[Path]:
    """The sample files `values` name (files, directories, globs), in order; a one-line refusal naming the value
    for a shape, a directory without sample files, a glob that matches nothing, a missing file, and for more files
    than a run may hold samples (MAX_RUN_SAMPLES)."""
    files: list[Path] = []
    for value in map(str, values):
        path = Path(value)
        if path.is_dir():
            found = sample_files_in(path, MAX_RUN_SAMPLES)
            if not found:
                raise UserError(f"inputs {path} is a directory with no sample files in it ({SUFFIXES_SHOWN}; "
                                "subdirectories are not read)")
            files += found
        elif path.exists():
            files.append(path)
        elif looks_like_shape(value):
            raise SpecError(setting, f"{{{setting}}} {value.strip()} looks like a shape, not a file: did you mean "
                            f"{{inputs.input_shapes}} {value.strip()}?")
        elif _GLOB.search(value):
            matched = glob_files(value, MAX_RUN_SAMPLES, setting=setting)
            if not matched:
                raise SpecError(setting, f"{{{setting}}} {value}: the pattern matches no file")
            files += matched
        else:
            raise SpecError(setting, f"{{{setting}}} {path}: file not found")
        if len(files) > MAX_RUN_SAMPLES:
            raise SpecError(setting, f"{{{setting}}} {value}: more than {MAX_RUN_SAMPLES:,} sample files in all, more "
                            "samples than one run may hold")
    return files


def sample_files_in(directory: Path, limit: int | None = None, time_s: float | None = None,
                    setting: str = FILES) -> list[Path]:
    """The sample files of a directory, sorted: regular files with a SAMPLE_SUFFIXES suffix, not hidden, not in
    subdirectories. `limit`: listing stops once it has found one more (the caller refuses so many); `time_s`: a
    listing that takes longer is refused (SpecError naming `setting`)."""
    deadline = None if time_s is None else time.monotonic() + time_s
    found: list[Path] = []
    with os.scandir(directory) as it:
        for e in it:
            if deadline is not None and time.monotonic() > deadline:
                raise SpecError(setting, f"{{{setting}}} {directory}: listing the directory took too long; give "
                                "fewer files")
            if Path(e.name).suffix.lower() in SAMPLE_SUFFIXES and not e.name.startswith(".") and Path(e.path).is_file():
                found.append(Path(directory) / e.name)
                if limit is not None and len(found) > limit:
                    break
    return sorted(found)


def glob_files(value: str, limit: int, setting: str = FILES, *, parents: bool = True,
               time_s: float | None = None) -> list[Path]:
    """The files a glob matches, sorted, each once (the least name of each real path). Refused (SpecError naming
    `setting`): a `..` after a wildcard (`*/..` multiplies the matches: 6 levels of it name one file 4,096 times),
    or anywhere when not `parents`; more than `limit` matches (the iteration stops there); more than `time_s`
    seconds of matching."""
    check_pattern(value, setting, parents=parents)
    deadline = None if time_s is None else time.monotonic() + time_s
    seen: dict[str, Path] = {}
    for match in _matches(value, deadline, setting):
        if not os.path.isfile(match):
            continue
        real = os.path.realpath(match)
        seen[real] = min(seen.get(real, Path(match)), Path(match))
        if len(seen) > limit:
            raise SpecError(setting, f"{{{setting}}} {value}: the pattern matches more than {limit:,} files")
    return sorted(seen.values())


def check_pattern(value: str, setting: str = FILES, *, parents: bool = True) -> None:
    """Refuse (SpecError naming `setting`) a glob holding `..` after a wildcard, or anywhere when not `parents`."""
    parts = Path(value).parts
    wild = next((i for i, p in enumerate(parts) if _GLOB.search(p)), len(parts))
    if any(p == ".." for p in (parts if not parents else parts[wild:])):
        why = " after a wildcard (each match would name its parent again)" if parents else ""
        raise SpecError(setting, f"{{{setting}}} {value}: a pattern may not hold '..'{why}; name the directory "
                        "without it")


def _matches(value: str, deadline: float | None, setting: str) -> Iterator[str]:
    for match in glob.iglob(value):
        if deadline is not None and time.monotonic() > deadline:
            raise SpecError(setting, f"{{{setting}}} {value}: matching the pattern took too long; name fewer "
                            "directories")
        yield match


def is_glob(value: str) -> bool:
    """Whether an `--inputs` value is a pattern (a wildcard in a value that names no file)."""
    return bool(_GLOB.search(value)) and not Path(value).exists() and not looks_like_shape(value)


def static_root(value: str | Path) -> str:
    """The part of an `--inputs` value that names something on disk: a glob's leading directories without a
    wildcard (what a run directory must not hold), anything else as it is."""
    text = str(value)
    if Path(text).exists() or not _GLOB.search(text) or looks_like_shape(text):
        return text
    parts = Path(text).parts
    fixed = [p for p in parts[: next(i for i, p in enumerate(parts) if _GLOB.search(p))]]
    return str(Path(*fixed)) if fixed else "."


def expanded_or_given(values: Sequence[str | Path]) -> list[str]:
    """Each value's files where it is a directory or a glob (as `expand_inputs`), itself otherwise; never
    refuses (for fingerprints: a missing file stays in the list as it is)."""
    out: list[str] = []
    for value in map(str, values):
        try:
            out += [str(p) for p in expand_inputs([value])] if Path(value).is_dir() or _GLOB.search(value) else [value]
        except UserError:
            out.append(value)
    return out


class Layout(str, Enum):
    """How a file holds its samples."""

    ONE = "one sample"
    STACKED = "stacked"  # a leading sample axis
    CONCATENATED = "concatenated"  # along the model's fixed batch axis (ModelOpt's calibration data)


@dataclass(frozen=True)
class FileSamples:
    """The samples of one `.npz`/`.npy` by its headers: the layout, how many, and per array the rows of one
    sample (1 for stacked arrays, whose leading axis is dropped; b for concatenated ones)."""

    layout: Layout
    count: int
    rows: Mapping[str, int]


def layout(path: Path, arrays: Mapping[str, tuple[tuple[int, ...], np.dtype]],
           inputs: Mapping[str, tuple[int | None, ...]] | None) -> FileSamples:
    """How the arrays of `path` (name -> (shape, dtype), from their headers) hold samples of a model with
    `inputs` (name -> shape, None for a dynamic dimension); None: no model, one sample."""
    if inputs is None:
        return FileSamples(Layout.ONE, 1, {})
    kinds: dict[str, tuple[Layout, int, int]] = {}
    for name, (shape, _) in arrays.items():
        if name not in inputs:
            continue  # an unknown input is refused by name when the sample is read
        want = inputs[name]
        kinds[name] = _array_layout(path, name, tuple(shape), tuple(want))
    multi = {n: k for n, k in kinds.items() if k[0] != Layout.ONE}
    if not multi:
        return FileSamples(Layout.ONE, 1, {})
    single = sorted(set(kinds) - set(multi))
    if single:
        n, (kind, count, _) = next(iter(multi.items()))
        raise UserError(f"inputs file {path}: array '{n}' holds {counted(count, 'sample')} ({kind.value}, shape "
                        f"{list(arrays[n][0])}) but array '{single[0]}' is one sample (shape {list(arrays[single[0]][0])}); "
                        "give every input with the same number of samples")
    counts = {k[1] for k in multi.values()}
    if len(counts) > 1:
        shown = ", ".join(f"'{n}' {k[1]}" for n, k in multi.items())
        raise UserError(f"inputs file {path}: its arrays hold different numbers of samples ({shown}); give every "
                        "input the same number")
    count = counts.pop()
    if count == 0:
        n = next(iter(multi))
        raise UserError(f"inputs file {path}: array '{n}' has shape {list(arrays[n][0])}: its first axis holds no "
                        "samples; give at least one")
    if count > MAX_FILE_SAMPLES:
        raise UserError(f"inputs file {path} declares {count:,} samples, more than the {MAX_FILE_SAMPLES:,} one file "
                        "may hold; refused before reading it")
    kinds_seen = {k[0] for k in multi.values()}
    return FileSamples(kinds_seen.pop() if len(kinds_seen) == 1 else Layout.STACKED, count,
                       {n: k[2] for n, k in multi.items()})


def _array_layout(path: Path, name: str, shape: tuple[int, ...], want: tuple[int | None, ...]) -> tuple[Layout, int, int]:
    """(layout, samples, rows per sample) of one array against its model input's shape."""
    shown = "[" + ",".join("?" if d is None else str(d) for d in want) + "]"

    def fits(dims: tuple[int, ...], model: tuple[int | None, ...]) -> bool:
        return len(dims) == len(model) and all(m is None or m == d for d, m in zip(dims, model))

    if len(shape) == len(want) + 1:
        if fits(shape[1:], want):
            return Layout.STACKED, shape[0], 1
        raise UserError(f"inputs file {path}: array '{name}' has shape {list(shape)}: read as samples stacked on its "
                        f"first axis, each {list(shape[1:])} does not fit the model's input {shown}")
    if len(shape) == len(want):
        batch = want[0] if want else None
        if batch and shape[0] != batch and shape[0] % batch == 0 and fits(shape[1:], want[1:]):
            return Layout.CONCATENATED, shape[0] // batch, batch
        return Layout.ONE, 1, 0  # one sample (a wrong shape is refused by name when it is checked)
    raise UserError(f"inputs file {path}: array '{name}' has rank {len(shape)} (shape {list(shape)}) but the model's "
                    f"input is {shown} (rank {len(want)}): give one sample of rank {len(want)}, or samples stacked on a "
                    f"leading axis (rank {len(want) + 1}); refused from its header, before reading it")


# -- entries: where each sample lives ----------------------------------------------------------------------


class WholeFile:
    """A file that is one sample (.npz, .h5, .npy)."""

    __slots__ = ("path", "bounds", "group", "single_input")
    cached = True

    def __init__(self, path: Path, bounds: Bounds, group: ShapeGroup, single_input: str | None = None):
        self.path, self.bounds, self.group = path, bounds, group
        self.single_input = single_input  # a .npy: the model input it feeds

    @property
    def label(self) -> str:
        return str(self.path)

    def load(self) -> dict[str, np.ndarray]:
        suffix = self.path.suffix.lower()
        if suffix == ".npz":
            return read_npz(self.path, self.bounds)
        if suffix == ".npy":
            shape, dtype = npy_header(self.path)
            name = str(self.single_input)
            self.bounds.check(f"inputs file {self.path}", name, shape, dtype)
            with NPY_HEADERS:  # (numpy's header parse is not thread-safe on CPython 3.11)
                return {name: np.load(self.path, allow_pickle=False)}
        return read_h5(self.path, self.bounds)


class FileRows(Rows):
    """The `count` samples of one multi-sample .npz/.npy: per array its reader and the rows of one sample (b; stacked
    arrays: 1, the sample axis dropped); `FileRow` i when asked for."""

    def __init__(self, path: Path, count: int, readers: Mapping[str, ArrayRows], rows: Mapping[str, int],
                 layout_: Layout, group: ShapeGroup):
        self.path, self.count, self.readers, self.rows, self.layout, self.group = path, count, readers, rows, layout_, group

    def __len__(self) -> int:
        return self.count

    def entry(self, i: int) -> FileRow:
        return FileRow(self, i)


class FileRow:
    """Sample `index` of a multi-sample .npz/.npy (its `block`): per array, its rows [index*b, (index+1)*b). Equal to
    every FileRow of the same block and index (the sample cache's key)."""

    __slots__ = ("block", "index")
    cached = True

    def __init__(self, block: FileRows, index: int):
        self.block, self.index = block, index

    @property
    def path(self) -> Path:
        return self.block.path

    @property
    def group(self) -> ShapeGroup:
        return self.block.group

    @property
    def label(self) -> str:
        return f"{self.block.path} (sample {self.index})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FileRow) and other.block is self.block and other.index == self.index

    def __hash__(self) -> int:
        return hash((id(self.block), self.index))

    def load(self) -> dict[str, np.ndarray]:
        out = {}
        block = self.block
        for name, reader in block.readers.items():
            b = block.rows[name]
            arr = reader.read(self.index * b, b)
            out[name] = arr[0] if block.layout == Layout.STACKED else arr
        return out


def file_entries(paths: Sequence[Path], bounds: Bounds, inputs: Mapping[str, tuple[int | None, ...]] | None,
                 spill: Spill | None = None) -> list[Entry | Rows]:
    """Every sample of `paths`, in order, found from the files' headers (polygraphy JSON files are decoded and
    spilled to `spill`): an Entry per file of one sample, a `FileRows` block per multi-sample file. Every array is
    bounded by `bounds` before any data is read, and each file's samples are counted into its run's budget; a file
    that cannot be read is a UserError naming it."""
    entries: list[Entry | Rows] = []
    groups: dict[ShapeGroup, ShapeGroup] = {}  # one object per shape group, shared by the files of that group

    def group_of(shapes: Mapping[str, Sequence[int]]) -> ShapeGroup:
        g = ShapeGroup.of(shapes)
        return groups.setdefault(g, g)

    for path in paths:
        if spill is None and path.suffix.lower() == ".json":
            spill = Spill(bounds=bounds)  # one for every JSON file of the list
        if path.is_dir():
            raise UserError(f"inputs file {path} is a directory")
        if not path.is_file():
            raise UserError(f"inputs file not found: {path}")
        suffix = path.suffix.lower()
        where = f"inputs file {path}"
        try:
            if suffix in (".npz", ".npy"):
                entries.append(_array_file(path, bounds, inputs, group_of))
            elif suffix == ".json":
                entries += _json_file(path, bounds, spill)
            elif suffix in (".h5", ".hdf5"):
                shapes = h5_shapes(path, bounds)
                nbytes = bounds.sample(where, shapes)
                bounds.count(where, 1, nbytes)
                entries.append(WholeFile(path, bounds, group_of({k: v[0] for k, v in shapes.items()})))
            else:
                raise UserError(f"inputs file {path}: unknown format (use {SUFFIXES_SHOWN})")
        except UserError:
            raise
        except OSError as exc:
            raise UserError(f"cannot read inputs file {path}: {exc.strerror or exc}") from exc
        except Exception as exc:
            raise UserError(f"cannot read inputs file {path}: {type(exc).__name__}: {str(exc)[:150]}") from exc
    return entries


def _array_file(path: Path, bounds: Bounds, inputs: Mapping[str, tuple[int | None, ...]] | None,
                group_of) -> Entry | Rows:
    where = f"inputs file {path}"
    if path.suffix.lower() == ".npy":
        names = list(inputs) if inputs is not None else list(bounds.sizes or [])
        if len(names) != 1:
            raise UserError(f"{where} is a single .npy array, but the model has {len(names)} inputs "
                            f"({', '.join(names) or 'unknown'}): save the sample(s) with np.savez(path, input_name=array)")
        arrays = {names[0]: npy_header(path)}
    else:
        arrays = npz_headers(path)
        if not arrays:
            wanted = list(inputs) if inputs is not None else list(bounds.sizes or [])
            raise UserError(f"{where} holds no arrays; the model's inputs are "
                            f"{', '.join(repr(n) for n in wanted) or 'unknown'}: save them with np.savez(path, name=array)")
    found = layout(path, arrays, inputs)
    if found.layout == Layout.ONE:
        for name, (shape, dtype) in arrays.items():
            bounds.check(where, name, shape, dtype)
        nbytes = bounds.sample(where, arrays)
        bounds.count(where, 1, nbytes)
        single = next(iter(arrays)) if path.suffix.lower() == ".npy" else None
        return WholeFile(path, bounds, group_of({k: v[0] for k, v in arrays.items()}), single)
    one: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    for name, (shape, dtype) in arrays.items():
        b = found.rows.get(name)
        if b is None:
            bounds.check(where, name, shape, dtype)  # an array of no model input: refused here by name
            continue
        one[name] = (shape[1:] if found.layout == Layout.STACKED else (b, *shape[1:]), dtype)
        bounds.check(where, name, *one[name])
    sample_bytes = bounds.sample(where, one)
    bounds.file(where, sum(declared_bytes(shape, dtype) for shape, dtype in arrays.values()))
    bounds.count(where, found.count, found.count * sample_bytes)
    single_npy = path.suffix.lower() == ".npy"
    readers = {name: ArrayRows(path, None if single_npy else name) for name in one}
    return FileRows(path, found.count, readers, found.rows, found.layout, group_of({k: v[0] for k, v in one.items()}))


def _json_file(path: Path, bounds: Bounds, spill: Spill) -> list[Entry]:
    where = f"inputs file {path}"
    data = read_polygraphy_json(path, bounds.largest, holder="the model's largest input" if bounds.sizes else "")
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise UserError(f"{path}: not a polygraphy inputs file (expected a list of feed dicts)")
    if not data:
        raise UserError(f"inputs file {path} holds no samples (an empty list)")
    entries: list[Entry] = []
    total = 0
    for i in range(len(data)):
        sample = {}
        for k, v in data[i].items():
            try:
                arr = np.asarray(v)
            except ValueError:  # ragged lists
                arr = np.empty(0, dtype=object)
            if arr.dtype == object:
                raise UserError(f"inputs file {path}: input '{k}' is not a numeric array (ragged or mixed lists?)")
            bounds.check(where, str(k), arr.shape, arr.dtype)
            sample[str(k)] = arr
        nbytes = bounds.sample(where, {k: (a.shape, a.dtype) for k, a in sample.items()})
        total += nbytes
        bounds.file(where, total)
        bounds.count(where, 1, nbytes)
        entries.append(spill.add(sample, str(path) if len(data) == 1 else f"{path} (sample {i})", path))
        data[i] = None  # spilled: let it go
    return entries
