"""Files an attacker (or a careless colleague) hands over, as issue 19's tester made them: HDF5 samples that read
other files, allocation bombs, models whose node names are shell commands or not UTF-8; and issue 32's: wide text
dtypes that few elements make gigabytes of, files declaring a million samples each, leading dimensions of zero or
below. Shared by tests/cli/test_security_files.py, tests/data/test_bounded_inputs.py and the bad-input replay's fixtures."""

from __future__ import annotations

import base64
import io
import json
import zipfile
from pathlib import Path

import h5py
import numpy as np
import onnx
from onnx import helper

from precision_doctor import planted

INJECTED = "maxnode\ntouch {marker} #"  # the tester's forced-FP32 node name, a shell line once printed bare


def evil_h5(root: Path, shape=(2, 16)) -> dict[str, Path]:
    """Four HDF5 "samples" of input x that read another file: external raw storage (/etc/passwd), an external
    link, a virtual dataset (both to target.h5, written here) and a soft link to an external link."""
    n = int(np.prod(shape))
    with h5py.File(root / "target.h5", "w") as f:
        f["x"] = np.ones(shape, np.float32)
    out = {}
    out["external_storage"] = root / "ext_storage.h5"
    with h5py.File(out["external_storage"], "w") as f:
        f.create_dataset("x", shape=shape, dtype="float32", external=[("/etc/passwd", 0, 4 * n)])
    out["external_link"] = root / "ext_link.h5"
    with h5py.File(out["external_link"], "w") as f:
        f["x"] = h5py.ExternalLink("target.h5", "/x")
    out["virtual"] = root / "virtual.h5"
    layout = h5py.VirtualLayout(shape=shape, dtype="float32")
    layout[:] = h5py.VirtualSource("target.h5", "x", shape=shape)
    with h5py.File(out["virtual"], "w") as f:
        f.create_virtual_dataset("x", layout)
    out["soft_link"] = root / "soft_link.h5"
    with h5py.File(out["soft_link"], "w") as f:
        f.create_group("g")["e"] = h5py.ExternalLink("target.h5", "/x")
        f["x"] = h5py.SoftLink("/g/e")
    return out


def h5_bomb(path: Path, elements: int = 2**29) -> Path:
    """An HDF5 file of about 1,400 bytes whose dataset x declares `elements` float32 (2 GiB by default):
    nothing is written, so every chunk reads as the fill value."""
    with h5py.File(path, "w") as f:
        f.create_dataset("x", shape=(elements // 2, 2), dtype="float32", chunks=(2**20, 2), compression="gzip")
    return path


def npz_bomb(path: Path, elements: int = 2**29, level: int = 1, shape: tuple[int, ...] | None = None,
             descr: str = "<f4", name: str = "x", data: bool = True) -> Path:
    """An .npz whose member `name`.npy holds `elements` float32 zeros (2 GiB by default), deflated to a few MB; or
    zeros of `shape` and `descr` (`data` False: the header alone, as a file cut short)."""
    shape = (elements,) if shape is None else shape
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": descr, "fortran_order": False, "shape": shape})
    chunk = bytes(1 << 24)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as z:
        with z.open(f"{name}.npy", "w", force_zip64=True) as m:
            m.write(head.getvalue())
            left = int(np.prod(shape)) * np.dtype(descr).itemsize if data and min(shape, default=1) > 0 else 0
            while left:
                m.write(chunk[: min(left, len(chunk))])
                left -= min(left, len(chunk))
    return path


def wide_text_h5(path: Path, width: int = 2**25, shape: tuple[int, ...] = (2, 16)) -> Path:
    """The tester's HDF5 sample of about 1,400 bytes: dataset x of `shape` fixed-width byte strings of `width` bytes
    each (32 MiB: 1 GiB in all by default), nothing written (every element reads as the fill value)."""
    with h5py.File(path, "w") as f:
        f.create_dataset("x", shape=shape, dtype=f"S{width}")
    return path


def wide_text_npz(path: Path, width: int = 2**25, shape: tuple[int, ...] = (2, 16)) -> Path:
    """An .npz of a few MB whose x.npy declares `shape` of byte strings `width` wide (1 GiB by default), all there."""
    return npz_bomb(path, shape=shape, descr=f"|S{width}")


def polygraphy_payload_json(path: Path, npz: Path, name: str = "x") -> Path:
    """A polygraphy inputs JSON of one sample whose array `name` is the old .npz payload form (the .npz file `npz`)."""
    payload = {"array": base64.b64encode(npz.read_bytes()).decode(), "polygraphy_class": "ndarray"}
    path.write_text(json.dumps([{name: payload}]))
    return path


def million_samples_npz(path: Path, samples: int = 2**20, sample_shape: tuple[int, ...] = (2, 16)) -> Path:
    """The tester's .npz declaring `samples` samples of `sample_shape` float32 stacked on a leading axis (2**20 of the
    planted model's [2, 16] by default: 128 MiB of zeros, deflated to well under 1 MB)."""
    return npz_bomb(path, shape=(samples, *sample_shape), level=9)


def injected_model(marker: Path) -> onnx.ModelProto:
    """The planted cancellation model with a Max appended (forced FP32: no FP16 kernel in ONNX Runtime) named
    `INJECTED`, which would run `touch marker` where a script printed the name bare."""
    m = planted.cancellation().model
    g = m.graph
    out = g.output[0].name
    g.node.append(helper.make_node("Max", [out, "offset"], ["y_max"], name=INJECTED.format(marker=marker)))
    g.output[0].name = "y_max"
    del g.value_info[:]
    return m


def non_utf8_model(node: bool = True) -> bytes:
    """The planted cancellation model, serialized with a node name (or, `node=False`, a tensor name) that is
    not UTF-8 (protobuf hands such a field over as bytes)."""
    m = planted.cancellation().model
    placeholder = "PLACEHOLDERNAME"
    if node:
        m.graph.node[1].name = placeholder
    else:
        old = m.graph.node[1].output[0]
        m.graph.node[1].output[0] = placeholder
        for n in m.graph.node:
            n.input[:] = [placeholder if t == old else t for t in n.input]
        del m.graph.value_info[:]
    bad = b"bad\xff\xfe\x00name"
    bad += b"_" * (len(placeholder) - len(bad))
    return m.SerializeToString().replace(placeholder.encode(), bad)
