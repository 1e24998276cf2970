"""Capture + analysis (`compare`) before and after the streaming capture: wall time, peak RSS, bytes written, the
longest silence between progress events.

Each model runs `api.compare` in a fresh subprocess (its own peak RSS, `getrusage`), on the CPU, with the default
capture settings (8 captured samples, `capture.keep` default); bytes written are the process's write() bytes
(/proc/self/io `wchar`) and activations.h5's size; `cpu_s` the process's CPU seconds (user + system, loading the
model included) and `load_at_end` the machine's load average, since other work on the machine skews wall times.

    .venv/bin/python bench/stream_capture.py example nudenet minilm --zoo /tmp/stream-zoo --models /tmp/stream-models
    .venv/bin/python bench/stream_capture.py example nudenet mpnet isnet --before /tmp/before --label chained

`--before DIR`: each model with DIR's precision_doctor, then with this tree's, and the ratios (after / before).
`isnet`, `mpnet`: bench/large_prepare.py's ISNet 1024x1024 and MPNet-base (`--large`, `--large-samples` each).

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
    if name in ("isnet", "mpnet"):  # bench/large_prepare.py's models: the first LARGE_SAMPLES samples, all captured
        folder = models / f"{name}-feeds"
        files = tuple(sorted(str(p) for p in folder.glob("s*.npz")))
        about = json.loads((folder / "about.json").read_text())
        return RunSpec(about["onnx"], inputs=InputSpec(files=files), tolerance=Tolerance(**about["tolerance"]),
                       capture=CaptureSpec(max_samples=len(files)) if keep is None else CaptureSpec(
                           max_samples=len(files), keep=keep))
    raise SystemExit(f"unknown model {name}")


LARGE = {"isnet": "isnet-1024", "mpnet": "mpnet-base"}


def large_feeds(name: str, large: Path, models: Path, n: int) -> None:
    """MODELS/<name>-feeds: the first `n` samples of a large model (bench/large_prepare.py's folder `large`) as the
    npz feeds `diagnose --inputs` reads, with the model's path and tolerance."""
    sys.path.insert(0, str(ROOT / "bench"))
    from _large_data import large_models

    m = large_models(large, {LARGE[name]})[0]
    folder = models / f"{name}-feeds"
    for old in folder.glob("s*.npz"):
        old.unlink()
    m.write_feeds(folder, only=list(range(n)))
    (folder / "about.json").write_text(json.dumps({"onnx": str(m.onnx_path.resolve()), "tolerance": m.tolerance}))


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
    ap.add_argument("--large", type=Path, default=ROOT / ".large", help="bench/large_prepare.py's folder (isnet, mpnet)")
    ap.add_argument("--large-samples", type=int, default=2, help="samples of isnet and mpnet (all captured)")
    ap.add_argument("--before", type=Path, default=None,
                    help="a folder holding an earlier precision_doctor/ (git archive REV precision_doctor | tar -x -C "
                         "DIR): each model runs with it, then with this tree, side by side")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.models[0], args.zoo, args.model_dir, args.out, args.keep)))
        return
    rows = []
    codes = [("before", args.before), (args.label, None)] if args.before else [(args.label, None)]
    for name in args.models:
        if name in LARGE:
            large_feeds(name, args.large, args.model_dir, args.large_samples)
        for label, package in codes:
            with tempfile.TemporaryDirectory(prefix="pd-stream-bench-") as tmp:
                cmd = [sys.executable, __file__, name, "--zoo", str(args.zoo), "--models", str(args.model_dir),
                       "--child", "--out", str(Path(tmp) / "run")] + (["--keep", args.keep] if args.keep else [])
                env = dict(os.environ)
                if package is not None:  # its precision_doctor first (this script's folder is not the tree's root)
                    env["PYTHONPATH"] = os.pathsep.join([str(package.resolve()), env.get("PYTHONPATH", "")])
                done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
                row = json.loads(done.stdout.strip().splitlines()[-1])
                row["label"] = label
                print(json.dumps(row), flush=True)
                rows.append(row)
        if args.before:
            b, a = rows[-2], rows[-1]
            print(f"{name}: wall {a['wall_s'] / b['wall_s']:.2f}x, peak RSS {a['peak_rss_mib'] / b['peak_rss_mib']:.2f}x, "
                  f"written {a['written_bytes'] / max(b['written_bytes'], 1):.2f}x, same top layers: "
                  f"{a['top'] == b['top']}", flush=True)
    write_results(f"stream_capture_{args.label}", {"rows": rows})


if __name__ == "__main__":
    main()
