"""The capture alone (`compare`) of a large model on the GPU machine: its wall time, peak host RSS, peak GPU memory and
the pace of its steps, with the capture's sessions on `--capture-device` (issue 35).

    python3 bench/gpu_capture.py --data /tmp/b/large --model isnet-1024 --samples 8 --out $OUT   # on the GPU machine
    .venv/bin/python bench/gpu_capture.py --data .large --model mpnet-base --samples 1 --capture-device cpu --out /tmp/gc

Samples: the first `--samples` of the model's (bench/large_prepare.py's `.large`), made into feeds; `compare` runs them
all through the capture (`--capture-samples` = `--samples`) with the model's tolerance. Writes capture.json (the
numbers, the bytes of the run directory among them) and compare.log (its progress) under --out.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import run_measured, written_bytes  # noqa: E402
from _large_data import large_models  # noqa: E402
from gpu_truth import GpuMemory, shapes_flags  # noqa: E402

STEP = re.compile(r"\[\s*([\d.]+)s\] capture statistics: (\d+) of (\d+)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(".large"))
    ap.add_argument("--model", required=True)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--capture-device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    found = large_models(args.data, {args.model})
    if not found:
        sys.exit(f"{args.model}: not in {args.data}")
    m = found[0]
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pd-gc-") as tmp:
        feeds = m.write_feeds(Path(tmp) / "feeds", only=list(range(args.samples)))
        tol = m.about["tolerance"]
        cmd = [sys.executable, "-m", "precision_doctor", "compare", str(m.folder / "model.onnx"), "--inputs",
               str(Path(tmp) / "feeds"), "--atol", str(tol["atol"]), "--rtol", str(tol["rtol"]), "--capture-samples",
               str(len(feeds)), "--capture-device", args.capture_device, "--out", str(Path(tmp) / "run")]
        for s in shapes_flags(m.about["input_shapes"]):
            cmd += ["--input-shapes", s]
        log = args.out / "compare.log"
        t0 = time.monotonic()
        with GpuMemory() as gpu, log.open("w") as err:
            stdout, rc, rss = run_measured(cmd, stderr=err)
        wall = time.monotonic() - t0
        steps = [(float(t), int(k), int(n)) for t, k, n in STEP.findall(log.read_text())]
        first = next((t for t, k, _ in steps if k >= 1), None)
        last = steps[-1] if steps else None
        pace = (last[0] - first) / (last[1] - 1) if first is not None and last and last[1] > 1 else None
        run = Path(tmp) / "run"
        rec = {"model": m.name, "samples": len(feeds), "capture_device": args.capture_device, "rc": rc, "wall_s": wall,
               "peak_rss_gib": rss, "gpu_mem_peak_gib": gpu.peak_gib, "steps": last[2] if last else None,
               "s_per_step": pace, "written_bytes": written_bytes(run) if run.is_dir() else 0,
               "stdout_tail": stdout[-1500:]}
    (args.out / "capture.json").write_text(json.dumps(rec, indent=1))
    print(json.dumps({k: v for k, v in rec.items() if k != "stdout_tail"}), flush=True)
    print(rec["stdout_tail"])


if __name__ == "__main__":
    main()
