"""Peak memory and throughput of mark-all capture on a model whose activations total several GB.

A synthetic chain of Conv / MatMul / Add / Tanh / Mul layers on one large tensor (default
1x64x256x256 FP32, 16 MiB per activation) is captured (reference, emulated FP16 and per-node local
runs) into HDF5 under several group budgets and compressions. Each setting runs in its own fresh
subprocess, which reports its own peak RSS (getrusage ru_maxrss) and, from a polling thread, the
peak RSS seen during each of the three runs.

    .venv/bin/python bench/capture_memory.py            # full: ~5.8 GB of activations per setting
    .venv/bin/python bench/capture_memory.py --quick    # small model, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from _common import OUT, loadavg, table, write_results

MiB = 1 << 20
UNBOUNDED_MB = 1e9  # a budget larger than the whole run: every tensor in one group


def build_model(path: Path, channels: int, size: int, layers: int, seed: int = 0) -> dict:
    """A chain of `layers` nodes on a [1, channels, size, size] tensor, written to `path`."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def init(name: str, a) -> str:
        inits.append(numpy_helper.from_array(np.asarray(a, dtype=np.float32), name))
        return name

    h = "x"
    for i in range(layers):
        kind = i % 5
        out = f"t{i}"
        if kind == 0:
            w = init(f"conv{i}_w", rng.standard_normal((channels, channels, 1, 1)) / np.sqrt(channels))
            nodes.append(helper.make_node("Conv", [h, w], [out], name=f"conv{i}"))
        elif kind == 1:
            w = init(f"matmul{i}_w", rng.standard_normal((size, size)) / np.sqrt(size))
            nodes.append(helper.make_node("MatMul", [h, w], [out], name=f"matmul{i}"))
        elif kind == 2:
            b = init(f"add{i}_b", rng.standard_normal((channels, 1, 1)) * 0.1)
            nodes.append(helper.make_node("Add", [h, b], [out], name=f"add{i}"))
        elif kind == 3:
            nodes.append(helper.make_node("Tanh", [h], [out], name=f"tanh{i}"))
        else:
            s = init(f"mul{i}_s", np.float32(1.5))
            nodes.append(helper.make_node("Mul", [h, s], [out], name=f"mul{i}"))
        h = out
    shape = [1, channels, size, size]
    g = helper.make_graph(
        nodes, "capture_memory",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(h, TensorProto.FLOAT, shape)],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    m = onnx.shape_inference.infer_shapes(m)
    onnx.save(m, str(path))
    tensor_bytes = int(np.prod(shape)) * 4
    return {"channels": channels, "size": size, "layers": layers, "tensor_shape": shape, "tensor_bytes": tensor_bytes}


# -- the child: one capture, measured ------------------------------------------------------------
def child(args: argparse.Namespace) -> None:
    import h5py
    import psutil

    from precision_doctor.graph.formats import FP16
    from precision_doctor.graph.model import load_model
    from precision_doctor.measure.capture import capture
    from precision_doctor.spec import CaptureSpec

    proc = psutil.Process()
    model = load_model(args.model)
    rng = np.random.default_rng(1)
    shape = model.tensor_shapes["x"]
    samples = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(args.samples)]
    compression = None if args.compression == "none" else args.compression
    settings = CaptureSpec(group_mb=args.group_mb, compression=compression)

    phase = {"name": "reference"}
    peaks: dict[str, int] = {}
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            rss = proc.memory_info().rss
            p = phase["name"]
            if rss > peaks.get(p, 0):
                peaks[p] = rss
            time.sleep(0.005)

    groups: dict[str, int] = {}
    run_s: dict[str, float] = {}
    last = {"t": 0.0}

    def progress(run: str, done: int, total: int) -> None:
        groups[run] = groups.get(run, 0) + 1
        # The next group belongs to this run until it is complete, then to the next run.
        if done >= total:
            now = time.perf_counter()
            run_s[run] = now - last["t"]
            last["t"] = now
            phase["name"] = {"reference": "lowp", "lowp": "local", "local": "done"}.get(run, run)

    if args.trim:
        # Hand freed heap memory back to the OS before each group's session (glibc only). This is
        # a patch of the benchmark's process, not of precision_doctor: it shows what a
        # malloc_trim between groups would do.
        import ctypes

        from precision_doctor.measure import capture as capture_mod

        libc = ctypes.CDLL("libc.so.6")
        make_session = capture_mod.make_session

        def trimmed(*a, **kw):
            libc.malloc_trim(0)
            return make_session(*a, **kw)

        capture_mod.make_session = trimmed

    baseline = proc.memory_info().rss
    out = Path(args.h5)
    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = ru0.ru_utime + ru0.ru_stime
    t0 = last["t"] = time.perf_counter()
    capture(model, samples, FP16, out, group_mb=settings.group_mb, compression=settings.compression, progress=progress)
    wall = time.perf_counter() - t0
    stop.set()
    thread.join()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    maxrss = ru.ru_maxrss * 1024  # Linux: KiB
    cpu_s = ru.ru_utime + ru.ru_stime - cpu0

    act_bytes, largest, n_ds = 0, 0, 0
    per_run: dict[str, int] = {}
    with h5py.File(out, "r") as f:
        for run in f:
            for key in f[run]:
                ds = f[run][key]
                nb = int(ds.size * ds.dtype.itemsize)
                act_bytes += nb
                per_run[run] = per_run.get(run, 0) + nb
                largest = max(largest, nb // max(ds.shape[0], 1))
                n_ds += 1
    result = {
        "wall_s": wall,
        "cpu_s": cpu_s,
        "loadavg_after": os.getloadavg(),
        "baseline_rss": baseline,
        "peak_rss": maxrss,
        "peak_rss_by_run": peaks,
        "groups_by_run": groups,
        "seconds_by_run": run_s,
        "activation_bytes": act_bytes,
        "activation_bytes_by_run": per_run,
        "largest_tensor_bytes": largest,
        "datasets": n_ds,
        "file_bytes": out.stat().st_size,
    }
    print("RESULT " + json.dumps(result))


def render(results: list[dict], repeat: int) -> str:
    headers = [
        "group budget", "compression", "peak RSS MiB", "peak - baseline MiB", "peak vs unbounded",
        "peak in ref / lowp / local MiB", "groups ref / lowp / local", "largest tensor MiB",
        "activations written MiB", "HDF5 file MiB", "capture s", "CPU s", "s in ref / lowp / local", "throughput MB/s",
    ]
    unb = {r["compression"]: r for r in results if r["group_mb"] >= UNBOUNDED_MB and not r["trim"]}
    runs = ("reference", "lowp", "local")
    rows = []
    for r in results:
        pr, gr, sr = r["peak_rss_by_run"], r["groups_by_run"], r["seconds_by_run"]
        base = unb.get(r["compression"])
        peak = f"{r['peak_rss'] / MiB:.0f}"
        wall = f"{r['wall_s']:.1f}"
        if repeat > 1:
            peak += f" ({r['peak_rss_range'][0] / MiB:.0f}-{r['peak_rss_range'][1] / MiB:.0f})"
            wall += f" ({r['wall_s_range'][0]:.1f}-{r['wall_s_range'][1]:.1f})"
        rows.append([
            r["group"], r["compression"], peak, (r["peak_rss"] - r["baseline_rss"]) / MiB,
            f"{r['peak_rss'] / base['peak_rss']:.2f}x" if base else "-",
            " / ".join(f"{pr.get(k, 0) / MiB:.0f}" for k in runs),
            " / ".join(str(gr.get(k, 0)) for k in runs),
            r["largest_tensor_bytes"] / MiB, r["activation_bytes"] / MiB, r["file_bytes"] / MiB,
            wall, r["cpu_s"], " / ".join(f"{sr.get(k, 0):.1f}" for k in runs), r["activation_bytes"] / 1e6 / r["wall_s"],
        ])
    return table(headers, rows)


# -- the parent: one subprocess per setting ------------------------------------------------------
def run_setting(model_path: Path, h5: Path, group_mb: float, compression: str, samples: int, trim: bool) -> dict:
    cmd = [
        sys.executable, __file__, "--child", "--model", str(model_path), "--h5", str(h5),
        "--group-mb", str(group_mb), "--compression", compression, "--samples", str(samples),
    ] + (["--trim"] if trim else [])
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - t0
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"capture child failed (rc={proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    res = json.loads(line[len("RESULT "):])
    res["process_s"] = elapsed
    h5.unlink(missing_ok=True)  # GBs each; the numbers are what we keep
    return res


def settings(small: float, large: float) -> list[tuple[float, str, bool]]:
    """(group budget MB, compression, malloc_trim between groups)"""
    return [
        (small, "lzf", False),
        (large, "lzf", False),
        (UNBOUNDED_MB, "lzf", False),
        (small, "none", False),
        (UNBOUNDED_MB, "none", False),
        (small, "lzf", True),
    ]


def parse_setting(text: str) -> tuple[float, str, bool]:
    parts = text.strip().split(":")
    mb = UNBOUNDED_MB if parts[0] == "unbounded" else float(parts[0])
    comp = parts[1] if len(parts) > 1 else "lzf"
    return mb, comp, len(parts) > 2 and parts[2] == "trim"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small model (seconds, not minutes)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--h5", help=argparse.SUPPRESS)
    ap.add_argument("--group-mb", type=float, default=256.0, help=argparse.SUPPRESS)
    ap.add_argument("--compression", default="lzf", help=argparse.SUPPRESS)
    ap.add_argument("--trim", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--samples", type=int, default=None, help="samples captured (default 2, quick 1)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per setting: max peak and median time are shown")
    ap.add_argument("--channels", type=int, default=None, help="tensor channels (default 32, quick 16)")
    ap.add_argument("--size", type=int, default=None, help="tensor height = width (default 256, quick 128)")
    ap.add_argument("--layers", type=int, default=None, help="chain length (default 60, quick 30)")
    ap.add_argument("--only", default=None, metavar="MB:COMP[:trim],...",
                    help="run only these settings, e.g. 64:none,64:lzf:trim,unbounded:none")
    ap.add_argument("--render", type=Path, default=None, help="print the table of an earlier results JSON")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    if args.render:
        saved = json.loads(args.render.read_text())
        print(saved.get("summary", ""))
        print()
        print(render(saved["results"], saved.get("repeat", 1)))
        return

    quick = args.quick
    channels = args.channels or (16 if quick else 32)
    size = args.size or (128 if quick else 256)
    layers = args.layers or (30 if quick else 60)
    samples = args.samples or (1 if quick else 2)
    work = OUT / "capture_memory"
    work.mkdir(parents=True, exist_ok=True)
    model_path = work / "model.onnx"
    spec = build_model(model_path, channels, size, layers)
    t_all = time.perf_counter()
    load_start = loadavg()
    results = []
    chosen = settings(4, 16) if quick else settings(64, 256)
    if args.only:
        chosen = [parse_setting(x) for x in args.only.split(",") if x.strip()]
    for group_mb, comp, trim in chosen:
        label = ("unbounded" if group_mb >= UNBOUNDED_MB else f"{group_mb:g} MB") + (" + malloc_trim" if trim else "")
        reps = []
        for i in range(args.repeat):
            print(f"capture: group budget {label}, compression {comp} ({i + 1}/{args.repeat}) ...", file=sys.stderr,
                  flush=True)
            r = run_setting(model_path, work / "activations.h5", group_mb, comp, samples, trim)
            print(f"  peak RSS {r['peak_rss'] / MiB:.0f} MiB, {r['wall_s']:.1f} s", file=sys.stderr, flush=True)
            reps.append(r)
        # The headline: the highest peak and the (lower) median time over the repeats.
        res = dict(sorted(reps, key=lambda r: r["wall_s"])[(len(reps) - 1) // 2])
        res["peak_rss"] = max(r["peak_rss"] for r in reps)
        res["peak_rss_range"] = [min(r["peak_rss"] for r in reps), res["peak_rss"]]
        res["wall_s_range"] = [min(r["wall_s"] for r in reps), max(r["wall_s"] for r in reps)]
        res.update(group_mb=group_mb, group=label, compression=comp, trim=trim, repeats=reps)
        results.append(res)

    md = render(results, args.repeat)
    tb = spec["tensor_bytes"]
    base_rss = min(r["baseline_rss"] for r in results) / MiB
    summary = (
        f"Model: {layers} layers on {spec['tensor_shape']} FP32 ({tb / MiB:.0f} MiB per activation), "
        f"{samples} sample(s), 3 runs (reference, lowp, local); baseline RSS before capture ~{base_rss:.0f} MiB; "
        f"{args.repeat} run(s) per setting" + (" (peak: max and range; time: lower median and range)" if args.repeat > 1 else "")
    )
    summary += f"; load average {load_start} -> {loadavg()}"
    print("\n" + summary + "\n")
    print(md)
    path = write_results(
        "capture_memory" + ("_quick" if quick else "") + (f"_{layers}layers" if args.layers else ""),
        {"quick": quick, "model": spec, "samples": samples, "repeat": args.repeat, "results": results, "table": md,
         "summary": summary, "wall_s": time.perf_counter() - t_all, "loadavg": [load_start, loadavg()]},
    )
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
