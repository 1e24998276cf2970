"""FP32 reference outputs of many samples: computed when first asked for, kept on disk, a few in memory.

`ReferenceSet` is a `Sequence[dict]` (output name -> array) over a sequence of samples: `refs[i]` runs the
FP32 reference on sample i the first time (ONNX Runtime, `backends/reference.py`), writes the outputs to
`references.h5` in the run directory (listed in its manifest; a group per sample under the set's name,
`search/0000012/<escaped output>`), and keeps the last CACHE_SAMPLES in memory. A resumed run reads what
the interrupted one computed. Without a run directory (`path` None) nothing is written and outputs are
computed again once they leave the memory cache.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import h5py
import numpy as np

from precision_doctor import storage
from precision_doctor.data.activations import escape
from precision_doctor.data.arrayfiles import Bounds, h5_datasets
from precision_doctor.data.samples import CACHE_SAMPLES, Concat, HeapTrim, Sample
from precision_doctor.errors import UserError
from precision_doctor.runfiles import RunDir

REFERENCES = "references.h5"
_CLOSED = "closed"  # attribute: True once the file was closed after its last write
Outputs = dict[str, np.ndarray]


class ReferenceFile:
    """The run directory's references.h5, opened once for all the sets that keep outputs there. It is marked
    unfinished while open and finished when closed: a file left unfinished (a kill: HDF5 writes its metadata
    when it closes, so such a file cannot be trusted) or that cannot be opened is ours (in the manifest) and
    is started again."""

    def __init__(self, path: Path, writer: RunDir | None = None):
        self.path = Path(path)
        if writer is not None:  # the run directory's manifest lists it
            writer.written(self.path)
        try:
            self.file = h5py.File(self.path, "a")
            if self.file.attrs.get(_CLOSED) is not True and self.file.attrs.get(_CLOSED) != 1:
                raise OSError("not closed")
        except OSError:
            if getattr(self, "file", None) is not None and self.file.id.valid:
                self.file.close()
            self.path.unlink(missing_ok=True)
            self.file = h5py.File(self.path, "w")
        self.file.attrs[_CLOSED] = False
        self.file.flush()

    def read(self, key: str) -> Outputs | None:
        if key not in self.file:
            return None
        found = {name: np.asarray(ds[()]) for name, ds in h5_datasets(self.file, key, self.path, Bounds())}
        order = json.loads(self.file[key].attrs.get("order", "[]"))
        return {name: found[name] for name in order if name in found} if set(order) == set(found) else found

    def write(self, key: str, outputs: Outputs) -> None:
        """Write a sample's outputs under a temporary name, then rename it: a kill leaves no half group."""
        storage.check_room(self.path, sum(int(np.asarray(v).nbytes) for v in outputs.values()))
        tmp = f"{key}.partial"
        try:
            if tmp in self.file:
                del self.file[tmp]
            grp = self.file.create_group(tmp)
            grp.attrs["order"] = json.dumps(list(outputs))
            for name, value in outputs.items():
                ds = grp.create_dataset(escape(name), data=np.asarray(value))
                ds.attrs["onnx_name"] = name
            self.file.move(tmp, key)
        except OSError as exc:
            full = storage.as_disk_full(exc, self.path.parent)
            raise (full or UserError(f"cannot write {self.path}: {exc}")) from exc

    def close(self) -> None:
        if self.file.id.valid:
            self.file.attrs[_CLOSED] = True
            self.file.close()


class ReferenceSet(Sequence[Outputs]):
    """The FP32 outputs of `samples` (see the module docstring); `run(sample)` computes one sample's."""

    def __init__(self, samples: Sequence[Sample], run: Callable[[Sample], Outputs], file: ReferenceFile | None = None,
                 name: str = "search"):
        self.samples, self.run, self.file, self.name = samples, run, file, name
        self._memory: OrderedDict[int, Outputs] = OrderedDict()
        self._trim = HeapTrim()

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        hit = self._memory.get(index)
        if hit is not None:
            self._memory.move_to_end(index)
            return hit
        key = f"{self.name}/{index:07d}"
        outputs = self.file.read(key) if self.file is not None else None
        self._trim.tick()
        if outputs is None:
            outputs = self.run(self.samples[index])
            if self.file is not None:
                self.file.write(key, outputs)
        self._memory[index] = outputs
        while len(self._memory) > CACHE_SAMPLES:
            self._memory.popitem(last=False)
        return outputs

    @contextlib.contextmanager
    def computed_beside(self) -> Iterator[threading.Lock]:
        """While the block runs, this set's outputs computed in order on a thread, as far as they get (each written
        to the file as `refs[i]` writes it); when the block ends the thread stops after its current sample and is
        joined. For a block that needs none of them and touches neither the set nor its samples: on a GPU, the
        search graph's forms timed (seconds, the GPU's) while the FP32 references take the CPU (whisper-base on the
        H200: 17 s of trial, then 12 s of references, one after the other). The block gets a lock that no sample is
        computed under: what it times it times holding the lock, undisturbed (a run's If nodes are decided on the
        host). A sample that fails there is left for its own request to fail on."""
        quiet = threading.Lock()
        if self.file is None:  # outputs not kept: computing them now would not spare computing them again
            yield quiet
            return
        done = threading.Event()

        def fill() -> None:
            for i in range(len(self)):
                with quiet:
                    if done.is_set():
                        return
                    try:
                        self[i]
                    except Exception:  # noqa: BLE001 (raised again, to the user, where the run asks for that sample)
                        return

        worker = threading.Thread(target=fill, name="references-beside", daemon=True)
        worker.start()
        try:
            yield quiet
        finally:
            done.set()
            worker.join()

    def __add__(self, other: Sequence[Outputs]) -> Concat[Outputs]:
        return Concat(self, other)

    def __radd__(self, other: Sequence[Outputs]) -> Concat[Outputs]:
        return Concat(other, self)
