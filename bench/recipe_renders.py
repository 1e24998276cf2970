"""What the GPU measuring scripts of session K share: their arguments, a zoo recipe's model at its input shapes and
natural-image renders for it (`natural_images.py`, seed 2026: the renders of bench/gpu_calibration.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from natural_images import natural_images_nchw

from precision_doctor.batch.recipes import discover
from precision_doctor.data.inputs import parse_input_shapes
from precision_doctor.graph.model import Model, load_model
from precision_doctor.spec import RunSpec

SEED = 2026


def parser(doc: str, cpu_help: str) -> argparse.ArgumentParser:
    """--zoo, --model, --fallback (a file, one node a line), --samples, --out and --cpu."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, default=Path("zoo"))
    ap.add_argument("--model", default="nudenet-320n")
    ap.add_argument("--fallback", type=Path, required=True)
    ap.add_argument("--samples", type=int, default=24)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cpu", action="store_true", help=cpu_help)
    return ap


def recipe_renders(args: argparse.Namespace) -> tuple[RunSpec, Model, list[dict], frozenset[str]]:
    """The recipe's settings, its model at the recipe's input shapes, `--samples` renders of 320x320 (the scripts
    measure nudenet-320n) fed to its first input, and `--fallback`'s set; `--out` made."""
    args.out.mkdir(parents=True, exist_ok=True)
    spec = {s.name: s for s in discover(args.zoo, RunSpec(model=""))}[args.model].spec
    model = load_model(spec.model, input_shapes=parse_input_shapes(spec.inputs.input_shapes) or None)
    samples = [{model.inputs[0]: x} for x in natural_images_nchw(args.samples, 320, 320, seed=SEED)]
    fallback = frozenset(line.strip() for line in args.fallback.read_text().splitlines() if line.strip())
    return spec, model, samples, fallback
