"""The default pipeline on the GPU: the default pipeline on the zoo, and whether its answers hold on
the GPU on the samples searched and on unseen ones; one gated-GPU evaluation beside a session rebuild.

1. `precision-doctor batch ZOO --target ort-cuda` with the defaults (`--backend auto`: the emulator with the `ort-cuda`
   rules searches, a CUDA GPU confirms on `ort-cuda`; every model's recipe as it is), as a subprocess
   under a time limit (SIGINT: the batch keeps what finished). Per model: the final answer, who
   certified it (`certified_by`), evaluations on the emulator and on the GPU, wall time.
2. Each final answer on the real mixed graph (`ort-cuda`, ORT_ENABLE_ALL, as deployed) and on the
   emulator (`ort-cuda` and `standard` rules) over the samples the run used (search and held-out)
   and over unseen samples of the same recipe (`_zoo.unseen_samples`: generated with another seed,
   or rendered afresh as the recipe's were).
3. Per model: one evaluation (every sample) of the gated native backend (`ort-cuda-gated`, one
   session, a fallback set is a feed) beside building a new mixed-graph session for the set and
   running it, on three fallback sets.

    python3 bench/gpu_pipeline.py --zoo zoo --out $OUT                  # on the GPU (bench/gpu.sh pipeline)
    python bench/gpu_pipeline.py --zoo zoo --cpu --out DIR -- --only silero-vad-16k    # plumbing, CPU

Writes to --out: pipeline.json (everything), pipeline.md (the tables), answers.json ({"zoo:NAME":
{"default answer": [...], "searched answer": [...]}}: what bench/gpu_nodewise.py --answers-json
reads), batch.log (the batch's output), batch_summary.csv. `--cpu` puts the "real" side on ORT's CPU
provider (plumbing only: its FP16 numbers are not FP16's) and runs the batch with `--confirm-backend
ort-cpu`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

import numpy as np
from _common import fmt as _fmt
from _zoo import unseen_samples
from gpu_nodewise import _used, warm_gated

from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.ort import CUDA, OrtBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.batch.recipes import discover
from precision_doctor.data.inputs import InputValues
from precision_doctor.data.workload import load_workload
from precision_doctor.pipeline.heldout import held_out_samples
from precision_doctor.results.report import Report
from precision_doctor.spec import RunSpec


def run_batch(zoo: Path, out: Path, jobs: int, seconds: float, extra: list[str], log: Path) -> dict:
    """The default batch as a subprocess; SIGINT at `seconds` (it keeps finished models). Returns timing."""
    cmd = [sys.executable, "-m", "precision_doctor", "batch", str(zoo), "--jobs", str(jobs), "--out", str(out), *extra]
    t0 = time.perf_counter()
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            rc = proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                rc = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
    return {"command": cmd, "exit": rc, "wall_s": time.perf_counter() - t0, "limit_s": seconds}


def answer_of(report: Report) -> dict:
    """What the batch made of one model, from its report.json."""
    c, cert = report.checks.confirm, report.checks.certified_by
    return {
        "status": report.status, "passed": report.passed, "fallback_nodes": report.answer.fallback_nodes,
        "searched_answer": c.searched_answer if c is not None else report.answer.fallback_nodes,
        "evaluations_emulated": report.search.evaluations, "evaluations_gpu": c.evaluations if c is not None else None,
        "confirm_passed": None if c is None else c.passed,
        "searched_answer_held_on_gpu": None if c is None else c.searched_answer_passed,
        "elapsed_s": report.search.elapsed_s, "certified_by": None if cert is None else cert.__dict__,
        "tolerance_used": None if report.checks.tolerance_used is None else report.checks.tolerance_used.__dict__,
        "emulation_rules": report.search.emulation_rules, "emulation_notes": [n.__dict__ for n in report.checks.emulation_notes],
    }


def check_answer(model, fallback: frozenset[str], groups: dict[str, list], tol, real: OrtBackend) -> dict:
    """The answer's share of the tolerance on each sample group: real mixed graph and emulator."""
    ref = ReferenceRunner(model)
    emus = {r: EmulateBackend(model, "fp16", rules=r) for r in ("ort-cuda", "standard")}
    out = {}
    for name, samples in groups.items():
        if not samples:
            continue
        refs = [ref.run(s) for s in samples]
        t = time.perf_counter()
        runner = real.prepare(fallback)
        row = {"samples": len(samples), "real": _used([runner.run(s, list(r)) for s, r in zip(samples, refs)], refs, tol)}
        row["real_s"] = time.perf_counter() - t
        for r, e in emus.items():
            run = e.prepare(fallback)
            row[f"emulated {r}"] = _used([run.run(s, list(x)) for s, x in zip(samples, refs)], refs, tol)
        out[name] = row
    return out


def time_gated(model, samples: list, sets: dict[str, frozenset[str]], providers: list) -> dict:
    """One evaluation (every sample) per set: the gated native backend (one session, built and warmed up
    once) beside a new mixed-graph session per set."""
    gated, build, warmup = warm_gated(model, samples[0], providers)
    mixed = OrtBackend(model, "fp16", providers, cache_size=1)
    g_s, m_s = [], []
    for fb in sets.values():
        t = time.perf_counter()
        runner = gated.prepare(fb)
        for s in samples:
            runner.run(s)
        g_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        runner = mixed.prepare(fb)
        for s in samples:
            runner.run(s)
        m_s.append(time.perf_counter() - t)
    gated.close()
    mixed.close()
    return {"sets": list(sets), "samples": len(samples), "gated_build_s": build, "gated_warmup_s": warmup,
            "gated_eval_s": g_s, "session_eval_s": m_s, "gated_eval_median_s": median(g_s),
            "session_eval_median_s": median(m_s)}


def _timing_sets(model, answer: frozenset[str], seed: int = 0) -> dict[str, frozenset[str]]:
    cands = [c.name for c in model.candidates]
    rng = np.random.default_rng(seed)
    return {"answer": answer, "random 25%": frozenset(c for c in cands if rng.random() < 0.25),
            "random 50%": frozenset(c for c in cands if rng.random() < 0.5)}


def markdown(result: dict) -> str:
    b = result["batch"]
    lines = [f"# GPU session B: the default pipeline ({result['device']}; onnxruntime {result['onnxruntime']})", "",
             f"`{' '.join(b['command'][1:])}`: exit {b['exit']}, {b['wall_s']:.0f} s (limit {b['limit_s']:.0f} s)", "",
             "| model | status | FP32 nodes | certified by | evaluations (emulator + GPU) | wall s | "
             "searched answer held on the GPU |",
             "|---|---|---|---|---|---|---|"]
    for name, m in result["models"].items():
        a = m.get("answer")
        if a is None:
            lines.append(f"| {name} | not finished | | | | | |")
            continue
        cert = a["certified_by"] or {}
        who = f"{cert.get('backend', '-')} ({cert.get('how', '-')}, {cert.get('samples', '-')} samples)"
        lines.append(f"| {name} | {a['status']} | {len(a['fallback_nodes'])} | {who} | {a['evaluations_emulated']} + "
                     f"{_fmt(a['evaluations_gpu'])} | {a['elapsed_s']:.0f} | {_fmt(a['searched_answer_held_on_gpu'])} |")
    lines += ["", "The final answer on every sample group (share of the tolerance; above 1 fails):", "",
              "| model | samples | n | real mixed graph (ORT_ENABLE_ALL) | emulated ort-cuda | emulated standard |",
              "|---|---|---|---|---|---|"]
    for name, m in result["models"].items():
        for group, row in (m.get("check") or {}).items():
            cells = [row["real"], row["emulated ort-cuda"], row["emulated standard"]]
            lines.append(f"| {name} | {group} | {row['samples']} | " + " | ".join(
                _fmt(c["tol_used"]) + ("" if c["passed"] else " FAIL") for c in cells) + " |")
    lines += ["", "One evaluation (every sample) of a fallback set: the gated native backend against a new session:", "",
              "| model | samples | gated build s | gated warm-up s | gated eval s (median) | new session + runs s (median) |",
              "|---|---|---|---|---|---|"]
    for name, m in result["models"].items():
        t = m.get("timing")
        if t:
            lines.append(f"| {name} | {t['samples']} | {_fmt(t['gated_build_s'])} | {_fmt(t['gated_warmup_s'])} | "
                         f"{_fmt(t['gated_eval_median_s'])} | {_fmt(t['session_eval_median_s'])} |")
    errors = {n: m["error"] for n, m in result["models"].items() if m.get("error")}
    if errors:
        lines += ["", "Errors: " + "; ".join(f"{n}: {e}" for n, e in errors.items())]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batch-dir", type=Path, default=Path("/tmp/pd-session-b-batch"))
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=330.0, help="the batch's time limit (then SIGINT)")
    ap.add_argument("--unseen", type=int, default=8, help="unseen samples per model")
    ap.add_argument("--deadline", type=float, default=450.0, help="seconds from the start: no new model check past it")
    ap.add_argument("--cpu", action="store_true", help="plumbing on ORT's CPU provider (numbers are not FP16's)")
    ap.add_argument("batch_args", nargs="*", help="after --: more arguments for `precision-doctor batch`")
    args = ap.parse_args()
    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    import onnxruntime as ort

    if not args.cpu and CUDA not in ort.get_available_providers():
        raise SystemExit("no CUDAExecutionProvider here: run on a GPU machine with onnxruntime-gpu, or pass --cpu")
    providers = ["CPUExecutionProvider"] if args.cpu else [CUDA, "CPUExecutionProvider"]
    # the session measured ONNX Runtime's answers (before --target): its pipeline is --target ort-cuda's
    extra = ["--target", "ort-cuda", *(["--confirm-backend", "ort-cpu"] if args.cpu else []), *args.batch_args]
    if args.batch_dir.exists() and not (args.batch_dir / "batch.json").exists():
        shutil.rmtree(args.batch_dir)
    result = {"device": "CPU (plumbing)" if args.cpu else "CUDA", "onnxruntime": ort.__version__,
              "batch": run_batch(args.zoo, args.batch_dir, args.jobs, args.seconds, extra, args.out / "batch.log"),
              "models": {}}
    if (args.batch_dir / "summary.csv").exists():
        shutil.copy(args.batch_dir / "summary.csv", args.out / "batch_summary.csv")
    answers = {}
    for ms in discover(args.zoo, RunSpec(model="")):
        name = f"zoo:{ms.name}"
        entry: dict = {}
        result["models"][name] = entry
        report_path = args.batch_dir / ms.name / "report.json"
        if ms.error or not report_path.is_file():
            entry["error"] = ms.error or "no report (the batch did not finish it)"
            continue
        try:
            report = Report.load(report_path)
            entry["answer"] = answer_of(report)
            final = frozenset(report.answer.fallback_nodes)
            answers[name] = {"default answer": sorted(final), "searched answer": entry["answer"]["searched_answer"]}
            if not report.passed or time.perf_counter() - start > args.deadline:
                entry["skipped_checks"] = "no passing answer" if not report.passed else "past the deadline"
                continue
            work = load_workload(ms.spec.model, ms.spec.inputs, InputValues.parse(ms.spec.inputs))
            held = held_out_samples(work)
            unseen = unseen_samples(ms.name, ms.spec, work.model, args.unseen)
            real = OrtBackend(work.model, "fp16", providers, cache_size=1)
            entry["check"] = check_answer(work.model, final, {"searched": work.samples, "held-out": held,
                                                              "unseen": unseen or []}, ms.spec.tolerance, real)
            real.close()
            entry["timing"] = time_gated(work.model, work.samples + held, _timing_sets(work.model, final), providers)
        except Exception as exc:  # one model's trouble is recorded; the others go on
            entry["error"] = f"{type(exc).__name__}: {exc}"
        (args.out / "pipeline.json").write_text(json.dumps(result, indent=1, default=str))
    result["seconds"] = time.perf_counter() - start
    (args.out / "pipeline.json").write_text(json.dumps(result, indent=1, default=str))
    (args.out / "answers.json").write_text(json.dumps(answers, indent=1))
    md = markdown(result)
    (args.out / "pipeline.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
