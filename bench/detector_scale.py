"""Scale check on a real detector: nudenet's YOLOv8n 320x320 (about 300 nodes), FP16 error spread over the
whole network, a strict tolerance. `auto` vs onnxconverter-common's `segment` search (and polygraphy's
prefix `bisect` for context) on the same oracle setup, plus a profile of one evaluation.

    .venv/bin/python bench/detector_scale.py            # 3 samples; atol=rtol=1e-4, atol=rtol=1e-3, the zoo's 1e-3/1e-2
    .venv/bin/python bench/detector_scale.py --quick    # 2 samples, atol=rtol=1e-3, 120 s cap per strategy
    .venv/bin/python bench/detector_scale.py --tolerance 1e-4,1e-4 --time-budget 600

The model comes from the `nudenet` wheel on PyPI (pip download, then the .onnx is unzipped into
bench/out/), or from precision_doctor.zoo when that module exists and provides it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
from _common import OUT, loadavg, ratio, table, write_results
from _search import SearchBench, phase_text

from precision_doctor.graph.emulate import MASK_INPUT
from precision_doctor.graph.model import Model, load_model
from precision_doctor.graph.ort_session import make_session, with_outputs
from precision_doctor.measure.tolerance import Tolerance, check_all

MODEL_NAME = "320n.onnx"
ZOO_NAME = "nudenet-320n"
INPUT = "images"
SHAPE = [1, 3, 320, 320]


# -- getting the model ----------------------------------------------------------------------------
def fetch_model() -> Path:
    """nudenet's 320n.onnx: through precision_doctor.zoo when it exists (checksummed), else pip download."""
    if importlib.util.find_spec("precision_doctor.zoo") is not None:
        dest = OUT / "zoo"
        try:
            from precision_doctor.zoo import fetch as zoo

            entries = zoo.fetch(dest, names=[ZOO_NAME], log=lambda m: print(m, file=sys.stderr))
            path = dest / entries[0]["path"]
            if path.is_file():
                return path
        except Exception as exc:  # another helper's module, still changing: fall back to pip download
            print(f"precision_doctor.zoo did not give the model ({type(exc).__name__}: {exc}); using pip",
                  file=sys.stderr)
    dest = OUT / "nudenet" / MODEL_NAME
    if dest.exists():
        return dest
    wheels = OUT / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob("nudenet-*.whl"))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "nudenet", "-d", str(wheels)]
        subprocess.run(cmd, check=True)
        found = sorted(wheels.glob("nudenet-*.whl"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(found[-1]) as z:
        member = next(n for n in z.namelist() if n.endswith("/" + MODEL_NAME))
        dest.write_bytes(z.read(member))
    return dest


# -- profile of one evaluation --------------------------------------------------------------------
def profile_evaluation(bench: SearchBench, fallback: frozenset[str], repeats: int) -> dict:
    """Where one evaluation's time goes: gated emulation run, FP32 reference run, tolerance check."""
    model: Model = bench.model
    backend = bench.backend
    sample = bench.samples[0]
    ref_out = bench.refs[0]

    def timeit(fn) -> float:
        fn()  # warm-up
        t = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
        return float(np.median(t))

    t0 = time.perf_counter()
    runner = backend.prepare(fallback)
    prepare_s = time.perf_counter() - t0
    outs = runner.run(sample)
    emul_s = timeit(lambda: runner.run(sample))
    ref_s = timeit(lambda: bench.ref.run(sample))
    check_s = timeit(lambda: check_all(outs, ref_out, bench.tol))
    opt_sess = make_session(with_outputs(model.proto, model.outputs, model.tensor_types), optimize=True)
    ref_opt_s = timeit(lambda: opt_sess.run(None, sample))
    evals = [bench.oracle().evaluate(fallback) for _ in range(2)]  # a whole evaluation, through the oracle

    # Node counts of the gated graph against the original, and ORT's own per-op profile of one run.
    orig = Counter(n.op_type for n in model.proto.graph.node)
    gated = Counter(n.op_type for n in backend.graph.proto.graph.node)
    added = {op: gated[op] - orig.get(op, 0) for op in gated if gated[op] - orig.get(op, 0) > 0}
    per_op = ort_profile(backend, sample, fallback)
    return {
        "fallback_size": len(fallback),
        "samples": len(bench.samples),
        "prepare_s": prepare_s,
        "emulated_run_s": emul_s,
        "reference_run_s": ref_s,
        "reference_run_optimized_s": ref_opt_s,
        "tolerance_check_s": check_s,
        "oracle_evaluation_s": [e.elapsed_s for e in evals],
        "nodes_original": sum(orig.values()),
        "nodes_gated": sum(gated.values()),
        "nodes_added": added,
        "ort_kernel_ms_by_op": per_op,
    }


def ort_profile(backend, sample: dict, fallback: frozenset[str], runs: int = 3) -> dict:
    import onnxruntime as ort

    proto = with_outputs(backend.graph.proto, backend.output_names, backend.model.tensor_types)
    with tempfile.TemporaryDirectory(prefix="pd-prof-") as tmp:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.enable_cpu_mem_arena = False
        so.enable_profiling = True
        so.profile_file_prefix = str(Path(tmp) / "prof")
        so.log_severity_level = 3
        sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
        feed = {**sample, MASK_INPUT: backend.graph.mask(fallback)}
        for _ in range(runs + 1):
            sess.run(None, feed)
        prof = json.loads(Path(sess.end_profiling()).read_text())
    by_op: Counter = Counter()
    run_idx = -1
    for ev in prof:
        if ev.get("name") == "model_run":
            run_idx += 1
        op = ev.get("args", {}).get("op_name", "?")
        # an If's kernel time includes the kernels of its branch, which have events of their own
        if ev.get("cat") == "Node" and ev.get("name", "").endswith("_kernel_time") and op != "If":
            by_op[ev.get("args", {}).get("op_name", "?")] += ev.get("dur", 0)
    # kernel events are per run; the first (warm-up) is included in the sum, so divide by all runs
    n_runs = runs + 1
    return {op: us / 1000.0 / n_runs for op, us in by_op.most_common()}


# -- choosing the tolerance -----------------------------------------------------------------------
def all_fp16_error(bench: SearchBench) -> dict:
    v = bench.oracle().evaluate(())
    out = {k: c.to_dict() for k, c in v.outputs.items()}
    allv = bench.oracle().evaluate(bench.space.universe)
    return {"all_fp16_passes": v.passed, "all_fp16": out, "all_fp32_passes": allv.passed}


def auto_analysis(run: dict, bench: SearchBench) -> dict:
    """What auto's trajectory says: which start it took, what the coarse blocks and the sweep converted, what
    certifying cost, and where the members of the answer sit in the sensitivity ranking."""
    tr = run["trajectory"]
    rank = {name: i + 1 for i, name in enumerate(bench.space.ranking)}
    found = run["found"] or []
    ranks = sorted(rank.get(x, len(rank) + 1) for x in found)
    noise = sum(1 for x in bench.space.universe if bench.space.scores.get(x, 0.0) <= bench.space.noise)

    def phase(p: str) -> list[dict]:
        return [e for e in tr if e["phase"] == p]

    coarse, sweep = phase("coarse"), phase("sweep")
    return {
        "ranking_informative": bench.space.informative,
        "coarse_evaluations": len(coarse),
        "coarse_blocks_converted": sum(1 for e in coarse if e["passed"]),
        "sweep_evaluations": len(sweep),
        "sweep_passed": sum(1 for e in sweep if e["passed"]),
        "sweep_kept": sum(1 for e in sweep if not e["passed"]),
        "certify_evaluations": len(phase("certify")),
        "final_size": run["size"],
        "one_minimal_checked": run.get("one_minimal_checked"),
        "answer_worst_rank": ranks[-1] if ranks else None,
        "answer_median_rank": ranks[len(ranks) // 2] if ranks else None,
        "candidates_scored_as_noise": noise,
        "noise_threshold": bench.space.noise,
        "answer": [
            {"node": x, "rank": rank.get(x), "score": bench.space.scores.get(x)} for x in found
        ] if len(found) <= 12 else None,
    }


def parse_tol(text: str) -> tuple[float, float]:
    a, _, r = text.partition(",")
    return float(a), float(r or a)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 samples, atol = rtol = 1e-3 only, 120 s cap per strategy")
    ap.add_argument("--samples", type=int, default=None, help="search samples (default 3, quick 2)")
    ap.add_argument("--tolerance", action="append", default=None, metavar="ATOL[,RTOL]",
                    help="elemwise tolerance, repeatable (default: 1e-4,1e-4, 1e-3,1e-3 and the zoo's 1e-3,1e-2; quick 1e-3)")
    ap.add_argument("--time-budget", type=float, default=None, help="cap per strategy, s (default 900, quick 120)")
    ap.add_argument("--strategies", default="auto,segment,bisect")
    ap.add_argument("--model", type=Path, default=None, help="an ONNX file instead of nudenet's 320n.onnx")
    args = ap.parse_args()
    quick = args.quick
    n = args.samples or (2 if quick else 3)
    tols = [parse_tol(t) for t in (args.tolerance or (["1e-3,1e-3"] if quick else ["1e-4,1e-4", "1e-3,1e-3", "1e-3,1e-2"]))]
    budget = args.time_budget or (120.0 if quick else 900.0)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]

    t_all = time.perf_counter()
    load_start = loadavg()
    path = args.model or fetch_model()
    t0 = time.perf_counter()
    model = load_model(path, input_shapes={INPUT: SHAPE})
    load_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    samples = [{INPUT: rng.uniform(0.0, 1.0, SHAPE).astype(np.float32)} for _ in range(n)]
    bench = SearchBench(model, samples, Tolerance(*tols[0]), workdir=OUT / "detector_scale")
    print(f"{path.name}: {len(model.nodes)} nodes, {len(bench.space.universe)} candidates, "
          f"{model.total_flops / 1e9:.2f} GFLOP; capture + analysis {bench.capture_s:.1f} s", file=sys.stderr)

    results = []
    for atol, rtol in tols:
        bench.tol = Tolerance(atol, rtol)
        base = all_fp16_error(bench)
        print(f"atol={atol:g} rtol={rtol:g}: all-FP16 passes: {base['all_fp16_passes']}, "
              f"all-FP32 passes: {base['all_fp32_passes']}", file=sys.stderr)
        runs = {}
        for strat in strategies:
            print(f"search: {strat} (cap {budget:g} s) ...", file=sys.stderr, flush=True)
            r = bench.run(strat, time_s=budget)
            runs[strat] = r
            print(f"  {r['evaluations']} evaluations, set {r['size']}, {r['wall_s']:.1f} s"
                  + (f" CAPPED: {r['capped']}" if r["capped"] else ""), file=sys.stderr, flush=True)
        a, sg = runs.get("auto"), runs.get("segment")
        results.append({
            "tolerance": bench.tol.to_dict(), "baseline": base, "runs": runs,
            "auto_over_segment": ratio(a["evaluations"], sg["evaluations"]) if a and sg else None,
            "auto_analysis": auto_analysis(a, bench) if a else None,
        })

    first = results[0]["runs"]
    found = (first.get("auto") or {}).get("found") or (first.get("segment") or {}).get("found") or []
    bench.tol = Tolerance(*tols[0])
    prof = profile_evaluation(bench, frozenset(found), repeats=5)
    load_end = loadavg()

    # -- tables ------------------------------------------------------------------------------------
    headers = ["tolerance (atol, rtol)", "strategy", "evaluations", "set size", "FP32 FLOP %", "search wall s",
               "CPU s", "mean s / evaluation", "capped", "evaluations by phase"]
    rows = []
    for res in results:
        t = res["tolerance"]
        for s, r in res["runs"].items():
            rows.append([f"{t['atol']:g}, {t['rtol']:g}", s, r["evaluations"],
                         r["size"] if r["size"] is not None else "none",
                         "-" if r["flop_share"] is None else f"{100 * r['flop_share']:.1f}", r["wall_s"], r["cpu_s"],
                         r["eval_s_mean"], "yes" if r["capped"] else "no", phase_text(r["phases"])])
    main_table = table(headers, rows)
    ratio_rows = []
    for res in results:
        t, runs, aa = res["tolerance"], res["runs"], res["auto_analysis"] or {}
        a, sg = runs.get("auto"), runs.get("segment")
        if not (a and sg):
            continue
        r = res["auto_over_segment"]
        ratio_rows.append([f"{t['atol']:g}, {t['rtol']:g}", res["baseline"]["all_fp16_passes"], f"{r:.2f}",
                           "met" if r <= 0.6 else "MISSED", f"{a['size']} vs {sg['size']}",
                           f"{aa.get('candidates_scored_as_noise')}/{len(bench.space.universe)}",
                           f"{aa.get('coarse_evaluations')} ({aa.get('coarse_blocks_converted')} blocks converted)",
                           f"{aa.get('sweep_evaluations')} ({aa.get('sweep_passed')} removals, {aa.get('sweep_kept')} kept)",
                           aa.get("certify_evaluations"), aa.get("one_minimal_checked")])
    ratio_table = table(["tolerance", "all-FP16 passes", "auto/segment evals", "target <= 0.60",
                         "set auto vs segment", "candidates scored as noise", "coarse evaluations",
                         "sweep evaluations", "certify evaluations", "every member's removal seen to fail"],
                        ratio_rows)

    prof_rows = [
        ["prepare (mask for the set)", prof["prepare_s"] * 1000],
        ["emulated (gated) graph run, 1 sample", prof["emulated_run_s"] * 1000],
        ["FP32 reference run, 1 sample (basic opts, as the oracle's references)", prof["reference_run_s"] * 1000],
        ["FP32 reference run, 1 sample (all opts)", prof["reference_run_optimized_s"] * 1000],
        ["tolerance check, 1 sample", prof["tolerance_check_s"] * 1000],
        [f"whole oracle evaluation, {n} samples (passing set)", min(prof["oracle_evaluation_s"]) * 1000],
    ]
    prof_table = table(["part of one evaluation", "ms"], prof_rows)
    ops = prof["ort_kernel_ms_by_op"]
    total_k = sum(ops.values()) or 1.0
    op_rows = [[op, ms, f"{100 * ms / total_k:.1f}"] for op, ms in list(ops.items())[:10]]
    op_table = table(["op in gated graph", "kernel ms / run", "% of kernel time"], op_rows)
    added = ", ".join(f"{k} +{v}" for k, v in sorted(prof["nodes_added"].items(), key=lambda kv: -kv[1]))

    print(f"\n{path.name}: {len(model.nodes)} nodes ({len(bench.space.universe)} candidates), "
          f"{model.total_flops / 1e9:.2f} GFLOP, inputs uniform [0,1] {SHAPE}, {n} samples, elemwise check; "
          f"capture + analysis {bench.capture_s:.1f} s; load average {load_start} -> {load_end}\n")
    print(main_table)
    print()
    print(ratio_table)
    print(f"\nOne evaluation (set of {prof['fallback_size']} nodes, tolerance {tols[0]}):\n")
    print(prof_table)
    print(f"\nGated graph: {prof['nodes_gated']} nodes for {prof['nodes_original']} original ({added})\n")
    print(op_table)
    out = write_results(
        "detector_scale" + ("_quick" if quick else ""),
        {"quick": quick, "model": str(path), "nodes": len(model.nodes), "candidates": len(bench.space.universe),
         "gflops": model.total_flops / 1e9, "samples": n, "time_budget_s": budget, "load_s": load_s,
         "capture_analysis_s": bench.capture_s, "setup_s": bench.setup_s, "results": results, "profile": prof,
         "loadavg": [load_start, load_end], "wall_s": time.perf_counter() - t_all,
         "tables": {"main": main_table, "ratio": ratio_table, "profile": prof_table, "ops": op_table}},
    )
    print(f"\nresults: {out}")
    bench.close()


if __name__ == "__main__":
    main()
