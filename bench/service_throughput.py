"""The daemon, measured: what the shared capture (and the analysis kept in it) saves on a second diagnosis
of the same model, and how many small jobs a minute it sustains with 1 and 2 workers.

    .venv/bin/python bench/service_throughput.py [--jobs 30] [--zoo /work/main/zoo --zoo-model ppocr-mobile-cls]

Every number comes from a real `precision-doctor serve` on loopback (its own state directory under
bench/out/), jobs submitted over HTTP, timings from the job records (started -> finished, as the
daemon stamps them) and from the engine's capture-phase timer (`result.capture_s`: capture and
analysis, or the copy).

Reuse: the worker is warmed up with an unrelated job first (imports, first sessions), then the same
model is diagnosed three times with the same settings: the first run captures and analyses (and fills
the cache), the second copies the capture and reads the analysis kept in it, the third copies a capture
whose kept analysis was removed from the cache first (so it analyses again: what caching the capture
alone would save). Throughput: `--jobs` planted-model jobs (three models in
turn, 3 samples each) submitted at once to a fresh daemon; jobs per minute from the first submission
to the last job's end.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import onnx
from _common import OUT, loadavg, machine, table

from precision_doctor import planted

TERMINAL = ("done", "failed", "cancelled")


class Daemon:
    def __init__(self, state: Path, workers: int, allow: list[Path]):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        args = [a for root in allow for a in ("--allow-root", str(root))]
        self.log = open(state.parent / f"{state.name}.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", "precision_doctor", "serve", "--port", str(self.port),
                                      "--state-dir", str(state), "--workers", str(workers), *args],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     env={k: v for k, v in os.environ.items() if k != "PRECISION_DOCTOR_TOKEN"})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).json()["workers"] == workers:
                    return
            except (httpx.HTTPError, ValueError, KeyError):
                time.sleep(0.2)
        raise SystemExit(f"the daemon did not start; see {self.log.name}")

    def submit(self, model: Path, settings: dict) -> str:
        r = httpx.post(f"{self.url}/jobs", json={"model": str(model), "settings": settings}, timeout=60)
        r.raise_for_status()
        return r.json()["id"]

    def wait(self, ids: list[str], timeout: float = 3600) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = {j["id"]: j for j in httpx.get(f"{self.url}/jobs?limit=5000", timeout=60).json()["jobs"]}
            if all(jobs[i]["state"] in TERMINAL for i in ids):
                return [jobs[i] for i in ids]
            time.sleep(0.25)
        raise SystemExit(f"jobs did not end in {timeout} s")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        self.log.close()


def _seconds(job: dict) -> float:
    t = [_dt.datetime.fromisoformat(job[k]) for k in ("started", "finished")]
    return (t[1] - t[0]).total_seconds()


BACKEND = {"backend": "emulate"}  # --backend: what every job's search runs on


def planted_files(root: Path, name: str, n: int = 3) -> tuple[Path, dict]:
    case = planted.CASES[name]()
    root.mkdir(parents=True, exist_ok=True)
    onnx.save(case.model, str(root / f"{name}.onnx"))
    files = []
    for i, s in enumerate(case.samples(n, seed=0)):
        files.append(str(root / f"{name}_{i}.npz"))
        np.savez(files[-1], **s)
    return root / f"{name}.onnx", {"inputs": {"files": files}, "tolerance": {"atol": case.atol, "rtol": case.rtol},
                                   "backends": dict(BACKEND)}


def zoo_job(zoo: Path, name: str, max_evaluations: int, samples: int) -> tuple[Path, dict]:
    """A zoo model and its recipe in the job settings' section form (the first `samples` sample files,
    the search capped)."""
    recipe = json.loads((zoo / f"{name}.json").read_text())
    inputs = dict(recipe.get("inputs") or {})
    inputs["files"] = [str((zoo / f).resolve()) for f in inputs.get("files", [])][:samples]
    if "val_range" in inputs:
        inputs["val_ranges"] = inputs.pop("val_range")
    tol = {k: v for k, v in (recipe.get("tolerance") or {}).items() if k != "margin"}
    return (zoo / f"{name}.onnx").resolve(), {"inputs": inputs, "tolerance": tol, "precision": recipe.get("precision", "fp16"),
                                              "search": {"strategy": "auto", "max_evaluations": max_evaluations},
                                              "backends": dict(BACKEND)}


def reuse(out: Path, files: Path, zoo: Path | None, zoo_model: str, zoo_evals: int, zoo_samples: int) -> list[dict]:
    cases = [("three_defects (planted)", *planted_files(files, "three_defects"))]
    if zoo is not None:
        label = f"{zoo_model} (zoo, {zoo_samples} samples, at most {zoo_evals} evaluations)"
        cases.append((label, *zoo_job(zoo, zoo_model, zoo_evals, zoo_samples)))
    state = out / "reuse-state"
    d = Daemon(state, 1, [files] + ([zoo.resolve()] if zoo else []))
    rows = []
    try:
        warm_model, warm = planted_files(files, "overflow_island")
        d.wait([d.submit(warm_model, warm)])
        for label, model, settings in cases:
            cold = d.wait([d.submit(model, settings)])[0]
            both = d.wait([d.submit(model, settings)])[0]
            forget_kept_analysis(state)
            capture_only = d.wait([d.submit(model, settings)])[0]
            jobs = (cold, both, capture_only)
            for job in jobs:
                assert job["state"] == "done", job
            assert [j["result"]["capture_reused"] for j in jobs] == [False, True, True], jobs
            rows.append({"model": label, "cold_s": _seconds(cold), "both_s": _seconds(both),
                         "capture_only_s": _seconds(capture_only),
                         "capture_phase_s": [j["result"]["capture_s"] for j in jobs],
                         "phases": [j["progress"]["phase_s"] for j in jobs],
                         "evaluations": [j["result"]["evaluations"] for j in jobs],
                         "same_answer": len({j["result"]["fallback_size"] for j in jobs}) == 1})
    finally:
        d.stop()
    return rows


def forget_kept_analysis(state: Path) -> None:
    """Remove the kept analysis from the cache entry used last (the reuse run's), so that the next job
    copies the capture but analyses it again."""
    from precision_doctor.data.activations import ActivationStore
    from precision_doctor.measure.analysis import MEMO

    entry = max((state / "capture-cache").glob("*.h5"), key=lambda p: p.stat().st_mtime)
    with ActivationStore(entry, "a") as store:
        del store.file[MEMO]


def throughput(out: Path, files: Path, n_jobs: int, workers: int) -> dict:
    models = [planted_files(files, name) for name in ("clean", "overflow_island", "three_defects")]
    d = Daemon(out / f"throughput-{workers}w-state", workers, [files])
    try:
        t0 = time.monotonic()
        ids = [d.submit(*models[i % len(models)]) for i in range(n_jobs)]
        jobs = d.wait(ids)
        wall = time.monotonic() - t0
    finally:
        d.stop()
    done = sum(j["state"] == "done" for j in jobs)
    per_job = sorted(_seconds(j) for j in jobs)
    return {"workers": workers, "jobs": n_jobs, "done": done, "wall_s": wall, "jobs_per_min": 60 * done / wall,
            "median_job_s": per_job[len(per_job) // 2], "attempts": sum(j["attempts"] for j in jobs),
            "loadavg": loadavg()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=30, help="jobs per throughput run")
    p.add_argument("--workers", default="1,2", help="worker counts to measure")
    p.add_argument("--zoo", type=Path, default=None, help="a fetched zoo (precision-doctor zoo fetch) for the reuse run")
    p.add_argument("--zoo-model", default="ppocr-mobile-cls")
    p.add_argument("--zoo-max-evaluations", type=int, default=20)
    p.add_argument("--zoo-samples", type=int, default=4, help="sample files of the zoo model to use (the first ones)")
    p.add_argument("--backend", default="emulate", help="the jobs' backend (ort-cuda on a GPU machine)")
    p.add_argument("--quick", action="store_true", help="6 jobs, one worker count, no zoo model: a smoke run")
    a = p.parse_args()
    BACKEND["backend"] = a.backend
    out = OUT / "service_throughput"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    files = out / "files"
    n_jobs, counts = (6, [1]) if a.quick else (a.jobs, [int(w) for w in a.workers.split(",")])
    result = {"machine": machine(), "loadavg_at_start": loadavg(), "command": " ".join(sys.argv),
              "reuse": reuse(out, files, None if a.quick else a.zoo, a.zoo_model, a.zoo_max_evaluations, a.zoo_samples),
              "throughput": [throughput(out, files, n_jobs, w) for w in counts]}
    result["machine"]["loadavg_at_end"] = loadavg()
    (OUT / "service_throughput.json").write_text(json.dumps(result, indent=2))
    print(table(["model", "no reuse: job (s)", "capture + analysis (s)", "capture reused: job (s)", "copy + analysis (s)",
                 "capture and analysis reused: job (s)", "copy + kept analysis (s)", "saved (s)", "same answer"],
                [[r["model"], r["cold_s"], r["capture_phase_s"][0], r["capture_only_s"], r["capture_phase_s"][2],
                  r["both_s"], r["capture_phase_s"][1], r["cold_s"] - r["both_s"], r["same_answer"]]
                 for r in result["reuse"]]))
    print()
    print(table(["workers", "jobs", "done", "wall (s)", "jobs/min", "median job (s)", "attempts", "load avg at end"],
                [[t["workers"], t["jobs"], t["done"], t["wall_s"], t["jobs_per_min"], t["median_job_s"], t["attempts"],
                  " / ".join(map(str, t["loadavg"]))] for t in result["throughput"]]))
    print(f"\nload average at start {result['loadavg_at_start']}, at end {loadavg()}; raw: {OUT / 'service_throughput.json'}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
