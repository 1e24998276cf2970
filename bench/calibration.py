"""Issue 20: calibration sets. The default pipeline (counterexample-guided search, default held-out split, probe,
verdict) searching with 4, 16 and 40 of the user's samples per zoo model (given 6, 21 and 50 `--inputs`: the default
split holds out 2, 5 and 10), each answer judged on 100 unseen samples of the same kind, beside the hindsight set
(the same search on the 50 and the 100 unseen samples together, nothing held out): answer size, FP32 FLOP share,
evaluations, rounds, wall time, held-out bound, and whether it held.

    nice .venv/bin/python bench/calibration.py --zoo zoo                          # all four zoo models
    nice .venv/bin/python bench/calibration.py --zoo zoo --quick                  # silero-vad and ppocr-mobile-cls
    nice .venv/bin/python bench/calibration.py --zoo zoo --only ppocr-mobile-cls --exhaustive   # + no CEGIS at 40
    nice .venv/bin/python bench/calibration.py --zoo zoo --sizes 16 --no-hindsight --risk 0.001   # another search.risk
    nice .venv/bin/python bench/calibration.py --planted                          # the planted suite (minutes)
    .venv/bin/python bench/calibration.py --render bench/out/calibration.jsonl    # the tables again

Samples per model (the first 50 are the user's, the next 100 unseen): nudenet-320n natural-image-like renders
(`bench/natural_images.py`: its recipe's uniform noise is no image); ppocr-v4-det rendered text pages and
ppocr-mobile-cls near-threshold text crops made as their recipes make them (`zoo/synthetic.py`), silero-vad-16k
its recipe's generated inputs; the planted suite (`--planted`, `precision_doctor/planted.py`) its cases' own
generators at their own tolerances. A run searching with s samples gets the first n as `--inputs` files, n the fewest
whose default split leaves s to search, the recipe's tolerance and precision, `--backend emulate` (what `auto` is on a
CPU machine) and, instead of the recipe's budget, MAX_EVALUATIONS evaluations and no time budget, so that the
budget does not end a search before its rounds do. An answer *holds* when it passes every unseen sample at the
full tolerance (the emulator, the backend that searched). `cegis_s` is the time of the reference runs, the
scoring and the search (its rounds and checks), `probe_s` that of the check on unseen samples (making the probe's
copies and their references too) and the second search when there is one, `wall_s` the whole `diagnose` (capture,
probe, artifacts too).
`--exhaustive` also runs the 40-sample search with every search sample in the oracle from the start (no
counterexample loop): what evaluating every candidate on every sample costs.

Raw records (one JSON line per model and run) go to bench/out/calibration.jsonl as they come (`--resume` keeps
them and runs the rest); the tables are made from them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import OUT, machine, table

from precision_doctor import api
from precision_doctor.batch.recipes import discover
from precision_doctor.control import PhaseEvent
from precision_doctor.data.inputs import generate_samples, parse_input_shapes, parse_val_ranges
from precision_doctor.graph.model import Model, load_model
from precision_doctor.measure.headroom import sample_shares
from precision_doctor.spec import RunSpec

RAW = OUT / "calibration.jsonl"
SIZES = (4, 16, 40)  # search samples; the runs get as many more as the default split holds out
USER = 50  # the user's samples; a run takes the first n
UNSEEN = 100
MAX_EVALUATIONS = 1500
SEED = 2026
MODELS = ("silero-vad-16k", "ppocr-mobile-cls", "ppocr-v4-det", "nudenet-320n")
QUICK = ("silero-vad-16k", "ppocr-mobile-cls")


def make_samples(name: str, spec: RunSpec, model: Model, n: int) -> list[dict]:
    """n samples of the model's kind (see the module docstring), deterministic."""
    from natural_images import natural_images_nchw

    from precision_doctor import planted
    from precision_doctor.zoo import synthetic

    if name.startswith("planted:"):
        return planted.CASES[name.removeprefix("planted:")]().samples(n, SEED)

    x = model.inputs[0]
    if name == "nudenet-320n":
        return [{x: a} for a in natural_images_nchw(n, 320, 320, seed=SEED)]
    if name == "ppocr-v4-det":
        return [{x: synthetic._to_ppocr(synthetic.text_image(256, 256, seed=SEED + i))} for i in range(n)]
    if name == "ppocr-mobile-cls":
        with synthetic.cls_prob_180(Path(spec.model), 48, 192) as prob:
            picks = synthetic.select_cls_crops(n, 48, 192, prob, max_tries=100_000)
        return [{x: synthetic.text_crop(seed, hard, 48, 192)} for seed, hard, _ in picks]
    return generate_samples(model, n, SEED, parse_val_ranges(spec.inputs.val_ranges))


def inputs_for(search: int) -> int:
    """The fewest --inputs samples whose default held-out split leaves `search` to search."""
    from precision_doctor.pipeline.heldout_policy import default_held_out

    n = search
    while n - default_held_out(n) < search:
        n += 1
    if n - default_held_out(n) != search:
        raise ValueError(f"no number of inputs leaves exactly {search} to search")
    return n


def write_files(samples: list[dict], folder: Path) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, s in enumerate(samples):
        p = folder / f"s{i:03d}.npz"
        np.savez(p, **s)
        paths.append(str(p))
    return paths


class Phases:
    """A progress sink that times the run's phases, in wall seconds and in this process's CPU seconds (all its
    threads: less skewed than wall time by the other work on a shared machine)."""

    def __init__(self):
        self.t0, self.c0 = time.monotonic(), time.process_time()
        self.marks: list[tuple[str, float, float]] = []

    def __call__(self, event) -> None:
        if isinstance(event, PhaseEvent):
            self.marks.append((event.phase, time.monotonic() - self.t0, time.process_time() - self.c0))

    def seconds(self, end: float, cpu_end: float, cpu: bool = False) -> dict[str, float]:
        out: dict[str, float] = {}
        ends = [(m[1], m[2]) for m in self.marks[1:]] + [(end, cpu_end)]
        for (phase, t, c), (t_next, c_next) in zip(self.marks, ends):
            out[phase] = out.get(phase, 0.0) + ((c_next - c) if cpu else (t_next - t))
        return out


def run(name: str, spec: RunSpec, files: list[str], out: Path, *, split: float | None = None,
        exhaustive: bool = False, progress: Callable[[object], None] | None = None) -> tuple[dict, object]:
    """api.diagnose on `files`; the report's figures and the timings (`progress`: also told every event)."""
    from precision_doctor.pipeline import search_loop

    spec = spec.with_settings({"inputs.files": files, "inputs.validation_split": split, "backends.backend": "emulate",
                               "search.max_evaluations": MAX_EVALUATIONS, "search.time_budget": None})
    phases = Phases()
    start = search_loop.START
    if exhaustive:
        search_loop.START = 10**9  # every search sample in the working set: the search without the loop
    try:
        t0, c0 = time.monotonic(), time.process_time()
        rep = api.diagnose(spec, out, progress=phases if progress is None else lambda e: (phases(e), progress(e)),
                           force=True)
        wall, cpu = time.monotonic() - t0, time.process_time() - c0
    finally:
        search_loop.START = start
    secs, cpu_secs = phases.seconds(wall, cpu), phases.seconds(wall, cpu, cpu=True)
    r = rep.search.rounds
    first = [x for x in r.rounds if x.search == "first"] if r is not None else []
    b = rep.promise.held_out_bound
    rec = {
        "status": str(rep.status), "passed": rep.passed, "verdict": _verdict(rep), "size": rep.answer.fallback_size,
        "flop_share": rep.answer.fp32_flop_share, "evaluations": rep.search.evaluations,
        "search_samples": rep.search.samples.search,
        "held_out": rep.search.samples.validation, "rounds": len(first), "working": len(first[-1].working) if first else None,
        "checked": r.checked if r is not None else None, "verified": r.verified if r is not None else None,
        "decided_by": str(rep.promise.decided_by) if rep.promise.decided_by else None,
        "bound_failures": b.failures if b else None, "bound_samples": b.samples if b else None,
        "bound_rate": b.failure_rate if b else None,
        "answer": rep.answer.fallback_nodes, "wall_s": wall, "phases_s": secs, "cpu_s": cpu, "phases_cpu_s": cpu_secs,
        "cegis_s": secs.get("reference", 0.0) + secs.get("search", 0.0),
        "cegis_cpu_s": cpu_secs.get("reference", 0.0) + cpu_secs.get("search", 0.0),
        "probe_s": secs.get("validate", 0.0), "load": machine_load(),
        "smaller": None if rep.promise.answers is None else {
            "size": rep.promise.answers.smaller.size, "nodes": rep.promise.answers.smaller.nodes,
            "flop_share": rep.promise.answers.smaller.fp32_flop_share,
            "grown_by": [str(g) for g in rep.promise.answers.grown_by]},
    }
    return rec, rep


def machine_load() -> list[float]:
    from _common import loadavg

    return loadavg()


def _verdict(rep) -> str:
    return rep.statement.label


def judge(backend, nodes: list[str] | None, unseen: list[dict], refs: list[dict], tol) -> dict:
    """The answer on the unseen samples at the full tolerance."""
    if nodes is None:
        return {}
    shares = sample_shares(backend, frozenset(nodes), unseen, refs, tol)
    fails = sum(not s.passed for s in shares)
    return {"unseen": len(unseen), "unseen_failures": fails, "holds": fails == 0,
            "unseen_max_share": max((s.share for s in shares), default=None)}


def run_model(name: str, spec: RunSpec, sizes: tuple[int, ...], work: Path, done: set, write: Callable[[dict], None],
              exhaustive: bool, hindsight: bool) -> None:
    from precision_doctor.backends.emulate import EmulateBackend
    from precision_doctor.backends.reference import ReferenceRunner

    model = load_model(spec.model, input_shapes=parse_input_shapes(spec.inputs.input_shapes) or None)
    t0 = time.monotonic()
    samples = make_samples(name, spec, model, USER + UNSEEN)
    print(f"{name}: {len(samples)} samples made in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    user, unseen = samples[:USER], samples[USER:]
    files = write_files(samples, work / name / "inputs")
    ref = ReferenceRunner(model)
    unseen_refs = [ref.run(s) for s in unseen]
    backend = EmulateBackend(model, spec.precision, model.outputs, rules=spec.backends.emulation_rules)
    jobs = [("default", inputs_for(s)) for s in sizes] + ([("exhaustive", inputs_for(max(sizes)))] if exhaustive else []) \
        + ([("hindsight", USER + UNSEEN)] if hindsight else [])
    for kind, n in jobs:
        if (name, kind, n) in done:
            continue
        out = work / name / f"{kind}-{n}"
        print(f"{name} {kind} n={n} ...", file=sys.stderr, flush=True)
        rec, rep = run(name, spec, files[:n], out, split=0.0 if kind == "hindsight" else None,
                       exhaustive=kind == "exhaustive")
        rec.update({"model": name, "kind": kind, "n": n})
        if kind != "hindsight":
            answer = rep.answer
            rec.update(judge(backend, answer.fallback_nodes if answer.fallback_size or rep.passed else None, unseen,
                             unseen_refs, spec.tolerance))
            if rep.promise.answers is not None:
                rec["smaller"].update({"judged": judge(backend, rep.promise.answers.smaller.nodes, unseen, unseen_refs,
                                                       spec.tolerance)})
        write(rec)
        shutil.rmtree(out, ignore_errors=True)  # activations are large
        print(f"{name} {kind} n={n}: {rec['verdict']} size {rec['size']} evals {rec['evaluations']} rounds "
              f"{rec['rounds']} cegis {rec['cegis_s']:.0f} s wall {rec['wall_s']:.0f} s unseen failures "
              f"{rec.get('unseen_failures')}", file=sys.stderr, flush=True)
    backend.close()
    del user


def load(path: Path) -> list[dict]:
    return [r for line in path.read_text().splitlines() if line.strip() and "model" in (r := json.loads(line))]


def render(records: list[dict]) -> str:
    """The tables of docs/BENCHMARKS.md."""
    hind = {r["model"]: r for r in records if r["kind"] == "hindsight"}
    default = [r for r in records if r["kind"] == "default"]
    rows = []
    for r in default:
        h = hind.get(r["model"])
        rows.append([r["model"], r["search_samples"], f"{r['n']} ({r['held_out']})", r["verdict"], r["size"],
                     h["size"] if h else None, _ratio(r["size"], h["size"] if h else None), 100 * r["flop_share"],
                     r["evaluations"], r["rounds"], r["working"], r["cegis_s"], r.get("cegis_cpu_s"), r.get("probe_s"),
                     r["wall_s"], _bound(r),
                     f"{r.get('unseen_failures')}/{r.get('unseen')}", r.get("holds")])
    out = ["Per model and number of search samples (the --inputs given, held out by the default split):",
           table(["model", "search samples", "inputs (held out)", "verdict", "size", "hindsight size", "size / hindsight",
                  "FP32 FLOP %", "evaluations", "rounds", "working set", "CEGIS s", "CEGIS CPU s", "probe s", "wall s",
                  "held-out bound",
                  "unseen failures", "holds"], rows)]
    out += ["Targets:", targets(default, hind)]
    small = [r for r in default if r.get("smaller")]
    if small:
        out += ["The smaller answers the runs grew from (both are in the report):", table(
            ["model", "search samples", "grown by", "smaller size", "final size", "smaller FP32 FLOP %",
             "smaller unseen failures"],
            [[r["model"], r["search_samples"], ",".join(r["smaller"]["grown_by"]), r["smaller"]["size"], r["size"],
              100 * r["smaller"]["flop_share"],
              f"{(r['smaller'].get('judged') or {}).get('unseen_failures')}/{(r['smaller'].get('judged') or {}).get('unseen')}"]
             for r in small])]
    ex = [r for r in records if r["kind"] == "exhaustive"]
    if ex:
        by = {(r["model"], r["n"]): r for r in default}
        out += ["Without the loop (every search sample in the oracle from the start) against with it, same n:", table(
            ["model", "search samples", "size (no loop)", "size (loop)", "evaluations (no loop)", "evaluations (loop)",
             "CEGIS s (no loop)", "CEGIS s (loop)", "time no loop / loop"],
            [[r["model"], r["search_samples"], r["size"], (by.get((r["model"], r["n"])) or {}).get("size"), r["evaluations"],
              (by.get((r["model"], r["n"])) or {}).get("evaluations"), r["cegis_s"],
              (by.get((r["model"], r["n"])) or {}).get("cegis_s"),
              _ratio(r["cegis_s"], (by.get((r["model"], r["n"])) or {}).get("cegis_s"))] for r in ex])]
    if hind:
        out += [f"Hindsight (the same search on all {USER + UNSEEN} samples, nothing held out):", table(
            ["model", "size", "FP32 FLOP %", "evaluations", "rounds", "working set", "CEGIS s", "wall s", "verdict"],
            [[m, h["size"], 100 * h["flop_share"], h["evaluations"], h["rounds"], h["working"], h["cegis_s"],
              h["wall_s"], h["verdict"]] for m, h in hind.items()])]
    return "\n\n".join(out)


def targets(default: list[dict], hind: dict) -> str:
    rows = []
    passes = [r for r in default if r["search_samples"] >= 16 and r["verdict"].startswith("passed")]
    failing = [r for r in passes if r.get("holds") is False]
    rows.append(["with >= 16 samples, no PASS answer fails on the unseen samples", f"{len(failing)} of {len(passes)} PASS "
                 "answers failed", "met" if passes and not failing else ("missed" if failing else "-")])
    ratios = [(r["size"] / hind[r["model"]]["size"] if hind[r["model"]]["size"] else (1.0 if not r["size"] else None))
              for r in default if r["model"] in hind and r["search_samples"] >= 16]
    ratios = [x for x in ratios if x is not None]
    rows.append(["answer size <= 1.3x the hindsight set's (n >= 16)", f"largest {max(ratios):.2f}x" if ratios else "-",
                 "-" if not ratios else ("met" if max(ratios) <= 1.3 else "missed")])
    for m in dict.fromkeys(r["model"] for r in default):
        t = {r["search_samples"]: r for r in default if r["model"] == m}
        if 4 in t and 40 in t and t[4]["cegis_s"]:
            wall = t[40]["cegis_s"] / t[4]["cegis_s"]
            cpu = t[40].get("cegis_cpu_s", 0) / t[4]["cegis_cpu_s"] if t[4].get("cegis_cpu_s") else None
            rows.append([f"{m}: CEGIS time with 40 samples <= 3x with 4",
                         f"{wall:.2f}x wall" + (f", {cpu:.2f}x CPU" if cpu is not None else ""),
                         "met" if (cpu if cpu is not None else wall) <= 3 else "missed"])
    return table(["target", "measured", ""], rows)


def _bound(r: dict) -> str:
    if r.get("bound_samples") is None:
        return "-"
    return f"{r['bound_failures']}/{r['bound_samples']}: <= {100 * r['bound_rate']:.0f}%"


def _ratio(a, b):
    return None if a is None or not b else a / b


def planted_specs(tmp: Path, only: str | None) -> tuple[list[str], dict]:
    """The planted cases as (name, ModelSpec-like) pairs: their models written to `tmp`, their tolerances."""
    from types import SimpleNamespace

    import onnx

    from precision_doctor import planted

    out = {}
    for key, make in planted.CASES.items():
        name = f"planted:{key}"
        if only and key not in only.split(",") and name not in only.split(","):
            continue
        case = make()
        path = tmp / f"{key}.onnx"
        onnx.save(case.model, str(path))
        spec = RunSpec(model=str(path)).with_settings({"tolerance.atol": case.atol, "tolerance.rtol": case.rtol})
        out[name] = SimpleNamespace(name=name, spec=spec, error=None)
    return list(out), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, default=Path("zoo"), help="the fetched zoo (precision-doctor zoo fetch)")
    ap.add_argument("--only", default=None, help="comma-separated model names")
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--planted", action="store_true", help="the planted suite instead of the zoo")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--exhaustive", action="store_true", help="also the largest size without the loop")
    ap.add_argument("--no-hindsight", action="store_true")
    ap.add_argument("--risk", type=float, default=None, help="search.risk for every run (default: the setting's)")
    ap.add_argument("--resume", action="store_true", help=f"keep the records in {RAW} and run the rest")
    ap.add_argument("--out", type=Path, default=RAW)
    ap.add_argument("--render", type=Path, default=None)
    args = ap.parse_args()
    if args.render:
        print(render(load(args.render)))
        return
    names = args.only.split(",") if args.only else list(QUICK if args.quick else MODELS)
    sizes = tuple(int(s) for s in args.sizes.split(","))
    done = {(r["model"], r["kind"], r["n"]) for r in load(args.out)} if args.resume and args.out.exists() else set()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if not args.resume:
        args.out.write_text(json.dumps({"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()}}) + "\n")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pd-calib-") as tmp, args.out.open("a") as f:
        if args.planted:
            names, specs = planted_specs(Path(tmp), args.only)
        else:
            specs = {s.name: s for s in discover(args.zoo, RunSpec(model=""))}
        def write(rec: dict) -> None:
            f.write(json.dumps(rec) + "\n")
            f.flush()
        for name in names:
            if name not in specs or specs[name].error:
                print(f"{name}: not in {args.zoo} ({specs[name].error if name in specs else 'not fetched'})", file=sys.stderr)
                continue
            spec = specs[name].spec if args.risk is None else specs[name].spec.with_settings({"search.risk": args.risk})
            run_model(name, spec, sizes, Path(tmp), done, write, args.exhaustive, not args.no_hindsight)
        f.write(json.dumps({"machine_at_end": machine(), "bench_s": time.monotonic() - t0}) + "\n")
    print(render(load(args.out)))


if __name__ == "__main__":
    main()
