"""Capture + analysis (`compare`) before and after the streaming capture: wall time, peak RSS, bytes written, the
longest silence between progress events.

Each model runs `api.compare` in a fresh subprocess (its own peak RSS, `getrusage`), on the CPU, with the default
capture settings (8 captured samples, `capture.keep` default); bytes written are the process's write() bytes
(/proc/self/io `wchar`) and activations.h5's size; `cpu_s` the process's CPU seconds (user + system, loading the
model included) and `load_at_end` the machine's load average, since other work on the machine skews wall times.

    .venv/bin/python bench/stream_capture.py example nudenet minilm --zoo /tmp/stream-zoo --models /tmp/stream-models

`nudenet`: `precision-doctor zoo fetch --dest ZOO --name nudenet-320n`; `minilm`: bench/export_minilm.py MODELS.
Results in bench/out/stream_capture_LABEL.json (`--label`).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import write_results

ROOT = Path(__file__).resolve().parent.parent


def spec_for(name: str, zoo: Path, models: Path, keep: str | None):
    from precision_doctor.measure.tolerance import Tolerance
    from precision_doctor.spec import CaptureSpec, InputSpec, RunSpec

    capture = CaptureSpec() if keep is None else CaptureSpec(keep=keep)
    if name == "example":
        files = tuple(sorted(glob.glob(str(ROOT / "examples/three_defects_inputs/*.npz"))))
        return RunSpec(str(ROOT / "examples/three_defects.onnx"), inputs=InputSpec(files=files),
                       tolerance=Tolerance(1e-3, 1e-3), capture=capture)
    if name == "nudenet":
        return RunSpec(str(zoo / "nudenet-320n.onnx"), inputs=InputSpec(samples=8, input_shapes=("images:[1,3,320,320]",),
                                                                        val_ranges=("images:[0,1]",)),
                       tolerance=Tolerance(1e-3, 1e-2), capture=capture)
    if name == "minilm":
        files = tuple(sorted(glob.glob(str(models / "minilm_inputs/*.npz"))))
        return RunSpec(str(models / "minilm.onnx"), inputs=InputSpec(files=files), tolerance=Tolerance(1e-3, 1e-3),
                       capture=capture)
    raise SystemExit(f"unknown model {name}")


def child(name: str, zoo: Path, models: Path, out: Path, keep: str | None) -> dict:
    from precision_doctor import api

    spec = spec_for(name, zoo, models, keep)
    times: list[float] = []
    t0 = time.monotonic()
    result = api.compare(spec, out, progress=lambda ev: times.append(time.monotonic()))
    wall = time.monotonic() - t0
    gaps = [b - a for a, b in zip([t0, *times], [*times, time.monotonic()])]
    io = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"model": name, "wall_s": round(wall, 2), "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
            "load_at_end": [round(x, 1) for x in os.getloadavg()],
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "written_bytes": int(io["wchar"]), "activations_bytes": (out / "activations.h5").stat().st_size,
            "events": len(times), "longest_silence_s": round(max(gaps), 2),
            "top": result.analysis.ranking[:3], "passed": result.analysis.passed}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--zoo", type=Path, default=Path("/tmp/stream-zoo"))
    ap.add_argument("--models", dest="model_dir", type=Path, default=Path("/tmp/stream-models"))
    ap.add_argument("--keep", default=None, help="capture.keep (default: the RunSpec's)")
    ap.add_argument("--label", default="run")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.models[0], args.zoo, args.model_dir, args.out, args.keep)))
        return
    rows = []
    for name in args.models:
        with tempfile.TemporaryDirectory(prefix="pd-stream-bench-") as tmp:
            cmd = [sys.executable, __file__, name, "--zoo", str(args.zoo), "--models", str(args.model_dir),
                   "--child", "--out", str(Path(tmp) / "run")] + (["--keep", args.keep] if args.keep else [])
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            row = json.loads(done.stdout.strip().splitlines()[-1])
            row["label"] = args.label
            print(json.dumps(row), flush=True)
            rows.append(row)
    write_results(f"stream_capture_{args.label}", {"rows": rows})


if __name__ == "__main__":
    main()
