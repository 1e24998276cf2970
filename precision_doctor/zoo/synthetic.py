"""Inputs rendered at fetch time for models whose real inputs cannot be shipped: text pages and lines
for the OCR detector and recognizer, and direction-classifier crops chosen by the FP32 model."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from precision_doctor.errors import UserError

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


@contextlib.contextmanager
def cls_prob_180(model_path: Path, height: int, width: int) -> Iterator[Callable[[np.ndarray], float]]:
    """p('180') of the FP32 model as precision-doctor's reference computes it (ORT CPU), while in the block (its
    session is closed at the end)."""
    from precision_doctor.backends.reference import ReferenceRunner
    from precision_doctor.graph.model import load_model

    model = load_model(model_path, input_shapes={"x": [1, 3, height, width]})
    with ReferenceRunner(model) as runner:
        yield lambda x: float(next(iter(runner.run({"x": x}).values())).reshape(-1)[1])


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
