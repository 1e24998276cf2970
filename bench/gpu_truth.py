"""The GPU truth benchmark (issue 33): `diagnose` as a user runs it, judged on the samples it never saw on the GPU.

    python3 bench/gpu_truth.py --data .truth --out $OUT --jobs 6 --sizes 24 8                  # on the GPU machine
    .venv/bin/python bench/gpu_truth.py --data .truth --out /tmp/truth --dry-run --sizes 8 --jobs 2   # here, the CPU

Models and samples: `.truth/` (bench/truth_prepare.py; 7 trained models, 40 real samples each). Per model:

1. `hindsight`: a set that holds on every sample on the truth backend by construction: `api.diagnose` searching on
   ALL the samples on `ort-cuda-gated` (real FP16 kernels, a set is a feed) with margin 0, no perturbed copies,
   nothing held out, its answer confirmed on `ort-cuda` (the real mixed graph) on every sample and grown there where
   it fails; then its fixed.onnx judged on every sample as the answers below are. `--dry-run`: the emulator searches
   and nothing confirms.
2. `current` (and `before`, with `--package-dir DIR`: PYTHONPATH puts DIR's precision_doctor first): for each n in
   `--sizes`, n samples chosen (seeded, spread over the list) and given to `python -m precision_doctor diagnose MODEL
   --inputs DIR --atol A --rtol R --input-shapes ... --target ort-cuda` (the runtime the judge runs; `TRUTH_TARGET`
   another; a `before` package gets it where its CLI has the flag: the code before targets searched for ONNX Runtime's
   kernels anyway) with everything else
   at its default (`auto`: on a CUDA machine ort-cuda-gated searches and ort-cuda confirms; on a CPU machine the
   emulator searches). Its verdict label (the first line of stdout that starts with one), report.json, and its
   fixed.onnx exactly as written
   run by ONNX Runtime with its default graph optimizations on the truth backend (CUDAExecutionProvider with TF32 off,
   as the tool's own ORT CUDA backend; CPUExecutionProvider with `--dry-run`) on every sample it was not given,
   against the FP32 reference (ORT CPU): failures and the worst share of the tolerance.

`--precision bf16`: the `current`/`before` runs diagnose in BF16 (labelled `current-bf16`), their fixed.onnx judged as
written; hindsight sets stay FP16's.

Tasks run as processes, `--jobs` at a time (ONNX Runtime's CPU threads: cores / jobs, as batch workers set them), most
important first (`--runs`, then `--sizes`, then the models in order); each has `--timeout-s`, and nothing starts or
runs past `--limit-s` or a SIGTERM (SIGINT, then SIGKILL): a task cut off is recorded as such and the others go on.
A progress line every 10 s. Under --out: records/*.json (one per task), logs/*.log (each task's output),
logs.txt (their tails), truth.json (everything) and truth.md (the tables for docs/BENCHMARKS.md; `--render` makes
them again, also from the truth.json files of several calls); run directories, models and samples live under --work,
removed unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import run_measured, written_bytes  # noqa: E402
from _large_data import MANIFEST, large_models  # noqa: E402
from _truth_data import truth_models  # noqa: E402

SEED = 2026
STOPPED: list[bool] = []  # a SIGTERM came


# -- samples and references (the main process, once per model) --------------------------------------------------------


def bench_models(data: list[Path], only: set[str] | None) -> list:
    """The models of every data folder: the truth benchmark's (bench/truth_prepare.py) and the large models'
    (bench/large_prepare.py: a folder per model holding model.onnx)."""
    out = []
    for d in data:
        about = json.loads((d / MANIFEST).read_text())["models"] if (d / MANIFEST).is_file() else []
        # a bundle carries some of the manifest's models: any one's folder says the kind
        large = any((d / m["name"] / "model.onnx").is_file() for m in about)
        out += large_models(d, only) if large else truth_models([d], only)
    return out


def _knows(package_dir: str | None, option: str) -> bool:
    """Whether the code a task runs has the diagnose option `option` (its CLI name without dashes, as cli/options.py
    names it: "target", "capture_device"): the current code does, a `before` package where its options name it; so
    that `before` and `current` diagnose for the same target where both can."""
    if not package_dir:
        return True
    options = Path(package_dir) / "precision_doctor" / "cli" / "options.py"
    return options.is_file() and f'_opt("{option}",' in options.read_text(encoding="utf-8")


def shapes_flags(shapes) -> list[str]:
    """`--input-shapes` values: the truth manifests' ("NAME:[a, b]") as they are, the large ones' ({NAME: [a, b]})."""
    return [f"{k}:{list(v)}" for k, v in shapes.items()] if isinstance(shapes, dict) else list(shapes)


def spread(total: int, n: int, seed: int) -> list[int]:
    """n of range(total), one in each stretch of total/n, at a seeded offset within the stretch."""
    if n >= total:
        return list(range(total))
    u = np.random.default_rng(seed).uniform(0, 1)
    return sorted({min(total - 1, int((i + u) * total / n)) for i in range(n)})


def materialise(m, work: Path, k: int | None) -> dict:
    """model.onnx, samples/sNNN.npz (the feeds) and refs.npz (ORT CPU FP32) under work/<model>; k: a spread of k."""
    from precision_doctor.backends.reference import ReferenceRunner
    from precision_doctor.graph.model import load_model

    d = work / m.name
    (d / "samples").mkdir(parents=True, exist_ok=True)
    if hasattr(m, "onnx_path"):  # a large model: its file as it is
        (d / "model.onnx").unlink(missing_ok=True)
        (d / "model.onnx").symlink_to(m.onnx_path.resolve())
    else:
        (d / "model.onnx").write_bytes(m.onnx_bytes())
    samples = m.samples()
    keep = spread(len(samples), k, SEED) if k else list(range(len(samples)))
    runner = ReferenceRunner(load_model(d / "model.onnx"))
    refs = {}
    for j, i in enumerate(keep):
        np.savez(d / "samples" / f"s{j:03d}.npz", **samples[i])
        refs |= {f"s{j}/{o}": v for o, v in runner.run(samples[i]).items()}
    runner.release()
    np.savez(d / "refs.npz", **refs)
    labels = [m.about["labels"][i] for i in keep]
    unusual = [j for j, i in enumerate(keep) if i in set(m.about["unusual"])]
    return {"name": m.name, "dir": str(d), "samples": len(keep), "labels": labels, "unusual": unusual,
            "tolerance": m.tolerance, "input_shapes": shapes_flags(m.about["input_shapes"]), "package": m.about["package"],
            "version": m.about["version"], "member": m.about["member"],
            "sha256": m.about.get("sha256") or m.about.get("onnx_sha256"), "why_fair": m.about["why_fair"],
            "params": m.about.get("params"), "nodes": m.about.get("nodes")}


# -- one task (its own process) ---------------------------------------------------------------------------------------


def judge(model_dir: Path, fixed: Path, idx: list[int], tol: dict, dry: bool) -> dict:
    """fixed.onnx as written, ORT's defaults on the truth provider, on samples `idx`, against the FP32 references."""
    import onnxruntime as ort

    from precision_doctor.measure.tolerance import Tolerance, check_all

    so = ort.SessionOptions()
    so.log_severity_level = 3
    # TF32 off: FP32 nodes in true FP32, as the tool's ORT CUDA backend and the runs have them
    provider = "CPUExecutionProvider" if dry else ("CUDAExecutionProvider", {"use_tf32": "0"})
    sess = ort.InferenceSession(str(fixed), so, providers=[provider])
    with np.load(model_dir / "refs.npz") as z:
        refs = {k: z[k] for k in z.files}
    t = Tolerance(atol=tol["atol"], rtol=tol["rtol"])
    fails, shares = [], []
    for i in idx:
        with np.load(model_dir / "samples" / f"s{i:03d}.npz") as z:
            feeds = {k: z[k] for k in z.files}
        ref = {k.split("/", 1)[1]: v for k, v in refs.items() if k.startswith(f"s{i}/")}
        got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        checks = check_all(got, ref, t)
        share = max(c.tol_used for c in checks.values())
        shares.append(float(share))
        if not all(c.passed for c in checks.values()):
            fails.append(i)
    return {"provider": sess.get_providers()[0], "samples": len(idx), "failures": len(fails), "failing": fails,
            "worst_share": max(shares, default=None), "shares": shares}


def summary(rep: dict) -> dict:
    """What the table needs of a report.json."""
    search, answer, checks, promise = (rep.get(k) or {} for k in ("search", "answer", "checks", "promise"))
    b, a = promise.get("held_out_bound"), promise.get("answers")
    return {"status": rep.get("status"), "passed": rep.get("passed"), "nodes": answer.get("fallback_size"),
            "candidates": (rep.get("model") or {}).get("candidates"), "flop_share": answer.get("fp32_flop_share"),
            "backend": search.get("backend"), "confirm": (checks.get("confirm") or {}).get("backend"),
            "evaluations": search.get("evaluations"), "decided_by": promise.get("decided_by"),
            "bound": None if not b else {"failures": b["failures"], "samples": b["samples"], "rate": b["failure_rate"]},
            "smaller": None if not a else {"nodes": a["smaller"]["size"], "flop_share": a["smaller"].get("fp32_flop_share")},
            "answer": answer.get("fallback_nodes"), "kernel_spread": checks.get("kernel_spread"),
            "timing": search.get("timing"), "verdict_statement": rep.get("verdict")}


# The runtime the answers are for: the one the judge runs (ONNX Runtime CUDA is the GPU runtime measured here; the
# default target, TensorRT, cannot run on the lent machines). TRUTH_TARGET=tensorrt: the tool's default target instead
# (each node its own kernel, no fusion), its fixed.onnx still judged on ONNX Runtime CUDA with its defaults.
TARGET = os.environ.get("TRUTH_TARGET", "ort-cuda")
# TRUTH_CAPTURE_DEVICE: the capture's device (`--capture-device`; unset: the default, auto) for the current code's runs
CAPTURE_DEVICE = os.environ.get("TRUTH_CAPTURE_DEVICE")


def verdict_label(line: str) -> str | None:
    """The verdict label a headline starts with ("PASSED: ...", "FAILED ON HELD-OUT SAMPLES: ...", "PASSED (search
    stopped): ..."): the text before the first ': ', in capitals but for what is in brackets."""
    head = line.strip().split(": ", 1)[0] if ": " in line else ""
    bare = re.sub(r"\([^)]*\)", "", head).strip()
    verdict = len(re.findall("[A-Z]", bare)) >= 4 and bare == bare.upper() and bare not in ("WARNING", "NOTE", "ERROR")
    return head if verdict else None


class GpuMemory:
    """The GPU's memory in use (nvidia-smi, every 0.5 s) while the block runs: its peak above what was in use before
    (the whole GPU's: one task at a time gives the task's); None without nvidia-smi."""

    def __enter__(self) -> GpuMemory:
        import threading

        self.readings: list[float] = []
        self.base = self._read()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        if self.base is not None:
            self.thread.start()
        return self

    def _read(self) -> float | None:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10).stdout
            return float(out.split()[0]) / 1024
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            return None

    def _poll(self) -> None:
        while not self.done.wait(0.5):
            v = self._read()
            if v is not None:
                self.readings.append(v)

    def __exit__(self, *exc) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join()

    @property
    def peak_gib(self) -> float | None:
        return None if self.base is None or not self.readings else max(self.readings) - self.base


def run_task(task: dict) -> dict:
    md = Path(task["model"]["dir"])
    m = task["model"]
    tol = m["tolerance"]
    shapes = list(m["input_shapes"])
    base = md / f"{task['id']}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    run_dir = base / "run"
    t0 = time.monotonic()
    rec = {k: task[k] for k in ("id", "kind", "label", "n")} | {"model": m["name"], "target": TARGET}
    if task["kind"] == "hindsight":
        from precision_doctor import api
        from precision_doctor.spec import RunSpec

        files = sorted(str(p) for p in (md / "samples").glob("s*.npz"))
        gpu = not task["dry"]
        spec = RunSpec(model=str(md / "model.onnx")).with_settings({
            "inputs.files": files, "inputs.validation_split": 0.0, "inputs.input_shapes": shapes,
            "tolerance.atol": tol["atol"], "tolerance.rtol": tol["rtol"], "search.margin": 0.0, "search.augment": 0,
            "search.max_evaluations": task.get("max_evaluations"), "search.time_budget": None,
            "backends.backend": "ort-cuda-gated" if gpu else "emulate",
            "backends.confirm_backend": "ort-cuda" if gpu else None, "backends.target": TARGET}
            | ({"capture.device": CAPTURE_DEVICE} if CAPTURE_DEVICE else {}))
        try:
            api.diagnose(spec, run_dir, force=True, progress=lambda e: None)
        except Exception as exc:  # recorded; the table says so
            rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        given, unseen = list(range(len(files))), list(range(len(files)))
        rec |= {"given": given, "verdict": None}
    else:
        given = spread(m["samples"], task["n"], SEED + task["n"])
        unseen = [i for i in range(m["samples"]) if i not in given]
        (base / "given").mkdir()
        for i in given:
            (base / "given" / f"s{i:03d}.npz").symlink_to(md / "samples" / f"s{i:03d}.npz")
        cmd = [sys.executable, "-m", "precision_doctor", "diagnose", str(md / "model.onnx"), "--inputs",
               str(base / "given"), "--atol", str(tol["atol"]), "--rtol", str(tol["rtol"]), "--out", str(run_dir)]
        for s in shapes:
            cmd += ["--input-shapes", s]
        if task.get("max_evaluations"):
            cmd += ["--max-evaluations", str(task["max_evaluations"])]
        if task.get("precision", "fp16") != "fp16":
            cmd += ["--precision", task["precision"]]
        cmd += task.get("diagnose_args") or []
        if _knows(task.get("package_dir"), "target"):  # the code before targets searched for ORT's kernels anyway
            cmd += ["--target", TARGET]
        if CAPTURE_DEVICE and _knows(task.get("package_dir"), "capture_device"):
            cmd += ["--capture-device", CAPTURE_DEVICE]
        env = dict(os.environ)
        if task.get("package_dir"):
            env["PYTHONPATH"] = os.pathsep.join([task["package_dir"], env.get("PYTHONPATH", "")])
        # cwd: not the repository root, which `python -m` would put before PYTHONPATH (the `before` code's folder)
        code = subprocess.run([sys.executable, "-c", "import precision_doctor as p; print(p.__file__)"], env=env,
                              capture_output=True, text=True, cwd=base).stdout.strip()
        # its progress (stderr) straight into this task's log, so that a task cut off shows how far it got
        with GpuMemory() as gpu_mem:
            stdout, rc, rss_gib = run_measured(cmd, env=env, stderr=None, cwd=base)
        print(stdout[:3000], flush=True)  # the verdict
        headline = next((line.strip() for line in stdout.splitlines() if verdict_label(line)), None)
        label = verdict_label(headline or "")
        rec |= {"given": given, "rc": rc, "verdict": label, "headline": headline, "code": code,
                "peak_rss_gib": rss_gib, "gpu_mem_peak_gib": gpu_mem.peak_gib,
                "written_bytes": written_bytes(run_dir)}
    rec["diagnose_s"] = time.monotonic() - t0
    report = run_dir / "report.json"
    if report.is_file():
        rec |= summary(json.loads(report.read_text()))
    fixed = run_dir / "fixed.onnx"
    if fixed.is_file():
        t1 = time.monotonic()
        try:
            rec["unseen"] = judge(md, fixed, unseen, tol, task["dry"])
            rec["unseen"]["unusual_failing"] = [i for i in rec["unseen"]["failing"] if i in m["unusual"]]
        except Exception as exc:  # fixed.onnx that ONNX Runtime refuses: recorded
            rec["judge_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        rec["judge_s"] = time.monotonic() - t1
    rec["wall_s"] = time.monotonic() - t0
    rec["cpu_s"] = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                       for f in ("ru_utime", "ru_stime"))  # this task and its diagnose: less skewed by a busy machine
    if not task.get("keep"):
        shutil.rmtree(base, ignore_errors=True)
    return rec


# -- the scheduler --------------------------------------------------------------------------------------------------


def plan(models: list[dict], runs: list[str], sizes: list[int], args) -> list[dict]:
    tasks = []
    for run in runs:
        for n in ([0] if run == "hindsight" else sizes):
            for m in models:
                label = run if args.precision == "fp16" or run == "hindsight" else f"{run}-{args.precision}"
                tasks.append({"id": f"{m['name']}-{label}-{n}" if n else f"{m['name']}-{label}", "kind":
                              "hindsight" if run == "hindsight" else "diagnose", "label": label, "n": n, "model": m,
                              "dry": args.dry_run, "keep": args.keep, "max_evaluations": args.max_evaluations,
                              "diagnose_args": args.diagnose_args.split() if args.diagnose_args else None,
                              "precision": args.precision,
                              "threads": args.threads or max(1, (os.cpu_count() or 1) // args.jobs),
                              "package_dir": str(args.package_dir.resolve()) if run == "before" else None})
    return tasks


def schedule(tasks: list[dict], out: Path, jobs: int, timeout_s: float, limit_s: float, t0: float) -> None:
    """Runs `tasks` in order, `jobs` at a time; `limit_s` counts from `t0` (the harness's start)."""
    (out / "records").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    for task in tasks:  # an earlier call's record in the same --out would stand in for a task cut off now
        (out / "records" / f"{task['id']}.json").unlink(missing_ok=True)
    todo, running, last = list(tasks), {}, 0.0
    try:
        while todo or running:
            now = time.monotonic() - t0
            if STOPPED:  # SIGTERM: the limit is now
                limit_s = min(limit_s, now)
            while todo and len(running) < jobs and now < limit_s - 20:
                task = todo.pop(0)
                log = (out / "logs" / f"{task['id']}.log").open("w")
                p = subprocess.Popen([sys.executable, __file__, "--task", json.dumps(task), "--out", str(out)],
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                running[task["id"]] = (p, time.monotonic(), task, log, False)
                print(f"[{now:6.0f}s] start {task['id']}", flush=True)
            if now >= limit_s - 20 and todo:
                for task in todo:
                    record(out, task, "not started (limit)", None)
                todo = []
            for tid, (p, start, task, log, sent) in list(running.items()):
                age = time.monotonic() - start
                over = age > timeout_s or time.monotonic() - t0 > limit_s
                if p.poll() is None and over and not sent:
                    os.killpg(p.pid, signal.SIGINT)
                    running[tid] = (p, start, task, log, time.monotonic())
                elif p.poll() is None and sent and time.monotonic() - sent > 10:
                    os.killpg(p.pid, signal.SIGKILL)
                if p.poll() is not None:
                    log.close()
                    if not (out / "records" / f"{tid}.json").is_file():
                        record(out, task, f"cut off at {age:.0f} s" if sent else f"exit {p.returncode}", age)
                    rec = json.loads((out / "records" / f"{tid}.json").read_text())
                    print(f"[{time.monotonic() - t0:6.0f}s] done {tid} in {age:.0f} s: {line(rec)}", flush=True)
                    del running[tid]
            if time.monotonic() - t0 - last >= 10 and running:
                last = time.monotonic() - t0
                ages = ", ".join(f"{t} {time.monotonic() - s:.0f}s" for t, (_, s, *_r) in running.items())
                print(f"[{last:6.0f}s] running {ages}; {len(todo)} waiting", flush=True)
            time.sleep(0.5)
    finally:  # a harness stopped (Ctrl-C, SIGTERM) takes its tasks with it
        for p, *_rest in running.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)


def record(out: Path, task: dict, error: str, wall: float | None) -> None:
    rec = {k: task[k] for k in ("id", "kind", "label", "n")} | {"model": task["model"]["name"], "error": error,
                                                                  "wall_s": wall}
    (out / "records" / f"{task['id']}.json").write_text(json.dumps(rec))


def line(r: dict) -> str:
    if r.get("error"):
        return r["error"]
    u = r.get("unseen") or {}
    return (f"{r.get('verdict') or r.get('status')}, {r.get('nodes')} nodes, FP32 FLOPs {pct(r.get('flop_share'))}, "
            f"unseen {u.get('failures')} of {u.get('samples')} failed (worst {num(u.get('worst_share'))}x)")


# -- the tables -------------------------------------------------------------------------------------------------------


def pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def num(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def odd(u: dict) -> str:
    return f"; {len(u['unusual_failing'])} unusual" if u.get("unusual_failing") else ""


def secs(r: dict) -> str:
    return "-" if r.get("wall_s") is None else f"{r['wall_s']:.0f}" + (f" ({r['cpu_s']:.0f})" if r.get("cpu_s") else "")


def stated(r: dict) -> tuple[float | None, float | None]:
    """The numbers a verdict states (report.json): the held-out bound's rate, and the prediction's risk where it
    predicted the answer to hold."""
    b, p = r.get("bound"), r.get("prediction")
    return (b["rate"] if b else None), (p["risk"] if p and p.get("holds") else None)


def stated_text(r: dict) -> str:
    bound, risk = stated(r)
    out = [f"{r['bound']['failures']}/{r['bound']['samples']} held out: <= {100 * bound:.1f}%"] if bound is not None else []
    out += [f"predicted <= {100 * risk:.1f}%"] if risk is not None else []
    return "; ".join(out) or "-"


def within(rate: float | None, observed: float) -> str:
    return "-" if rate is None else ("yes" if observed <= rate else "NO")


def tables(records: list[dict], meta: dict) -> str:
    hind = {r["model"]: r for r in records if r["kind"] == "hindsight" and not r.get("error")}
    out = [f"Made by `{meta['command']}` ({meta['mode']}; {meta['machine']}; commit {meta['commit']}; "
           f"{meta['wall_s']:.0f} s).", ""]
    for label in dict.fromkeys(r["label"] for r in records if r["kind"] == "diagnose"):
        rows = [r for r in records if r["kind"] == "diagnose" and r["label"] == label]
        out += [f"**{label}** code, `diagnose` with its defaults, judged on the samples it was not given:", "",
                "| model | given | verdict | answer nodes | FP32 FLOPs | hindsight nodes | hindsight FLOPs | unseen failures "
                "(worst share) | stated | observed | wall s (CPU s) |", "|" + "---|" * 11]
        for r in rows:
            h, u = hind.get(r["model"], {}), r.get("unseen") or {}
            text = stated_text(r)
            obs = f"{100 * u['failures'] / u['samples']:.1f}%" if u.get("samples") else "-"
            verdict = r.get("error") or r.get("verdict") or r.get("status") or (f"exit {r['rc']}" if r.get("rc") else "-")
            if r.get("judge_error"):
                verdict += f" (fixed.onnx did not run: {r['judge_error'][:80]})"
            out.append(f"| {r['model']} | {r['n']} | {verdict} | {r.get('nodes', '-')} of {r.get('candidates', '-')} | "
                       f"{pct(r.get('flop_share'))} | {h.get('nodes', '-')} | {pct(h.get('flop_share'))} | "
                       f"{u.get('failures', '-')} of {u.get('samples', '-')} ({num(u.get('worst_share'))}x{odd(u)}) | {text} | "
                       f"{obs} | {secs(r)} |")
        out.append("")
    if hind or any(r["kind"] == "hindsight" for r in records):
        out += ["**Hindsight sets** (searched on every sample, margin 0, no copies, nothing held out; judged on every "
                "sample):", "", "| model | samples | nodes | FP32 FLOPs | status | confirmed on | failures on the truth "
                "backend (worst share) | wall s (CPU s) |", "|" + "---|" * 8]
        for r in (r for r in records if r["kind"] == "hindsight"):
            u = r.get("unseen") or {}
            out.append(f"| {r['model']} | {u.get('samples', '-')} | {r.get('nodes', '-')} of {r.get('candidates', '-')} | "
                       f"{pct(r.get('flop_share'))} | {r.get('error') or r.get('status')} | {r.get('confirm') or '-'} | "
                       f"{u.get('failures', '-')} ({num(u.get('worst_share'))}x) | {secs(r)} |")
        out.append("")
    sized = [r for r in records if r["kind"] == "diagnose" and r.get("peak_rss_gib") is not None]
    if sized:
        about = {m["name"]: m for m in meta.get("models", [])}
        out += ["**Resources** (each `diagnose` alone on the machine: its wall time, its peak resident memory, the GPU "
                "memory in use above what was before it, the bytes its run directory holds):", "",
                "| code | model | params | nodes | given | wall s | peak RSS GiB | GPU memory GiB | written MB | answer "
                "nodes (FP32 FLOPs) | verdict | unseen failures (worst share) |", "|" + "---|" * 12]
        for r in sized:
            m, u = about.get(r["model"], {}), r.get("unseen") or {}
            params = f"{m['params'] / 1e6:.0f}M" if m.get("params") else "-"
            out.append(f"| {r['label']} | {r['model']} | {params} | {m.get('nodes') or '-'} | {r['n']} | "
                       f"{r['diagnose_s']:.0f} | {r['peak_rss_gib']:.1f} | {num(r.get('gpu_mem_peak_gib'))} | "
                       f"{r['written_bytes'] / 1e6:.0f} | {r.get('nodes', '-')} ({pct(r.get('flop_share'))}) | "
                       f"{r.get('verdict') or r.get('status') or '-'} | {u.get('failures', '-')} of "
                       f"{u.get('samples', '-')} ({num(u.get('worst_share'))}x) |")
        out.append("")
    out += ["**Reliability** (PASS verdicts: the numbers stated, report.json's held-out bound and prediction, against "
            "the unseen failure rate):", "", "| code | model | given | stated | observed | within the bound | within the "
            "prediction |", "|---|---|---|---|---|---|---|"]
    for r in passes(records):
        u, (bound, risk) = r["unseen"], stated(r)
        obs = u["failures"] / u["samples"]
        out.append(f"| {r['label']} | {r['model']} | {r['n']} | {stated_text(r)} | {u['failures']}/{u['samples']} = "
                   f"{100 * obs:.1f}% | {within(bound, obs)} | {within(risk, obs)} |")
    out += ["", targets(records, hind)]
    return "\n".join(out)


def passes(records: list[dict], label: str | None = None) -> list[dict]:
    """The PASS verdicts (label PASSED...) whose answer ran on unseen samples."""
    return [r for r in records if r["kind"] == "diagnose" and (r.get("verdict") or "").startswith("PASSED")
            and (r.get("unseen") or {}).get("samples") and label in (None, r["label"])]


def targets(records: list[dict], hind: dict) -> str:
    """Issue 33's targets on this run, per code label."""
    rows = ["| code | target | measured |", "|---|---|---|"]
    for label in dict.fromkeys(r["label"] for r in records if r["kind"] == "diagnose"):
        runs = [r for r in records if r["kind"] == "diagnose" and r["label"] == label and not r.get("error")]
        for n in sorted({r["n"] for r in runs}, reverse=True):
            at = [r for r in runs if r["n"] == n]
            passing = [r for r in at if (r.get("verdict") or "").startswith("PASSED")]
            bad = [f"{r['model']} {r['unseen']['failures']}/{r['unseen']['samples']}" for r in passing
                   if (r.get("unseen") or {}).get("failures")]
            refused = [r["model"] for r in at if not (r.get("verdict") or "").startswith("PASSED")
                       and (r.get("unseen") or {}).get("samples") and not r["unseen"]["failures"]]
            rows.append(f"| {label} | {n} given: PASS verdicts failing unseen samples | {len(bad)} of {len(passing)} PASS "
                        f"({', '.join(bad) or 'none'}) |")
            rows.append(f"| {label} | {n} given: needless refusals (not PASS, answer held on every unseen sample) | "
                        f"{len(refused)} ({', '.join(refused) or 'none'}) |")
            over = []
            for r in at:
                h = hind.get(r["model"])
                if h and h.get("flop_share") is not None and h["flop_share"] < 0.5 and r.get("flop_share") is not None \
                        and r["flop_share"] > 1.5 * h["flop_share"] + 0.05:
                    over.append(f"{r['model']} {pct(r['flop_share'])} vs {pct(h['flop_share'])}")
            rows.append(f"| {label} | {n} given: FP32 FLOPs over 1.5x the hindsight set's + 5 points (where it is under "
                        f"50%) | {len(over)} ({', '.join(over) or 'none'}) |")
        predicted = [r for r in passes(records, label) if stated(r)[1] is not None]
        held = [r for r in predicted if r["unseen"]["failures"] / r["unseen"]["samples"] <= stated(r)[1]]
        rows.append(f"| {label} | the prediction calibrated: observed rate within it in at least 95% of PASS answers | "
                    f"{len(held)} of {len(predicted)} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, nargs="+", default=[Path(".truth")], help="data folders (truth_prepare.py)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--work", type=Path, default=None, help="models, samples and run directories (default: a temp dir)")
    ap.add_argument("--dry-run", action="store_true", help="the emulator searches, ORT CPU is the truth (no GPU)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 24])
    ap.add_argument("--runs", nargs="+", default=["current", "hindsight"], choices=["current", "hindsight", "before"])
    ap.add_argument("--package-dir", type=Path, default=None, help="the `before` code: a folder holding precision_doctor/")
    ap.add_argument("--only", default=None, help="comma-separated model names")
    ap.add_argument("--samples", type=int, default=None, help="a spread of this many of each model's samples")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="ONNX Runtime's CPU threads per task (default cores / jobs)")
    ap.add_argument("--timeout-s", type=float, default=480, help="per task")
    ap.add_argument("--limit-s", type=float, default=float("inf"), help="nothing starts or runs past this")
    ap.add_argument("--max-evaluations", type=int, default=None, help="a search budget (plumbing runs)")
    ap.add_argument("--precision", default="fp16", choices=["fp16", "bf16"],
                    help="the format `diagnose` is given (its runs labelled RUN-bf16); hindsight sets are FP16's")
    ap.add_argument("--diagnose-args", default=None, help="more arguments for the `current`/`before` runs' diagnose, "
                    "one string (e.g. \"--backend ort-cuda\": search on the real mixed graph)")
    ap.add_argument("--keep", action="store_true", help="keep run directories under --work")
    ap.add_argument("--render", type=Path, nargs="+", default=None,
                    help="only the tables, from truth.json files (several: one run's records, later files winning)")
    ap.add_argument("--task", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.render:
        docs = [json.loads(p.read_text()) for p in args.render]
        records = list({r["id"]: r for d in docs for r in d["records"]}.values())
        meta = dict(docs[0]["meta"], command=" and ".join(f"`{d['meta']['command']}`" for d in docs).strip("`"),
                    wall_s=sum(d["meta"]["wall_s"] for d in docs))
        print(tables(records, meta))
        return
    if args.task:
        task = json.loads(args.task)
        os.environ["PRECISION_DOCTOR_ORT_THREADS"] = str(task["threads"])  # as batch workers: cores / jobs
        rec = run_task(task)
        (args.out / "records" / f"{task['id']}.json").write_text(json.dumps(rec))
        return
    if args.out is None:
        sys.exit("--out DIR is needed (or --render truth.json)")
    t0 = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: STOPPED.append(True))  # as --limit-s: tasks stopped, the tables written
    if "before" in args.runs and not (args.package_dir and (args.package_dir / "precision_doctor").is_dir()):
        sys.exit(f"--runs before needs --package-dir DIR holding precision_doctor/ (got {args.package_dir})")
    if not args.dry_run:
        from precision_doctor.backends.registry import cuda_machine

        if not cuda_machine():
            sys.exit("no CUDA GPU for ONNX Runtime here: install onnxruntime-gpu, or run with --dry-run")
    found = bench_models(args.data, set(args.only.split(",")) if args.only else None)
    if not found:
        sys.exit(f"no models in {', '.join(map(str, args.data))} (bench/truth_prepare.py --dest DIR makes them)")
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="pd-truth-"))
    try:
        models = []
        for m in found:
            models.append(materialise(m, work, args.samples))
            print(f"[{time.monotonic() - t0:6.0f}s] {m.name}: {models[-1]['samples']} samples, references made", flush=True)
        tasks = plan(models, args.runs, args.sizes, args)
        schedule(tasks, args.out, args.jobs, args.timeout_s, args.limit_s, t0)
        finish(args, models, tasks, t0)
    finally:
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)


def finish(args, models: list[dict], tasks: list[dict], t0: float) -> None:
    """truth.json and truth.md under --out, the logs cut to their tails; the tables printed."""
    records = [json.loads((args.out / "records" / f"{t['id']}.json").read_text()) for t in tasks]
    with (args.out / "logs.txt").open("w") as f:  # every task's tail in one file (a device call brings back 8 files)
        for t in tasks:
            log = args.out / "logs" / f"{t['id']}.log"
            f.write(f"==> {t['id']} <==\n{log.read_text(errors='replace')[-6000:] if log.is_file() else ''}\n")
    # TRUTH_COMMIT: the device's copy of the tree may report another HEAD than the tree it copied (the caller knows)
    commit = os.environ.get("TRUTH_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE).stdout.strip()
    meta = {"command": " ".join(["python3", "bench/gpu_truth.py", *sys.argv[1:]]), "commit": commit,
            "mode": "dry run: emulator searches, ORT CPU judges" if args.dry_run else
            ("GPU: ort-cuda-gated searches, ort-cuda confirms, ORT CUDA judges" if not args.diagnose_args else
             f"GPU: diagnose {args.diagnose_args}, ORT CUDA judges"),
            "machine": f"{platform.node()}, {os.cpu_count()} cores", "wall_s": time.monotonic() - t0,
            "models": [{k: m.get(k) for k in ("name", "params", "nodes")} for m in models]}
    (args.out / "truth.json").write_text(json.dumps({"meta": meta, "models": models, "records": records}, indent=1))
    md = tables(records, meta)
    (args.out / "truth.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
