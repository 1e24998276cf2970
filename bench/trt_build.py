"""TensorRT-RTX on this CPU-only machine: parse, check and ahead-of-time build of each fixed.onnx.

For the demo model and every planted model (their certified answers, fixed.onnx made with
build_mixed) and for the fixed.onnx files of a `precision-doctor batch` run over the zoo: parse time,
`trt_check` (layers, checked layers, mismatches, candidates no layer comes from, forced FP32 nodes),
the build time of fixed.plan for TensorRT-RTX's portable default targets and for one target, the
plan's size, and for comparison the build of the untouched FP32 model. Times are wall times (median
of --repeats) on a shared machine: read them as orders of magnitude.

    .venv/bin/precision-doctor batch zoo --jobs 1 --out reports/batch-zoo     # the zoo's fixed.onnx files
    .venv/bin/python bench/trt_build.py --zoo-runs reports/batch-zoo --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx
from _common import fmt, loadavg, table, write_results

from precision_doctor import planted
from precision_doctor.backends.tensorrt import build_engine, parse_onnx, trt_check
from precision_doctor.backends.tensorrt.library import load_library
from precision_doctor.errors import UserError
from precision_doctor.graph.mixed import build_mixed, forced_fp32_nodes
from precision_doctor.graph.model import Model, from_proto, load_model


def _timed(fn, repeats: int):
    """(median seconds, last result) of `fn()`; (None, error text) when it raises a UserError."""
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        try:
            result = fn()
        except UserError as exc:
            return None, str(exc)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def measure(name: str, model: Model, fallback: list[str], fixed: Path, original: Path, repeats: int, target: str, lib) -> dict:
    row: dict = {"model": name, "nodes": len(model.nodes), "fallback": len(fallback)}
    forced = forced_fp32_nodes(model, fallback)
    row["forced_fp32"] = sorted(forced)
    row["parse_s"], parsed = _timed(lambda: parse_onnx(lib, fixed), repeats)
    if row["parse_s"] is None:
        row["error"] = parsed
        return row
    row["layers"] = parsed.network.num_layers
    res = trt_check(fixed, fallback, [n.name for n in model.candidates], model_precision(fixed), forced=forced, lib=lib)
    row.update(checked_layers=res.checked_layers, checked_nodes=res.checked_nodes, mismatches=len(res.mismatches),
               unmapped=len(res.unmapped), check_passed=res.passed)
    with tempfile.TemporaryDirectory(prefix="pd-bench-trt-") as tmp:
        row["build_portable_s"], built = _timed(lambda: build_engine(fixed, Path(tmp) / "fixed.plan", lib=lib), repeats)
        if row["build_portable_s"] is None:
            row["error"] = built
        else:
            row["plan_mib"] = built.size_bytes / 2**20
            row["targets"] = list(built.targets)
        row[f"build_{target}_s"], one = _timed(
            lambda: build_engine(fixed, Path(tmp) / "one.plan", lib=lib, compute_capabilities=[target]), repeats
        )
        row["fp32_build_s"], fp32 = _timed(lambda: build_engine(original, Path(tmp) / "fp32.plan", lib=lib), 1)
        if row["fp32_build_s"] is None:
            row["fp32_error"] = fp32
    return row


def model_precision(fixed: Path) -> str:
    graph = onnx.load(str(fixed), load_external_data=False).graph
    types = {t.data_type for t in graph.initializer}
    return "bf16" if onnx.TensorProto.BFLOAT16 in types else "fp16"


def planted_rows(repeats: int, target: str, lib, work: Path) -> list[dict]:
    rows = []
    for name, make in planted.CASES.items():
        case = make()
        original = work / f"{name}.onnx"
        onnx.save(case.model, str(original))
        model = from_proto(onnx.load(str(original)), path=original)
        fixed = work / f"{name}.fixed.onnx"
        onnx.save(build_mixed(model, frozenset(case.expected), "fp16"), str(fixed))
        label = "demo (three_defects)" if name == "three_defects" else f"planted:{name}"
        rows.append(measure(label, model, sorted(case.expected), fixed, original, repeats, target, lib))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def zoo_rows(runs: Path, repeats: int, target: str, lib, work: Path) -> list[dict]:
    rows = []
    for report in sorted(runs.glob("*/report.json")):
        rep = json.loads(report.read_text())
        fixed = report.parent / "fixed.onnx"
        if not rep.get("passed") or not fixed.exists():
            print(f"{report.parent.name}: no passing answer; skipped", file=sys.stderr)
            continue
        model = load_model(rep["model"]["path"])
        # the FP32 comparison build reads the model as diagnosed (input shapes fixed by the recipe)
        original = work / f"{report.parent.name}.fp32.onnx"
        g = onnx.load(str(fixed), load_external_data=False).graph
        proto = onnx.load(rep["model"]["path"])
        shapes = {i.name: i.type.tensor_type.shape for i in g.input}
        for i in proto.graph.input:
            if i.name in shapes:
                i.type.tensor_type.shape.CopyFrom(shapes[i.name])
        onnx.save(proto, str(original))
        rows.append(measure(f"zoo:{report.parent.name}", model, rep["answer"]["fallback_nodes"], fixed, original, repeats,
                            target, lib))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo-runs", type=Path, default=None, help="a `precision-doctor batch` output directory")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--target", default="8.6", help="the one compute capability of the single-target build")
    args = ap.parse_args()
    lib = load_library("tensorrt_rtx")
    with tempfile.TemporaryDirectory(prefix="pd-bench-trt-models-") as tmp:
        rows = planted_rows(args.repeats, args.target, lib, Path(tmp))
        if args.zoo_runs is not None:
            rows += zoo_rows(args.zoo_runs, args.repeats, args.target, lib, Path(tmp))
    path = write_results("trt_build", {"library": lib.label, "repeats": args.repeats, "rows": rows})
    headers = ["model", "nodes", "FP32 nodes (answer + forced)", "layers", "checked layers", "mismatches", "unmapped",
               "parse s", "build s (portable)", f"build s ({args.target})", "plan MiB", "FP32 model build s"]
    body = []
    for r in rows:
        body.append([
            r["model"], r["nodes"], f"{r['fallback']} + {len(r['forced_fp32'])}", r.get("layers"), r.get("checked_layers"),
            r.get("mismatches"), r.get("unmapped"), r.get("parse_s"),
            r.get("build_portable_s") if r.get("build_portable_s") is not None else "fails",
            r.get(f"build_{args.target}_s") if r.get(f"build_{args.target}_s") is not None else "fails",
            r.get("plan_mib"), r.get("fp32_build_s") if r.get("fp32_build_s") is not None else "fails",
        ])
    print(f"\n{lib.label}, median of {args.repeats}; load average at the end {loadavg()}")
    print(table(headers, body))
    for r in rows:
        if "error" in r:
            print(f"- {r['model']}: {fmt(r['error'])}")
        if "fp32_error" in r:
            print(f"- {r['model']} (untouched FP32 model): {fmt(r['fp32_error'])}")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
