"""Issue 20's GPU target: a YOLOv8n-size detector (zoo nudenet-320n) with 32 of the user's samples, diagnosed with
the defaults (`--backend auto`: on a CUDA machine ort-cuda-gated searches and ort-cuda confirms) in at most 60 s on
an H100, its answer then checked on unseen samples there (the real mixed graph, ort-cuda).

    python3 bench/gpu_calibration.py --zoo zoo --out $OUT                       # on the GPU machine
    .venv/bin/python bench/gpu_calibration.py --zoo zoo --samples 6 --unseen 4 --max-evaluations 20 --out /tmp/gc  # CPU

Samples: natural-image-like renders (`bench/natural_images.py`, seed 2026: the first `--samples` are the user's, the
next `--unseen` never seen by the run). Tolerance and input shape: the zoo recipe's (atol 1e-3, rtol 1e-2). Writes
`gpu_calibration.json` (the run's figures, the time per phase, the unseen check) and the run's report.json under
--out; prints the summary.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from contextlib import closing
from pathlib import Path

import numpy as np
from natural_images import natural_images_nchw
from step_timer import StepTimer

from precision_doctor import api
from precision_doctor.backends.registry import cuda_machine, make_backend
from precision_doctor.batch.recipes import discover
from precision_doctor.control import PhaseEvent
from precision_doctor.measure.headroom import sample_shares
from precision_doctor.render.verdict import headline
from precision_doctor.spec import RunSpec

SEED = 2026


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, default=Path("zoo"))
    ap.add_argument("--model", default="nudenet-320n")
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--unseen", type=int, default=100)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--profile", action="store_true", help="cProfile the diagnose: profile.txt under --out")
    ap.add_argument("--max-evaluations", type=int, default=None, help="a budget (plumbing runs on the CPU)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    spec = {s.name: s for s in discover(args.zoo, RunSpec(model=""))}[args.model].spec
    images = natural_images_nchw(args.samples + args.unseen, 320, 320, seed=SEED)
    folder = args.out / "inputs"
    folder.mkdir(exist_ok=True)
    files = []
    for i, x in enumerate(images[: args.samples]):
        files.append(str(folder / f"s{i:03d}.npz"))
        np.savez(files[-1], images=x)
    spec = spec.with_settings({"inputs.files": files, "search.max_evaluations": args.max_evaluations,
                               "search.time_budget": None})
    marks: list[tuple[str, float]] = []
    t0 = time.monotonic()
    profile = cProfile.Profile() if args.profile else None
    with StepTimer() as steps:
        if profile is not None:
            profile.enable()
        rep = api.diagnose(spec, args.out / "run", force=True, progress=lambda e: marks.append(
            (e.phase, time.monotonic() - t0)) if isinstance(e, PhaseEvent) else None)
        if profile is not None:
            profile.disable()
            with (args.out / "profile.txt").open("w") as f:
                pstats.Stats(profile, stream=f).sort_stats("cumulative").print_stats(60)
                pstats.Stats(profile, stream=f).sort_stats("tottime").print_stats(30)
    wall = time.monotonic() - t0
    phases: dict[str, float] = {}
    for (phase, t), (_, t_next) in zip(marks, marks[1:] + [("end", wall)]):
        phases[phase] = phases.get(phase, 0.0) + t_next - t
    print(headline(rep), file=sys.stderr)
    summary = {
        "cuda_machine": cuda_machine(), "wall_s": wall, "phases_s": phases, "target_s": 60, "met": wall <= 60,
        "steps_s": steps.table(),
        "backend": rep.search.backend, "confirm": rep.checks.confirm.backend if rep.checks.confirm else None,
        "certified_by": rep.checks.certified_by.backend if rep.checks.certified_by else None,
        "passed": rep.passed, "status": str(rep.status), "size": rep.answer.fallback_size,
        "flop_share": rep.answer.fp32_flop_share,
        "evaluations": rep.search.evaluations,
        "confirm_evaluations": rep.checks.confirm.evaluations if rep.checks.confirm else None,
        "search_samples": rep.search.samples.search, "held_out": rep.search.samples.validation,
        "rounds": [(r.search, r.round, len(r.working), r.checked, len(r.counterexamples)) for r in
                   (rep.search.rounds.rounds if rep.search.rounds else [])],
        "held_out_bound": None if rep.promise.held_out_bound is None else
        [rep.promise.held_out_bound.failures, rep.promise.held_out_bound.samples, rep.promise.held_out_bound.failure_rate],
        "headline": headline(rep),
    }
    if rep.answer.fallback_nodes is not None and (rep.passed or rep.answer.fallback_size):
        from precision_doctor.backends.reference import ReferenceRunner
        from precision_doctor.data.inputs import parse_input_shapes
        from precision_doctor.graph.model import load_model

        model = load_model(spec.model, input_shapes=parse_input_shapes(spec.inputs.input_shapes) or None)
        unseen = [{"images": x} for x in images[args.samples:]]
        ref = ReferenceRunner(model)
        refs = [ref.run(s) for s in unseen]
        for name in (["ort-cuda"] if cuda_machine() else []) + ["emulate"]:
            with closing(make_backend(name, model, spec.precision, model.outputs, rules=spec.backends.emulation_rules,
                                      target=spec.backends.target)) as backend:
                t1 = time.monotonic()
                shares = sample_shares(backend, frozenset(rep.answer.fallback_nodes), unseen, refs, spec.tolerance)
                summary[f"unseen_{name}"] = {
                    "samples": len(shares), "failures": sum(not s.passed for s in shares),
                    "max_share": max((s.share for s in shares), default=None), "seconds": time.monotonic() - t1}
    (args.out / "gpu_calibration.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "report.json").write_text((args.out / "run" / "report.json").read_text())
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
