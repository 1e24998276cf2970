"""The same zoo batch on the local executor and on a local Ray instance, side by side, and Ray's overhead per task.

    .venv/bin/python bench/ray_overhead.py --zoo zoo --rounds 2 # the fetched zoo (zoo fetch --dest zoo)
    .venv/bin/python bench/ray_overhead.py --quick              # planted models instead, 10 trivial tasks
    .venv/bin/python bench/ray_overhead.py --zoo zoo --only silero-vad-16k --only ppocr-mobile-cls  # a subset

Needs Ray (`pip install '.[ray]'`). Results: bench/out/ray_overhead.json and the tables printed.

Both batches run the same models with the same parallelism and threads: the local executor with `--jobs J`
(J worker processes, one ONNX Runtime thread each when J > 1) and `RayExecutor` on a local Ray instance
(as `batch --executor ray` starts it: every core of this machine as a CPU, one CPU and one thread per
task, so J = the number of cores), each into a fresh batch directory. The Ray wall time includes
starting and stopping the local instance; both are also reported apart. With `--rounds 2` the order is
local, Ray, Ray, local (a load that drifts on a shared machine then weighs on both alike).

Overhead per task: N trivial items (a function that returns at once) through `LocalExecutor(J)` and
through `RayExecutor` (both start a fresh worker process per item), and plain Ray tasks on reused
workers for reference; wall time x J / N is the time each item holds a slot.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import loadavg, table, write_results  # noqa: E402

from precision_doctor.batch.executors import LocalExecutor  # noqa: E402
from precision_doctor.batch.orchestrate import run_batch  # noqa: E402

ROW_KEYS = ("model", "status", "fallback_size", "evaluations", "message")


def _noop(item: int, stop) -> int:
    return item


def planted_zoo(root: Path) -> Path:
    """Three planted models with recipes (the --quick zoo)."""
    import onnx

    from precision_doctor import planted

    root.mkdir(parents=True, exist_ok=True)
    for name in ("cancellation", "deep_stack_one_bad", "overflow_island"):
        case = planted.CASES[name]()
        onnx.save(case.model, str(root / f"{name}.onnx"))
        (root / f"{name}.json").write_text(json.dumps({
            "inputs": {"samples": 16, "seed": 0}, "tolerance": {"atol": case.atol, "rtol": case.rtol},
        }))
    return root


def batch_local(zoo: Path, out: Path, jobs: int, only: list[str]) -> dict:
    t0 = time.monotonic()
    res = run_batch(zoo, out, executor=LocalExecutor(jobs), only=only)
    return {"wall_s": time.monotonic() - t0, "rows": [r.columns() for r in res.rows]}


def batch_ray(zoo: Path, out: Path, only: list[str]) -> dict:
    from precision_doctor.batch.executors import make_executor

    executor = make_executor(1, "ray")
    t0 = time.monotonic()
    executor.start()
    t1 = time.monotonic()
    res = run_batch(zoo, out, executor=executor, only=only)
    t2 = time.monotonic()
    executor.close()
    t3 = time.monotonic()
    return {"wall_s": t3 - t0, "start_s": t1 - t0, "batch_s": t2 - t1, "shutdown_s": t3 - t2,
            "rows": [r.columns() for r in res.rows]}


def overhead(n: int, jobs: int) -> dict:
    """Wall time of `n` trivial items on each executor (Ray connected already)."""
    import ray

    from precision_doctor.batch.ray_executor import RayExecutor

    out = {}
    t0 = time.monotonic()
    assert sorted(d.result for d in LocalExecutor(jobs).map(_noop, range(n))) == list(range(n))
    out["local_executor"] = time.monotonic() - t0
    t0 = time.monotonic()
    assert sorted(d.result for d in RayExecutor().map(_noop, range(n))) == list(range(n))
    out["ray_executor"] = time.monotonic() - t0
    plain = ray.remote(num_cpus=1)(_noop)
    ray.get(plain.remote(0, None))  # warm: the function exported, a worker started
    t0 = time.monotonic()
    assert ray.get([plain.remote(i, None) for i in range(n)]) == list(range(n))
    out["plain_ray_reused_workers"] = time.monotonic() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zoo", type=Path, default=Path("zoo"), help="the zoo to batch (default: zoo)")
    ap.add_argument("--quick", action="store_true", help="planted models instead of the zoo; 10 trivial tasks")
    ap.add_argument("--tasks", type=int, default=None, help="trivial tasks for the overhead (default 40; 10 quick)")
    ap.add_argument("--rounds", type=int, default=1, help="batches per executor, in the order ABBA... (default 1)")
    ap.add_argument("--only", action="append", default=[], help="batch only this model of the zoo; repeatable")
    ap.add_argument("--name", default="ray_overhead", help="results: bench/out/NAME.json")
    args = ap.parse_args()
    try:
        import ray
    except ImportError:
        sys.exit("needs Ray: pip install '.[ray]'")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n = args.tasks or (10 if args.quick else 40)
    with tempfile.TemporaryDirectory(prefix="pd-ray-bench-") as tmp:
        zoo = planted_zoo(Path(tmp) / "zoo") if args.quick else args.zoo.resolve()
        print(f"zoo: {zoo}; local --jobs {cores} against a local Ray instance with {cores} CPUs", flush=True)
        locals_, rays = [], []
        for k in range(args.rounds):
            for which in (("local", "ray") if k % 2 == 0 else ("ray", "local")):
                if which == "local":
                    locals_.append(batch_local(zoo, Path(tmp) / f"local{k}", cores, args.only))
                    print(f"local: {locals_[-1]['wall_s']:.1f} s (load {loadavg()})", flush=True)
                else:
                    rays.append(r := batch_ray(zoo, Path(tmp) / f"ray{k}", args.only))
                    print(f"ray: {r['wall_s']:.1f} s (start {r['start_s']:.1f} s, shutdown {r['shutdown_s']:.1f} s; "
                          f"load {loadavg()})", flush=True)
        t0 = time.monotonic()
        ray.init(address="local", include_dashboard=False, log_to_driver=False, object_store_memory=128 * 1024**2)
        init_s = time.monotonic() - t0
        try:
            trivial = overhead(n, cores)
        finally:
            ray.shutdown()

    def brief(rows: list[dict]) -> list[dict]:
        return [{k: r.get(k) for k in ROW_KEYS} for r in rows]

    same = all(brief(run["rows"]) == brief(locals_[0]["rows"]) for run in locals_ + rays)
    for local, on_ray in zip(locals_, rays):
        models = [[lr["model"], lr["status"], rr["status"], lr["fallback_size"], rr["fallback_size"], lr["evaluations"],
                   rr["evaluations"], lr["elapsed_s"], rr["elapsed_s"]] for lr, rr in zip(local["rows"], on_ray["rows"])]
        print()
        print(table(["model", "status local", "status Ray", "FP32 nodes local", "FP32 nodes Ray", "evals local",
                     "evals Ray", "model s local", "model s Ray"], models))
    print()
    base = sum(r["wall_s"] for r in locals_) / len(locals_)
    print(table(["executor", "wall s", "/ local (mean)", "of which Ray start", "of which Ray shutdown"],
                [[f"local --jobs {cores}", r["wall_s"], r["wall_s"] / base, None, None] for r in locals_] +
                [[f"Ray, local instance ({cores} CPUs)", r["wall_s"], r["wall_s"] / base, r["start_s"], r["shutdown_s"]]
                 for r in rays]))
    print(f"\nsame summary rows (model, status, FP32 nodes, evaluations, message): {'yes' if same else 'NO'}")
    print()
    print(table([f"{n} trivial items", "wall s", "per item s", f"per item x {cores} slots s"],
                [[k, v, v / n, v * cores / n] for k, v in trivial.items()]))
    extra = (trivial["ray_executor"] - trivial["local_executor"]) * cores / n
    print(f"\nRay's overhead per task over the local executor's (a slot held this much longer): {extra:.2f} s")
    print(f"ray.init of a local instance: {init_s:.1f} s")
    path = write_results(args.name, {
        "zoo": str(zoo) if not args.quick else "planted (quick)", "only": args.only, "jobs": cores, "tasks": n, "local": locals_,
        "ray": rays, "same_summary": same, "trivial_wall_s": trivial, "ray_init_s": init_s,
        "ray_wall_over_local": [r["wall_s"] / base for r in rays], "ray_extra_per_task_s": extra,
    })
    print(f"results: {path}")


if __name__ == "__main__":
    main()
