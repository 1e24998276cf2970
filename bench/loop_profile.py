"""Where the counterexample-guided search's seconds go (issue 20's loop-time target): `diagnose` of one zoo model
as bench/calibration.py runs it, searching with each of `--sizes` samples, its `reference` + `search` phases
(`cegis_s`) broken down by the runs that scale with the number of samples: FP32 reference runs, emulated runs (by
the function that made them: the scores, the oracle's evaluations, the checks of answers), references read from
and written to references.h5, perturbed copies made, sessions created. Wall and CPU seconds of this process.

    nice .venv/bin/python bench/loop_profile.py --zoo /work/main/zoo --only ppocr-v4-det --sizes 4,40
    nice .venv/bin/python bench/loop_profile.py --zoo /work/main/zoo --only ppocr-v4-det --sizes 40 --cprofile 30

Prints one JSON object per run (and, with `--cprofile N`, cProfile's N largest cumulative entries of the
`reference` + `search` phases).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import pstats
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from calibration import USER, inputs_for, make_samples, run, write_files

from precision_doctor.batch.recipes import discover
from precision_doctor.control import PhaseEvent
from precision_doctor.data.inputs import parse_input_shapes
from precision_doctor.graph.model import load_model
from precision_doctor.spec import RunSpec

CEGIS = ("reference", "search")


class Counter:
    """Wraps methods (class, name, label) for the length of a `with` block: calls and wall/CPU seconds per label,
    counted only inside the `reference` and `search` phases (`phase` is kept by the progress sink). An emulated
    run is labelled by its caller (the score, an evaluation, a check)."""

    def __init__(self, targets: list[tuple[object, str, str | Callable[[], str]]]):
        self.targets, self.undo = targets, []
        self.phase = ""
        self.calls: dict[str, int] = defaultdict(int)
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.depth = 0

    def progress(self, event) -> None:
        if isinstance(event, PhaseEvent):
            self.phase = event.phase

    def _wrap(self, fn, label):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            name = label() if callable(label) else label
            t0, c0 = time.monotonic(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                if self.phase in CEGIS:
                    self.calls[name] += 1
                    self.wall[name] += time.monotonic() - t0
                    self.cpu[name] += time.process_time() - c0
        return timed

    def __enter__(self):
        for owner, attr, label in self.targets:
            fn = getattr(owner, attr)
            self.undo.append((owner, attr, fn))
            setattr(owner, attr, self._wrap(fn, label))
        return self

    def __exit__(self, *exc):
        for owner, attr, fn in reversed(self.undo):
            setattr(owner, attr, fn)

    def table(self) -> dict[str, list]:
        return {k: [self.calls[k], round(self.wall[k], 2), round(self.cpu[k], 2)]
                for k in sorted(self.calls, key=lambda k: -self.wall[k])}


def caller() -> str:
    """The pipeline function an emulated run was made for."""
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_name
        if name in ("score_samples", "counterexamples", "evaluate", "sample_shares", "perturbed_copies"):
            return f"emulated run ({name})"
        f = f.f_back
    return "emulated run (other)"


def targets() -> list:
    from precision_doctor.backends import emulate, reference
    from precision_doctor.data import reference_cache
    from precision_doctor.pipeline import copies

    return [(reference.ReferenceRunner, "run", "FP32 reference run"), (emulate.EmulatedRunner, "run", caller),
            (reference_cache.ReferenceFile, "read", "references.h5 read"),
            (reference_cache.ReferenceFile, "write", "references.h5 write"),
            (copies, "perturbed_copies", "perturbed copies (with their references)"),
            (emulate, "make_session", "session created (emulate)"),
            (reference, "make_session", "session created (reference)")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoo", type=Path, default=Path("zoo"))
    ap.add_argument("--only", default="ppocr-v4-det")
    ap.add_argument("--sizes", default="4,40")
    ap.add_argument("--cprofile", type=int, default=0, help="print cProfile's N largest cumulative entries")
    args = ap.parse_args()
    recipe = next(r for r in discover(args.zoo, RunSpec(model="")) if r.name == args.only)
    spec = recipe.spec
    model = load_model(spec.model, input_shapes=parse_input_shapes(spec.inputs.input_shapes) or None)
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="loop-profile-") as tmp:
        files = write_files(make_samples(args.only, spec, model, USER), Path(tmp) / "inputs")
        for s in sizes:
            counter = Counter(targets())
            prof = cProfile.Profile() if args.cprofile else None

            def sink(event, counter=counter, prof=prof):
                counter.progress(event)
                if prof is not None and isinstance(event, PhaseEvent):
                    (prof.enable if event.phase in CEGIS else prof.disable)()

            with counter:
                rec, _ = run(args.only, spec, files[:inputs_for(s)], Path(tmp) / f"run-{s}", progress=sink)
            if prof is not None:
                prof.disable()
            print(json.dumps({"search_samples": s, "size": rec["size"], "evaluations": rec["evaluations"],
                              "rounds": rec["rounds"], "checked": rec["checked"], "verdict": rec["verdict"],
                              "cegis_s": round(rec["cegis_s"], 2), "cegis_cpu_s": round(rec["cegis_cpu_s"], 2),
                              "phases_s": {k: round(v, 2) for k, v in rec["phases_s"].items()},
                              "phases_cpu_s": {k: round(v, 2) for k, v in rec["phases_cpu_s"].items()},
                              "calls [n, wall s, cpu s]": counter.table()}, indent=1), flush=True)
            if prof is not None:
                buf = io.StringIO()
                pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(args.cprofile)
                print(buf.getvalue(), flush=True)


if __name__ == "__main__":
    main()
