"""The HDF5 activation store: a group per run, a dataset per tensor with the sample axis first.

Layout:
    /                attrs: format version, model hash and path, settings (JSON), inputs (JSON)
    /<run>/<escaped> one dataset per tensor, shape (samples, *tensor_shape), chunked, compressed;
                     attr `onnx_name` holds the tensor's real name
    /<run>           attr `tensor_names`: JSON list of real names in capture (topological) order
    /analysis        (optional) the analysis of the runs below, kept so that it is not computed twice
Runs: `reference` (FP32, graph inputs and every node output), `lowp` (emulated low precision,
floating tensors), `local` (each node's outputs computed in low precision from exact inputs).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import h5py
import numpy as np

from precision_doctor import storage
from precision_doctor.errors import UserError

FORMAT_VERSION = 1
REFERENCE, LOWP, LOCAL = "reference", "lowp", "local"
_CHUNK_BYTES = 4 << 20


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
        if mode == "r" and self.file.attrs.get("format") != "precision-doctor-activations":
            raise UserError(f"{self.path} is not a precision-doctor activations file")

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

    def attr(self, key: str, default=None):
        v = self.file.attrs.get(key, default)
        if isinstance(v, str) and v[:1] in "[{":
            return json.loads(v)
        return v

    # -- writing ----------------------------------------------------------------------------
    def write(self, run: str, name: str, sample: int, n_samples: int, value: np.ndarray) -> None:
        """Store `value` as sample `sample` of tensor `name` in `run` (the dataset is closed right after, so
        that its chunk reaches the disk here, where a failure can be seen, not when h5py frees it)."""
        value = np.asarray(value)
        with self._writing(value.nbytes):
            grp = self.file.require_group(run)
            key = escape(name)
            if key not in grp:
                chunks = None
                if value.size and value.nbytes <= _CHUNK_BYTES:
                    chunks = (1, *value.shape)
                elif value.size:
                    chunks = True
                ds = grp.create_dataset(
                    key,
                    shape=(n_samples, *value.shape),
                    dtype=value.dtype,
                    chunks=chunks,
                    compression=self.compression if chunks else None,
                )
                ds.attrs["onnx_name"] = name
                self._names.setdefault(run, self.tensor_names(run)).append(name)
            else:
                ds = grp[key]
            if ds.shape[1:] != value.shape:
                raise UserError(
                    f"tensor '{name}' has shape {list(value.shape)} in sample {sample} but {list(ds.shape[1:])} "
                    "in sample 0; capture needs samples of one shape"
                )
            ds[sample] = value
            ds.id.close()

    def write_text(self, key: str, text: str) -> None:
        """A text dataset `key` at the root (not a run), replaced if present."""
        with self._writing(len(text.encode())):
            if key in self.file:
                del self.file[key]
            self.file[key] = text

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
        return run in self.file and escape(name) in self.file[run]

    def dataset(self, run: str, name: str) -> h5py.Dataset:
        return self.file[run][escape(name)]

    def read(self, run: str, name: str, sample: int | None = None) -> np.ndarray:
        ds = self.dataset(run, name)
        return np.asarray(ds[()] if sample is None else ds[sample])  # 0-d stays an array for ORT

    def read_text(self, key: str) -> str | None:
        """The text dataset `key` at the root, or None."""
        if key not in self.file or isinstance(self.file[key], h5py.Group):
            return None
        value = self.file[key][()]
        return value.decode() if isinstance(value, bytes) else str(value)

    def n_samples(self) -> int:
        return int(self.file.attrs.get("samples", 0))

    def iter_samples(self, run: str, name: str) -> Iterator[np.ndarray]:
        ds = self.dataset(run, name)
        for i in range(ds.shape[0]):
            yield ds[i]
