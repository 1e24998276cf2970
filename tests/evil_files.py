"""Files an attacker (or a careless colleague) hands over, as issue 19's tester made them: HDF5 samples that read
other files, allocation bombs, models whose node names are shell commands or not UTF-8. Shared by
tests/test_security_files.py and the bad-input replay's fixtures."""

from __future__ import annotations

import io
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


def npz_bomb(path: Path, elements: int = 2**29, level: int = 1) -> Path:
    """An .npz whose member x.npy holds `elements` float32 zeros (2 GiB by default), deflated to a few MB."""
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f4", "fortran_order": False, "shape": (elements,)})
    chunk = bytes(1 << 24)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as z:
        with z.open("x.npy", "w", force_zip64=True) as m:
            m.write(head.getvalue())
            left = elements * 4
            while left:
                m.write(chunk[: min(left, len(chunk))])
                left -= min(left, len(chunk))
    return path


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
