"""The large-model benchmark's data folder (`.large/`, made by bench/large_prepare.py; issue 35).

`DATA/manifest.json` lists the models; each model is a folder `DATA/<name>/` with `model.onnx` (FP32, every
initializer inside: none is over 2 GB) and `samples.npz` (key `s<j>/<input>`: sample j's stored array). Samples are
stored compactly where the package's preprocessing can be redone here (`PREPROCESS`: the background remover's photos
as uint8 at their own size) and made into the model's feeds at load. Needs numpy only (the GPU machine has no npm,
tokenizers or espeak-ng).

For the GPU machine the folder travels in parts of at most 45 MiB (`large_prepare.py --split`): `.large-parts/pNN/`,
each with pieces `<name>/<file>.NNN`, `SHA256SUMS` and `join.sh`; there, with every part folder carried under one
folder, `bash PARTS/p00/join.sh PARTS .large` joins them and checks the SHA-256 of every file (`JOIN_SH` is the script).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MANIFEST = "manifest.json"
PART_MIB = 45

JOIN_SH = r"""#!/usr/bin/env bash
# Join the parts of the large-model benchmark (bench/large_prepare.py --split) and check every file's SHA-256.
#   bash PARTS/p00/join.sh PARTS DEST      (PARTS: the folder holding p00, p01, ...; DEST: e.g. .large)
set -euo pipefail
parts=${1:?the folder holding p00 p01 ...}; dest=${2:?where the joined folder goes}
mkdir -p "$dest"
sums=$(ls "$parts"/p*/SHA256SUMS | head -1)
while read -r sha file; do
  mkdir -p "$dest/$(dirname "$file")"
  ls "$parts"/p*/"$file".[0-9][0-9][0-9] | awk -F. '{print $NF" "$0}' | sort -n | cut -d' ' -f2- | xargs cat > "$dest/$file"
  echo "$sha  $dest/$file" | sha256sum -c --quiet - || { echo "join: $file: SHA-256 mismatch" >&2; exit 1; }
done < "$sums"
echo "joined $(wc -l < "$sums") files into $dest"
"""


def imgly_resize(u8: np.ndarray, size: int = 1024) -> np.ndarray:
    """@imgly/background-removal-node's tensorResizeBilinear (no half-pixel offset, neighbours floor/ceil, the result
    rounded as Math.round does) of an HWC uint8 image to size x size."""
    h, w, _ = u8.shape
    src_x = np.arange(size) * (w / size)
    src_y = np.arange(size) * (h / size)
    x1, y1 = np.floor(src_x).astype(int), np.floor(src_y).astype(int)
    x2, y2 = np.minimum(np.ceil(src_x).astype(int), w - 1), np.minimum(np.ceil(src_y).astype(int), h - 1)
    dx, dy = (src_x - x1)[None, :, None], (src_y - y1)[:, None, None]
    a = u8.astype(np.float64)
    v = ((1 - dx) * (1 - dy) * a[y1][:, x1] + dx * (1 - dy) * a[y1][:, x2] + (1 - dx) * dy * a[y2][:, x1]
         + dx * dy * a[y2][:, x2])
    return np.floor(v + 0.5).clip(0, 255).astype(np.uint8)


def imgly(u8: np.ndarray) -> np.ndarray:
    """The package's runInference: resize to 1024x1024, then tensorHWCtoBCHW ((x - 128) / 256, RGB planes)."""
    x = (imgly_resize(u8[:, :, :3]).astype(np.float32) - np.float32(128)) / np.float32(256)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def raw(a: np.ndarray) -> np.ndarray:
    return a


PREPROCESS = {"imgly": imgly, "raw": raw}


@dataclass
class LargeModel:
    """One model of the benchmark as the manifest lists it, with its samples made into feeds."""

    name: str
    about: dict  # package, version, member, sha256, params, nodes, tolerance, why_fair, labels, unusual, ...
    folder: Path

    @property
    def tolerance(self) -> dict:
        return self.about["tolerance"]

    @property
    def onnx_path(self) -> Path:
        return self.folder / "model.onnx"

    def samples(self) -> list[dict[str, np.ndarray]]:
        pre = PREPROCESS[self.about["preprocess"]]
        out: dict[int, dict] = {}
        with np.load(self.folder / "samples.npz", allow_pickle=False) as z:
            for key in z.files:
                j, name = key.split("/", 1)
                out.setdefault(int(j[1:]), {})[name] = pre(z[key]) if name in self.about["preprocessed"] else z[key]
        return [out[j] for j in sorted(out)]

    def write_feeds(self, dest: Path, only: list[int] | None = None) -> list[Path]:
        """One `sNNN.npz` per sample (the feeds, as `diagnose --inputs DIR` reads them) under dest."""
        dest.mkdir(parents=True, exist_ok=True)
        paths = []
        for j, feeds in enumerate(self.samples()):
            if only is None or j in only:
                paths.append(dest / f"s{j:03d}.npz")
                np.savez(paths[-1], **feeds)
        return paths


def large_models(data: Path, only: set[str] | None = None) -> list[LargeModel]:
    """The models under `data` (a folder with manifest.json) whose folder is there, in manifest order; `only`: those
    named."""
    models = json.loads((data / MANIFEST).read_text())["models"]
    return [LargeModel(m["name"], m, data / m["name"]) for m in models
            if (not only or m["name"] in only) and (data / m["name"] / "model.onnx").is_file()]
