"""Image-like synthetic inputs: smooth, natural-image-like renders instead of uniform noise.

Uniform noise is a poor stand-in for photographs: every pixel is independent, so a detector's
features and its FP16 error look nothing like they do on real images. These renders have the
statistics that matter for convolutional features: a 1/f amplitude spectrum (the power law of
natural images), large smooth regions and sharp object edges (soft-edged ellipses and rectangles
with their own colour and texture), an illumination gradient, sensor noise and 8-bit quantization.
Deterministic per seed (numpy only).
"""

from __future__ import annotations

import numpy as np


def _pink_field(rng: np.random.Generator, height: int, width: int, alpha: float) -> np.ndarray:
    """A zero-mean, unit-std random field with amplitude spectrum 1/f^alpha."""
    fy = np.fft.fftfreq(height)[:, None]
    fx = np.fft.rfftfreq(width)[None, :]
    f = np.sqrt(fx**2 + fy**2)
    f[0, 0] = 1.0
    spectrum = (rng.standard_normal(f.shape) + 1j * rng.standard_normal(f.shape)) / f**alpha
    spectrum[0, 0] = 0.0
    field = np.fft.irfft2(spectrum, s=(height, width))
    return (field - field.mean()) / (field.std() + 1e-12)


def _shape_mask(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A soft-edged (about 1 px) ellipse or rotated rectangle, values in [0, 1]."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float64)
    cy, cx = rng.uniform(0, height), rng.uniform(0, width)
    ry, rx = rng.uniform(0.05, 0.35) * height, rng.uniform(0.05, 0.35) * width
    theta = rng.uniform(0, np.pi)
    dy, dx = yy - cy, xx - cx
    u = (dx * np.cos(theta) + dy * np.sin(theta)) / rx
    v = (-dx * np.sin(theta) + dy * np.cos(theta)) / ry
    if rng.random() < 0.5:  # ellipse: signed distance ~ (r - 1) * radius
        dist = (np.sqrt(u**2 + v**2) - 1.0) * min(rx, ry)
    else:  # rectangle
        dist = np.maximum((np.abs(u) - 1.0) * rx, (np.abs(v) - 1.0) * ry)
    return np.clip(0.5 - dist, 0.0, 1.0)


def natural_image(height: int, width: int, seed: int) -> np.ndarray:
    """One render, HxWx3 float32 in [0, 1] (values on the 8-bit grid)."""
    rng = np.random.default_rng(seed)
    luminance = _pink_field(rng, height, width, alpha=rng.uniform(0.9, 1.3))
    chroma = [_pink_field(rng, height, width, alpha=1.4) for _ in range(2)]
    base_colour = rng.uniform(0.25, 0.75, 3)
    img = np.empty((height, width, 3))
    mix = rng.normal(0, 0.3, (2, 3))
    for c in range(3):
        img[..., c] = base_colour[c] + 0.15 * luminance + 0.05 * (mix[0, c] * chroma[0] + mix[1, c] * chroma[1])
    for _ in range(int(rng.integers(3, 9))):  # objects: own colour and texture, sharp edges
        mask = _shape_mask(rng, height, width)[..., None]
        texture = _pink_field(rng, height, width, alpha=rng.uniform(0.8, 1.6))[..., None]
        colour = rng.uniform(0.0, 1.0, 3) + rng.uniform(0.02, 0.12) * texture
        img = img * (1 - mask) + colour * mask
    yy, xx = np.mgrid[0:height, 0:width] / max(height, width)
    img *= (1.0 + rng.uniform(-0.25, 0.25) * (yy - 0.5) + rng.uniform(-0.25, 0.25) * (xx - 0.5))[..., None]
    img += rng.normal(0, 0.01, img.shape)
    return (np.round(np.clip(img, 0.0, 1.0) * 255) / 255).astype(np.float32)


def natural_images_nchw(n: int, height: int, width: int, seed: int = 0) -> list[np.ndarray]:
    """`n` renders as 1x3xHxW float32 in [0, 1] (RGB / 255, as YOLO-style detectors take them);
    render i uses seed `seed + i`."""
    return [np.ascontiguousarray(natural_image(height, width, seed + i).transpose(2, 0, 1)[None]) for i in range(n)]
