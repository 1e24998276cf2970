"""Samples written to disk once and read back one at a time: a data loader script's samples (iterated once:
they may not be reproducible) and the samples of a polygraphy JSON file (its format has no index: decoded
whole once, then let go).

The file is HDF5: a group per sample (`0000000`, ...) holding a dataset per input (escaped name, the real one
in its `onnx_name` attribute) and the sample's label as the group's `label` attribute. It is read back
through `data/arrayfiles.py` like any sample file (hard links only, data in the file, bounded), since a kept
spill (`loader_samples.h5` in a run directory) is a file on disk like any other. Until it is moved into a run
directory it lives in a temporary directory removed with the Spill.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

import h5py
import numpy as np

from precision_doctor import storage
from precision_doctor.data.activations import escape
from precision_doctor.data.arrayfiles import Bounds, declared_bytes, h5_sample, open_h5
from precision_doctor.data.samples import ShapeGroup
from precision_doctor.errors import UserError
from precision_doctor.runfiles import RunDir

SPILL_NAME = "samples.h5"


class Spill:
    """Samples written to one HDF5 file (`add`, then `finish`), then read one at a time (`SpillEntry`)."""

    def __init__(self, path: Path | None = None, bounds: Bounds | None = None):
        self.bounds = bounds if bounds is not None else Bounds()
        if path is None:
            tmp = Path(tempfile.mkdtemp(prefix="precision-doctor-samples-"))
            self._cleanup = weakref.finalize(self, shutil.rmtree, tmp, True)
            path = tmp / SPILL_NAME
        self.path = Path(path)
        self._writer: h5py.File | None = None
        self._reader: h5py.File | None = None
        self.count = 0
        self._groups: dict[ShapeGroup, ShapeGroup] = {}  # one object per shape group, shared by its samples

    def group(self, shapes) -> ShapeGroup:
        """The ShapeGroup of `shapes` (name -> shape), the one object every sample of that group shares."""
        g = ShapeGroup.of(shapes)
        return self._groups.setdefault(g, g)

    @classmethod
    def reopen(cls, path: Path, bounds: Bounds) -> tuple[Spill, list[SpillEntry]]:
        """A spill kept on disk (a resumed run's loader samples), and its entries, every sample checked by its
        headers as any sample file."""
        spill = cls(path, bounds)
        spill.path = Path(path)
        f = spill._read()
        entries = []
        for key in sorted(f):
            datasets = h5_sample(f, key, spill.path, bounds)
            bounds.count(f"samples file {spill.path}", 1, sum(declared_bytes(ds.shape, ds.dtype) for ds in datasets.values()))
            label = f[key].attrs.get("label", f"{path} (sample {int(key)})")
            label = label.decode("utf-8", "replace") if isinstance(label, bytes) else str(label)
            entries.append(SpillEntry(spill, key, label, spill.group({name: ds.shape for name, ds in datasets.items()})))
        spill.count = len(entries)
        return spill, entries

    def add(self, sample: dict[str, np.ndarray], label: str, source: Path | None = None) -> SpillEntry:
        if self._writer is None:
            self._writer = h5py.File(self.path, "w")
        key = f"{self.count:07d}"
        nbytes = sum(int(np.asarray(v).nbytes) for v in sample.values())
        storage.check_room(self.path, nbytes)
        try:
            grp = self._writer.create_group(key)
            grp.attrs["label"] = label
            for name, value in sample.items():
                arr = np.ascontiguousarray(value)
                ds = grp.create_dataset(escape(name), data=arr)
                ds.attrs["onnx_name"] = name
        except OSError as exc:
            full = storage.as_disk_full(exc, self.path.parent)
            raise (full or UserError(f"cannot write samples to {self.path}: {exc}")) from exc
        self.count += 1
        return SpillEntry(self, key, label, self.group({k: np.shape(v) for k, v in sample.items()}), source)

    def finish(self) -> None:
        """Writing done: the file is closed and read from now on."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def move_to(self, dest: Path, writer: RunDir | None = None) -> None:
        """Keep the samples at `dest` (in the run directory of `writer`, listed in its manifest), read from there on."""
        self.finish()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if Path(dest).resolve() == self.path.resolve():
            return
        if writer is not None:
            writer.written(dest)
        storage.check_room(dest, self.path.stat().st_size)
        shutil.move(str(self.path), str(dest))
        self.path = Path(dest)

    def _read(self) -> h5py.File:
        if self._reader is None:
            self.finish()
            self._reader = open_h5(self.path)
        return self._reader

    def read(self, key: str) -> dict[str, np.ndarray]:
        f = self._read()
        return {name: ds[()] for name, ds in h5_sample(f, key, self.path, self.bounds).items()}

    def close(self) -> None:
        for f in (self._writer, self._reader):
            if f is not None:
                f.close()
        self._writer = self._reader = None


class SpillEntry:
    """One sample of a Spill; `path`: the file it was read from (a polygraphy JSON file), None for a loader's."""

    __slots__ = ("spill", "key", "label", "group", "path")
    cached = True

    def __init__(self, spill: Spill, key: str, label: str, group: ShapeGroup, path: Path | None = None):
        self.spill, self.key, self.label, self.group, self.path = spill, key, label, group, path

    def load(self) -> dict[str, np.ndarray]:
        return self.spill.read(self.key)
