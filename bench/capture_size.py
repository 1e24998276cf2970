"""The capture's size estimated before it starts (pipeline/capture_size.py) against the activations.h5 a real
`compare` capture writes (before any `capture.keep` reduces it).

Each model is captured in this process (`pipeline.compare.run_compare`, the recipe's samples and tolerance, the
default settings: no compression) into a temporary run directory, removed once measured (these files are GBs).

    .venv/bin/python bench/capture_size.py --zoo /work/main/zoo
    .venv/bin/python bench/capture_size.py --model layout.onnx --samples 2    # generated samples
    .venv/bin/python bench/capture_size.py --model nudenet-320n.onnx --samples 8 --input-shapes 'images:[1,3,320,320]'
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from _common import table, write_results

from precision_doctor.batch.recipes import discover
from precision_doctor.data.inputs import InputValues
from precision_doctor.data.workload import load_workload
from precision_doctor.pipeline.capture_size import estimate
from precision_doctor.pipeline.compare import ACTIVATIONS, run_compare
from precision_doctor.spec import CaptureSpec, InputSpec, RunSpec


def measure(name: str, spec: RunSpec, capture_samples: int, where: Path) -> dict:
    work = load_workload(spec.model, spec.inputs, InputValues.parse(spec.inputs))
    work.choose_capture(capture_samples)
    t = time.perf_counter()
    size = estimate(work.model, work.captured())
    estimate_s = time.perf_counter() - t
    out = Path(tempfile.mkdtemp(prefix="capture-size-", dir=where))
    try:
        t = time.perf_counter()
        run_compare(work, spec.precision, spec.tolerance, out, CaptureSpec(max_samples=capture_samples),
                    rules=spec.backends.emulation_rules)
        capture_s = time.perf_counter() - t
        real = (out / ACTIVATIONS).stat().st_size
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"model": name, "nodes": len(work.model.nodes), "samples": size.samples, "estimate": size.nbytes,
            "real": real, "ratio": size.nbytes / real, "guessed": len(size.guessed), "estimate_s": estimate_s,
            "capture_s": capture_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, help="a zoo directory: every model with its recipe")
    ap.add_argument("--only", nargs="*", help="zoo models to measure (default: all)")
    ap.add_argument("--model", type=Path, action="append", default=[], help="a model run on generated samples")
    ap.add_argument("--samples", type=int, default=2, help="generated samples for --model")
    ap.add_argument("--input-shapes", nargs="*", default=[], help="NAME:[d0,d1,...] for --model's dynamic inputs")
    ap.add_argument("--capture-samples", type=int, default=CaptureSpec().max_samples)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where the captures are written")
    args = ap.parse_args()
    todo = []
    if args.zoo:
        todo += [(s.name, s.spec) for s in discover(args.zoo, RunSpec(model="")) if not s.error
                 and (not args.only or s.name in args.only)]
    todo += [(m.stem, RunSpec(str(m), inputs=InputSpec(samples=args.samples,
                                                                    input_shapes=tuple(args.input_shapes)))) for m in args.model]
    rows = []
    for name, spec in todo:
        r = measure(name, spec, args.capture_samples, args.dir)
        rows.append(r)
        print(f"{name}: estimate {r['estimate']:,} B, activations.h5 {r['real']:,} B ({r['ratio']:.3f})", flush=True)
    keys = ["model", "nodes", "samples", "estimate", "real", "ratio", "guessed", "estimate_s", "capture_s"]
    print(table(["model", "nodes", "captured samples", "estimate B", "activations.h5 B", "estimate / real",
                 "tensors guessed", "estimate s", "capture s"], [[r[k] for k in keys] for r in rows]))
    print(write_results("capture_size", {"capture_samples": args.capture_samples, "rows": rows}))


if __name__ == "__main__":
    main()
