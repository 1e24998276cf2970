"""precision-doctor against two peer tools, side by side in one run, on the planted suite and the zoo.

    .venv/bin/python bench/peers.py                  # planted suite (4 samples) + zoo in bench/out/zoo
    .venv/bin/python bench/peers.py --quick          # planted only, 2 samples, shipped auto_convert, 120 s caps
    .venv/bin/python bench/peers.py --no-modelopt    # skip ModelOpt AutoCast
    .venv/bin/python bench/peers.py --render bench/out/peers.json   # print the tables of a saved run
    .venv/bin/python bench/peers.py --zoo zoo --only zoo:ppocr-mobile-cls --name peers_cls_recipe   # one zoo model
    .venv/bin/python bench/peers.py --objective deploy --name peers_deploy   # precision-doctor's rows with --cost deploy

Results: bench/out/NAME.json (everything) and bench/out/NAME.md (the tables). ModelOpt lives in its own venv
(bench/out/modelopt-venv: `python3 -m venv` + `pip install 'nvidia-modelopt[onnx]'`); without it, or with
--no-modelopt, its rows are left out.

Tools, each on the same model proto (our node names filled in, input shapes fixed), samples and tolerance:

- precision-doctor `auto` through SearchBench (capture + analysis + setup + search; capture reported apart),
  and our `segment` strategy (onnxconverter-common's SegmentList driven through our oracle) for reference.
- onnxconverter-common `auto_mixed_precision.auto_convert_mixed_precision` as shipped, in a subprocess with
  a time cap: `shipped` = the first sample as its feed_dict and rtol/atol (np.allclose); `matched` = every
  sample (its ORT helper patched to run all samples in one session and concatenate the outputs) and our
  elemwise check as validate_fn (rtol=atol=None). Attempts come from its "Running attempt N" lines; its set
  is the last node_block_list given to `float16.convert_float_to_float16` (plus the nodes that the
  converter's DEFAULT_OP_BLOCK_LIST keeps in FP32). `matched` is skipped where `shipped` hit the cap without
  one passing attempt (the stricter check would walk the same failing attempts).
- NVIDIA ModelOpt AutoCast (`modelopt.onnx.autocast.convert_to_mixed_precision`, default classifier settings:
  data_max 512, init_max 65504, no depth-of-reduction limit) in its own venv, calibrated on our samples (one
  NPZ per sample, its multi-batch mode); its set is the high-precision node list after its op filter.

Every peer set is then judged by our emulated oracle (EmulateBackend, all search samples and on the first
sample alone), and every set (ours included) by auto_convert's own execution: onnxconverter-common's
float16 conversion run on ONNX Runtime CPU ("ORT-CPU FP16").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODELOPT_PY = HERE / "out" / "modelopt-venv" / "bin" / "python"
MINIMAL_UP_TO = 20  # 1-minimality is checked for passing sets of at most this many nodes


# -- files shared with the child processes ---------------------------------------------------------


def write_work(wd: Path, proto: Any, samples: list[dict], atol: float, rtol: float) -> None:
    """The model, one NPZ per sample and the tolerance, for the subprocesses."""
    import onnx

    wd.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, str(wd / "model.onnx"))
    sd = wd / "samples"
    sd.mkdir(exist_ok=True)
    for i, s in enumerate(samples):
        np.savez(sd / f"sample_{i:03d}.npz", **s)
    (wd / "work.json").write_text(json.dumps({"atol": atol, "rtol": rtol, "samples": len(samples)}), encoding="utf-8")


def read_samples(wd: Path) -> list[dict[str, np.ndarray]]:
    """The samples `write_work` wrote, in order."""
    out = []
    for p in sorted((wd / "samples").glob("sample_*.npz")):
        with np.load(p, allow_pickle=False) as z:
            out.append({k: z[k] for k in z.files})
    return out


def elemwise_ok(out: np.ndarray, ref: np.ndarray, atol: float, rtol: float) -> tuple[bool, float]:
    """Polygraphy's elemwise rule, as our oracle applies it (precision_doctor.measure.tolerance.check); and max |d|."""
    from precision_doctor.measure.tolerance import Tolerance, check

    c = check(out, ref, Tolerance(atol, rtol))
    return c.passed, c.max_abs


# -- child: auto_convert_mixed_precision as shipped --------------------------------------------------


def child_autoconvert(wd: Path, out: Path, feed: str, check: str) -> None:
    """Run auto_convert_mixed_precision on the work in `wd`; write what it did to `out` (JSON)."""
    import onnx
    from onnxconverter_common import __version__ as occ_version
    from onnxconverter_common import auto_mixed_precision as amp
    from onnxconverter_common import float16

    spec = json.loads((wd / "work.json").read_text(encoding="utf-8"))
    proto = onnx.load(str(wd / "model.onnx"))
    samples = read_samples(wd)
    state: dict[str, Any] = {"converts": 0, "block": None, "convert_s": 0.0, "ort_s": 0.0, "full_runs": 0}
    orig_convert = float16.convert_float_to_float16
    orig_get = amp.get_tensor_values_using_ort

    def convert(model: Any, *args: Any, **kw: Any) -> Any:
        state["block"] = list(kw.get("node_block_list") or [])
        state["converts"] += 1
        t0 = time.perf_counter()
        try:
            return orig_convert(model, *args, **kw)
        finally:
            state["convert_s"] += time.perf_counter() - t0

    def get(model: Any, input_feed: dict, output_names: list | None = None, sess_options: Any = None) -> list:
        t0 = time.perf_counter()
        try:
            if output_names is None:
                state["full_runs"] += 1
                if feed == "all":  # one session per attempt as shipped, every sample through it
                    import onnxruntime as ort

                    sess = ort.InferenceSession(model.SerializeToString(), sess_options, providers=["CPUExecutionProvider"])
                    per = [sess.run(None, s) for s in samples]
                    return [np.concatenate([p[k].ravel() for p in per]) for k in range(len(per[0]))]
            return orig_get(model, input_feed, output_names, sess_options)
        finally:
            state["ort_s"] += time.perf_counter() - t0

    float16.convert_float_to_float16 = convert
    amp.get_tensor_values_using_ort = get
    atol, rtol = spec["atol"], spec["rtol"]
    if check == "elemwise":
        def validate(res_ref, res_new) -> bool:
            return all(elemwise_ok(b, a, atol, rtol)[0] for a, b in zip(res_ref, res_new))
        kwargs: dict[str, Any] = {"validate_fn": validate, "rtol": None, "atol": None}
    else:
        kwargs = {"rtol": rtol, "atol": atol}
    log_path = out.with_suffix(".log")
    error = None
    t0 = time.perf_counter()
    with open(log_path, "w", encoding="utf-8", buffering=1) as log, contextlib.redirect_stdout(log):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the converter warns for every clamped initializer, every attempt
            try:
                amp.auto_convert_mixed_precision(proto, samples[0], keep_io_types=True, **kwargs)
            except Exception as exc:  # report, never crash: the parent puts it in the table
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:2000] if str(exc) else ''}"
    wall = time.perf_counter() - t0
    res = parse_autoconvert_log(log_path.read_text(encoding="utf-8"))
    op_blocked = sorted(n.name for n in proto.graph.node if n.op_type in float16.DEFAULT_OP_BLOCK_LIST)
    res.update({
        "ok": error is None, "error": error, "wall_s": wall, "convert_s": state["convert_s"], "ort_s": state["ort_s"],
        "converts": state["converts"], "ort_full_runs": state["full_runs"],
        "validation_runs": max(state["full_runs"] - 1, 0),  # the first full run is its FP32 reference
        "block_list": sorted(state["block"]) if res["done"] and state["block"] is not None else None,
        "last_block_list": sorted(state["block"]) if state["block"] is not None else None,
        "op_blocked": op_blocked, "feed": feed, "check": check, "version": occ_version,
    })
    out.write_text(json.dumps(res), encoding="utf-8")


def parse_autoconvert_log(text: str) -> dict:
    """Attempts and outcomes from auto_convert's prints (survives a kill: the log is line-buffered)."""
    return {
        "attempts": len(re.findall(r"^Running attempt \d+", text, re.M)),
        "succeeded": text.count("Attempt succeeded."),
        "done": "\nDone:" in "\n" + text,
        "final_validated": "Final model validated successfully." in text,
    }


def clamp_counts(proto: Any) -> dict:
    """How many FP32 values in initializers and Constant nodes float16.convert clamps when it converts them
    (|x| > 1e4 to 1e4, 0 < |x| < 1e-7 to 1e-7)."""
    from onnx import TensorProto, numpy_helper

    tensors = list(proto.graph.initializer)
    tensors += [a.t for n in proto.graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"]
    high = low = 0
    for t in tensors:
        if t.data_type != TensorProto.FLOAT:
            continue
        a = np.abs(numpy_helper.to_array(t))
        high += int(np.count_nonzero(np.isfinite(a) & (a > 1e4)))
        low += int(np.count_nonzero((a > 0) & (a < 1e-7)))
    return {"above_1e4": high, "below_1e-7": low}


# -- child: the same execution as auto_convert, for given sets ---------------------------------------


def child_ortfp16(wd: Path, out: Path, sets_file: Path) -> None:
    """Each named set through onnxconverter-common's float16 conversion (node_block_list, keep_io_types) on
    ORT CPU, as auto_convert runs an attempt: allclose on the first sample, elemwise on every sample."""
    import copy

    import onnx
    import onnxruntime as ort
    from onnxconverter_common import auto_mixed_precision as amp
    from onnxconverter_common import float16

    spec = json.loads((wd / "work.json").read_text(encoding="utf-8"))
    atol, rtol = spec["atol"], spec["rtol"]
    samples = read_samples(wd)
    sets = json.loads(sets_file.read_text(encoding="utf-8"))
    import io
    import warnings

    warnings.simplefilter("ignore")
    with contextlib.redirect_stdout(io.StringIO()):
        model0 = onnx.shape_inference.infer_shapes(onnx.load(str(wd / "model.onnx")))
        model0 = amp.add_missing_dtypes_using_ort(model0, samples[0])
    ref_sess = ort.InferenceSession(model0.SerializeToString(), providers=["CPUExecutionProvider"])
    refs = [ref_sess.run(None, s) for s in samples]
    res = {}
    for label, names in sets.items():
        t0 = time.perf_counter()
        try:
            m = float16.convert_float_to_float16(copy.deepcopy(model0), node_block_list=names, keep_io_types=True,
                                                 disable_shape_infer=False)
            sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            outs = [sess.run(None, s) for s in samples]
            allclose0 = all(np.allclose(a, b, rtol, atol) for a, b in zip(refs[0], outs[0]))
            checks = [elemwise_ok(b, a, atol, rtol) for r, o in zip(refs, outs) for a, b in zip(r, o)]
            res[label] = {"allclose_sample0": allclose0, "elemwise_all": all(c[0] for c in checks),
                          "max_abs": float(np.max([c[1] for c in checks])) if checks else 0.0, "s": time.perf_counter() - t0}
        except Exception as exc:
            res[label] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
    out.write_text(json.dumps(res), encoding="utf-8")


# -- child: ModelOpt AutoCast's classifier (runs in its own venv) ------------------------------------


def child_modelopt(wd: Path, out: Path, model_path: Path | None = None) -> None:
    """ModelOpt AutoCast with its defaults, calibrated on our samples; record which nodes it keeps in FP32."""
    import logging

    t_imp = time.perf_counter()
    import modelopt
    from modelopt.onnx.autocast import convert as mconv
    from modelopt.onnx.autocast.nodeclassifier import NodeClassifier
    from modelopt.onnx.autocast.precisionconverter import PrecisionConverter

    import_s = time.perf_counter() - t_imp
    rec: dict[str, Any] = {}
    orig_run = NodeClassifier.run
    orig_filter = PrecisionConverter._filter_unsupported_op_types

    def run(self: Any, ref_outputs_dict: Any = None) -> tuple[list, list]:
        low, high = orig_run(self, ref_outputs_dict)
        rec["classifier_high"] = list(high)
        rec["classifier_settings"] = {"data_max": self.data_max, "init_max": float(self.init_max),
                                      "max_depth_of_reduction": self.max_depth_of_reduction}
        rec["classified_nodes"] = len(low) + len(high)
        return low, high

    def filt(self: Any, high: list, low: list) -> tuple[list, list]:
        high, low = orig_filter(self, high, low)
        rec["high"] = list(high)
        return high, low

    NodeClassifier.run = run
    PrecisionConverter._filter_unsupported_op_types = filt
    reasons: dict[str, str] = {}

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            m = re.match(r"Skipping node (.+?): (.*)", record.getMessage())
            if m:
                text = m.group(2)
                reasons[m.group(1)] = ("IO range" if "reference IO out of range" in text else
                                       "initializer range" if "initializer" in text else
                                       "reduction depth" if "depth of reduction" in text else text[:60])

    for name in ("modelopt", "modelopt.onnx", ""):
        lg = logging.getLogger(name)
        lg.addHandler(Grab())
    error = None
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            converted = mconv.convert_to_mixed_precision(
                onnx_path=str(model_path or wd / "model.onnx"), low_precision_type="fp16", keep_io_types=True,
                calibration_data=str(wd / "samples"), providers=["cpu"],
            )
        if converted is not None:  # its own Casts: those in its model beyond the input model's
            import onnx

            before = sum(n.op_type == "Cast" for n in onnx.load(str(model_path or wd / "model.onnx")).graph.node)
            rec["casts"] = sum(n.op_type == "Cast" for n in converted.graph.node) - before
    except Exception as exc:
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:2000] if str(exc) else ''}"
    wall = time.perf_counter() - t0
    high = rec.get("high", rec.get("classifier_high"))
    out.write_text(json.dumps({
        "ok": error is None and high is not None, "error": error, "wall_s": wall, "import_s": import_s,
        "high": high, "classifier_high": rec.get("classifier_high"), "classified_nodes": rec.get("classified_nodes"),
        "settings": rec.get("classifier_settings"), "reasons": reasons, "version": modelopt.__version__,
        "casts": rec.get("casts"),
        "conversion_failed_after_classification": error is not None and "classifier_high" in rec,
        "model_file": "ours" if model_path is None else str(model_path),
    }), encoding="utf-8")


# -- parent: subprocesses with a cap -----------------------------------------------------------------


def run_child(python: Path, args: list[str], out: Path, timeout: float) -> dict:
    """Run this script in `python` as a child; its JSON result, or why there is none."""
    cmd = [str(python), str(Path(__file__).resolve()), *args, "--child-out", str(out)]
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        res: dict[str, Any] = {"ok": False, "error": f"timeout after {timeout:g} s", "timed_out": True,
                               "wall_s": time.perf_counter() - t0}
        log = out.with_suffix(".log")
        if log.exists():  # auto_convert's prints up to the kill
            res.update(parse_autoconvert_log(log.read_text(encoding="utf-8", errors="replace")))
        return res
    if out.exists():
        res = json.loads(out.read_text(encoding="utf-8"))
        res["process_s"] = time.perf_counter() - t0
        return res
    tail = (p.stderr or p.stdout or "").strip().splitlines()[-3:]
    return {"ok": False, "error": f"child exited {p.returncode}: {' | '.join(tail)[:400]}", "wall_s": time.perf_counter() - t0}


def modelopt_status(python: Path) -> tuple[bool, str]:
    """Whether the ModelOpt venv can import its AutoCast module, and its version or the reason."""
    if not python.exists():
        return False, f"no ModelOpt venv at {python} (see the module docstring of bench/peers.py)"
    p = subprocess.run([str(python), "-c", "import modelopt, modelopt.onnx.autocast.convert as c; print(modelopt.__version__)"],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return False, "import failed: " + " | ".join((p.stderr or "").strip().splitlines()[-2:])
    return True, p.stdout.strip()


# -- parent: judging a set with our oracle -----------------------------------------------------------


def judge(bench: Any, names: list[str] | None) -> dict:
    """A peer's FP32 set under our emulated oracle: on every search sample and on the first sample alone."""
    from precision_doctor.search import Oracle

    if names is None:
        return {}
    cand = {n.name for n in bench.model.candidates}
    known = {n.name for n in bench.model.nodes}
    fb = frozenset(n for n in names if n in cand)
    v = bench.oracle().evaluate(fb)
    v0 = Oracle(bench.backend, bench.samples[:1], bench.refs[:1], bench.tol).evaluate(fb)
    worst, max_abs = v.worst
    removable = None
    if v.passed and len(fb) <= MINIMAL_UP_TO:  # one evaluation per member, on a separate oracle (not counted)
        removable = bench.one_minimal(fb)[1]
    return {
        "size": len(fb), "listed": len(names), "not_candidates": sorted(set(names) & known - cand),
        "unknown": sorted(set(names) - known), "fallback": sorted(fb), "flop_share": bench.flop_share(fb),
        "passes": v.passed, "passes_sample0": v0.passed, "failed_sample": v.failed_sample,
        "worst_output": worst, "max_abs": max_abs,
        "mismatches": sum(c.mismatches for c in v.outputs.values()),
        "one_minimal": None if removable is None else not removable, "removable": removable,
    }


def bench_model(name: str, bench: Any, proto: Any, tol: Any, expected: set | None, args: argparse.Namespace,
                work_root: Path, mo_ok: bool, orig_path: Path | None = None) -> dict:
    """Every tool on one model, side by side."""
    wd = work_root / re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    write_work(wd, proto, bench.samples, tol.atol, tol.rtol)
    res: dict[str, Any] = {"case": name, "candidates": len(bench.model.candidates), "nodes": len(bench.model.nodes),
                           "samples": len(bench.samples), "atol": tol.atol, "rtol": tol.rtol,
                           "expected": sorted(expected) if expected is not None else None,
                           "capture_s": bench.capture_s, "setup_s": bench.setup_s, "load": {"start": _load()}}
    res["all_fp16"] = judge(bench, [])
    res["clamped"] = clamp_counts(proto)
    for strat in ("auto", "segment"):
        r = bench.run(strat, time_s=args.timeout)
        r.pop("trajectory", None)
        r["total_s"] = r["wall_s"] + (bench.capture_s if strat == "auto" else 0.0) + bench.setup_s
        r["judged"] = judge(bench, r["found"])
        res[f"pd_{strat}"] = r
        _say(name, f"pd {strat}", f"evals {r['evaluations']} size {r['size']} total {r['total_s']:.1f} s")
    for variant in args.ac_variants:
        feed, check = ("first", "allclose") if variant == "shipped" else ("all", "elemwise")
        shipped = res.get("ac_shipped") or {}
        if variant == "matched" and shipped.get("timed_out") and not shipped.get("succeeded"):
            # no attempt passed the looser check on one sample before the cap: the stricter one on every sample
            # would walk the same failing attempts, so it would only spend another cap
            res["ac_matched"] = {"ok": False, "skipped": True, "judged": {},
                                 "error": "skipped: the shipped variant hit the cap with no passing attempt"}
            continue
        r = run_child(Path(sys.executable), ["--child", "autoconvert", "--work", str(wd), "--feed", feed, "--check", check],
                      wd / f"ac_{variant}.json", args.timeout)
        names = None
        if r.get("block_list") is not None:
            names = sorted(set(r["block_list"]) | set(r.get("op_blocked", [])))
        r["judged"] = judge(bench, names)
        res[f"ac_{variant}"] = r
        _say(name, f"auto_convert {variant}", f"attempts {r.get('attempts')} "
             + (f"size {r['judged']['size']} passes {r['judged']['passes']}" if names is not None else str(r.get("error")))
             + f" {r.get('wall_s', 0):.1f} s")
    if mo_ok:
        r = run_child(args.modelopt_python, ["--child", "modelopt", "--work", str(wd)], wd / "modelopt.json", args.timeout)
        if r.get("high") is None and orig_path is not None:  # it failed on our proto: try the file as shipped
            first = r
            r = run_child(args.modelopt_python, ["--child", "modelopt", "--work", str(wd), "--model", str(orig_path)],
                          wd / "modelopt_orig.json", args.timeout)
            r["on_our_proto"] = {k: first.get(k) for k in ("error", "wall_s")}
        r["judged"] = judge(bench, r.get("high"))
        res["modelopt"] = r
        _say(name, "modelopt", (f"size {r['judged']['size']} passes {r['judged']['passes']}" if r.get("high") is not None
                                else str(r.get("error"))) + f" {r.get('wall_s', 0):.1f} s")
    # every set under auto_convert's own execution (float16.convert + ORT CPU)
    sets = {"none (all FP16)": [], ALL_BLOCKED: [n.name for n in bench.model.nodes if n.op_type not in ("If", "Loop", "Scan")]}
    for key in TOOL_KEYS:
        j = res.get(key, {}).get("judged") or {}
        if "fallback" in j:
            listed = res[key].get("found") or []
            if key.startswith("ac_"):
                listed = sorted(set(res[key]["block_list"]) | set(res[key].get("op_blocked", [])))
            elif key == "modelopt":
                listed = res[key]["high"]
            sets[key] = listed
    (wd / "sets.json").write_text(json.dumps(sets), encoding="utf-8")
    res["ortfp16"] = run_child(Path(sys.executable), ["--child", "ortfp16", "--work", str(wd), "--sets", str(wd / "sets.json")],
                               wd / "ortfp16.json", args.timeout)
    res["load"]["end"] = _load()
    return res


ALL_BLOCKED = "every node blocked"
TOOL_KEYS = ["pd_auto", "pd_segment", "ac_shipped", "ac_matched", "modelopt"]
TOOL_NAMES = {
    "pd_auto": "precision-doctor auto", "pd_segment": "precision-doctor segment",
    "ac_shipped": "auto_convert shipped", "ac_matched": "auto_convert matched", "modelopt": "ModelOpt AutoCast",
}


def _git(*args: str) -> str:
    """A read-only git query in the repository (empty when git is unavailable)."""
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, check=False).stdout.strip()
    except OSError:
        return ""


def _say(case: str, tool: str, text: str) -> None:
    print(f"  {case:24s} {tool:26s} {text}", file=sys.stderr, flush=True)


def _load() -> list[float]:
    from _common import loadavg

    return loadavg()


# -- workloads -------------------------------------------------------------------------------------


def planted_workloads(n: int, only: set[str] | None, objective: str = "nodes") -> list[tuple]:
    """(name, SearchBench maker, proto, tolerance, expected, original file) for each planted case."""
    from _search import SearchBench

    from precision_doctor import planted
    from precision_doctor.graph.model import from_proto
    from precision_doctor.measure.tolerance import Tolerance

    out = []
    for name, make in planted.CASES.items():
        if only and name not in only:
            continue
        case = make()
        model = from_proto(case.model)
        tol = Tolerance(case.atol, case.rtol)
        out.append((name, lambda m=model, c=case, t=tol: SearchBench(m, c.samples(n, 0), t, objective=objective), model.proto,
                    tol, case.expected, None))
    return out


def zoo_workloads(zoo_dir: Path, only: set[str] | None, objective: str = "nodes") -> list[tuple]:
    """The zoo's models with their recipes' samples and tolerances (as bench/search_efficiency.py --zoo)."""
    from _search import SearchBench
    from _zoo import zoo_works

    return [(w.name, lambda w=w: SearchBench(w.model, w.samples, w.tol, objective=objective), w.model.proto, w.tol, None,
             w.path) for w in zoo_works(zoo_dir, only)]


# -- tables ----------------------------------------------------------------------------------------


def _pct(v: float | None) -> str:
    if v is None:
        return "-"
    return "<0.01" if 0 < v < 1e-4 else f"{100 * v:.2f}"


def _short(err: str | None, n: int = 220) -> str:
    """An error for a table cell: C++ signatures dropped, cut to `n` characters."""
    if not err:
        return ""
    err = re.sub(r"\((?:const )?onnxruntime::[^()]*(?:\([^()]*\)[^()]*)*\)", "(...)", err)
    err = re.sub(r"/onnxruntime_src/\S+ ", "", err)
    return err if len(err) <= n else err[: n - 3] + "..."


def _ort_cell(r: dict | None) -> str:
    """An ORT-CPU FP16 verdict for a table cell."""
    if not r:
        return "-"
    return f"error: {_short(r['error'], 100)}" if "error" in r else _yn(r.get("elemwise_all"))


def _yn(v: Any) -> str:
    return "-" if v is None else ("yes" if v else "**no**")


def tool_row(c: dict, key: str) -> list | None:
    """One table row: model, tool, attempts/evaluations, wall s, set size, FP32 FLOP %, passes (ours), note."""
    r = c.get(key)
    if r is None:
        return None
    j = r.get("judged") or {}
    ort = (c.get("ortfp16") or {}).get(key) or {}
    if key.startswith("pd_"):
        tries = f"{r['evaluations']}" + ("+ (capped)" if r.get("capped") else "")
        wall = r["total_s"]
        note = f"capture+analysis {c['capture_s']:.2f} s, search {r['wall_s']:.2f} s" if key == "pd_auto" else \
            f"search {r['wall_s']:.2f} s"
    elif key.startswith("ac_"):
        tries = "-" if r.get("attempts") is None else f"{r['attempts']}" + ("" if r.get("done") else "+")
        wall = r.get("wall_s")
        bits = []
        if r.get("error"):
            bits.append(_short(r["error"]) + ("; the set shown is its last block list, not an answer" if j else ""))
        if r.get("block_list") is None and r.get("last_block_list") is not None and not r.get("timed_out"):
            bits.append("no final set")
        if j.get("listed") is not None and j["listed"] != j.get("size"):
            bits.append(f"{j['listed']} listed")
        note = "; ".join(bits)
    else:
        tries = "1 calibration run" if r.get("high") is not None else "-"
        wall = r.get("wall_s")
        bits = []
        if r.get("model_file", "ours") != "ours":
            bits.append(f"run on the shipped file (on our proto: {_short((r.get('on_our_proto') or {}).get('error'))})")
        if r.get("conversion_failed_after_classification"):
            bits.append(f"the classifier's set; its conversion then failed: {_short(r.get('error'))}")
        elif r.get("error"):
            bits.append(_short(r["error"]))
        if j.get("listed") is not None and j["listed"] != j.get("size"):
            bits.append(f"{j['listed']} listed")
        if j.get("unknown"):
            bits.append(f"{len(j['unknown'])} names not in our model")
        why = Counter((r.get("reasons") or {}).values())
        moved = len(set(r.get("high") or []) - set(r.get("classifier_high") or []))
        if moved:
            why["op unsupported in low precision (its op filter)"] = moved
        if why:
            bits.append("kept for: " + ", ".join(f"{k} {v}" for k, v in why.most_common()))
        note = "; ".join(bits)
    size = j.get("size")
    ort_txt = "-" if not ort else ("error" if "error" in ort else _yn(ort.get("elemwise_all")))
    if r.get("skipped"):
        return [c["case"], TOOL_NAMES[key], "-", "-", "-", "-", "-", "-", "-", "-", r.get("error", "skipped")]
    minimal = "-" if j.get("one_minimal") is None else ("yes" if j["one_minimal"] else f"no ({len(j['removable'])} removable)")
    return [c["case"], TOOL_NAMES[key], tries, wall, size if size is not None else "-", _pct(j.get("flop_share")),
            _yn(j.get("passes")), _yn(j.get("passes_sample0")), minimal, ort_txt, note.replace("|", "/")]


def results_tables(cases: list[dict]) -> dict[str, str]:
    from _common import table

    headers = ["model", "tool", "attempts / evaluations", "wall s", "FP32 set", "FP32 FLOP %",
               "passes (ours, all samples)", "passes (ours, sample 0)", f"1-minimal (ours, sets <= {MINIMAL_UP_TO})",
               "passes ORT-CPU FP16 (all samples)", "note"]
    rows = [row for c in cases for k in TOOL_KEYS if (row := tool_row(c, k)) is not None]
    summary_rows = []
    for k in TOOL_KEYS:
        present = [c for c in cases if c.get(k) is not None and not c[k].get("skipped")]
        if not present:
            continue
        # auto_convert returns nothing when it raises (e.g. "validation failed for final fp16 model"): its last
        # block list is still judged in the per-model table, but it is not an answer
        got = [c for c in present if (c[k].get("judged") or {}).get("size") is not None
               and (c[k].get("ok") or not k.startswith("ac_"))]
        passed = sum(1 for c in got if c[k]["judged"]["passes"])
        sizes = sum(c[k]["judged"]["size"] for c in got)
        wall = sum((c[k].get("total_s") if k.startswith("pd_") else c[k].get("wall_s")) or 0.0 for c in present)
        tries = sum((c[k].get("evaluations") if k.startswith("pd_") else c[k].get("attempts")) or 0 for c in present)
        summary_rows.append([TOOL_NAMES[k], f"{len(got)}/{len(present)}", f"{passed}/{len(got)}", sizes,
                             tries if k != "modelopt" else "-", wall])
    summary = table(["tool", "returned an answer", "answer passes our oracle", "sum of set sizes", "attempts / evaluations",
                     "wall s (sum)"], summary_rows)
    return {"per_model": table(headers, rows), "summary": summary}


def compact_table(cases: list[dict]) -> str:
    """One row per model: each tool's attempts/evaluations, set size and verdict under our oracle."""
    from _common import table

    keys = [k for k in TOOL_KEYS if any(c.get(k) for c in cases)]
    rows = []
    for c in cases:
        row = [c["case"]]
        for k in keys:
            r = c.get(k) or {}
            j = r.get("judged") or {}
            n = r.get("evaluations") if k.startswith("pd_") else r.get("attempts")
            if r.get("skipped") or not r:
                row.append("-")
            elif k.startswith("ac_") and not r.get("ok"):
                row.append(f"{n}{'+' if r.get('timed_out') else ''} / none ({'timeout' if r.get('timed_out') else 'raised'})")
            elif j.get("size") is None:
                row.append("none (failed)")
            else:
                row.append(f"{'' if n is None else str(n) + ' / '}{j['size']} / {'pass' if j['passes'] else '**FAIL**'}")
        rows.append(row)
    return table(["model"] + [TOOL_NAMES[k] + (" (evals / set / ours)" if k.startswith("pd_") else
                                               " (attempts / set / ours)" if k.startswith("ac_") else " (set / ours)")
                              for k in keys], rows)


def facts_table(cases: list[dict]) -> str:
    """Per model: size, samples, tolerance, whether all-FP16 passes in each execution, what the converter clamps."""
    from _common import table

    rows = []
    for c in cases:
        ort = (c.get("ortfp16") or {}).get("none (all FP16)") or {}
        clamp = c.get("clamped")
        rows.append([c["case"], c["nodes"], c["candidates"], c["samples"], f"{c['atol']:g} / {c['rtol']:g}",
                     _yn((c.get("all_fp16") or {}).get("passes")),
                     _ort_cell(ort), "-" if not ort or "error" in ort else _yn(ort.get("allclose_sample0")),
                     _ort_cell((c.get("ortfp16") or {}).get(ALL_BLOCKED)),
                     "-" if clamp is None else f"{clamp['above_1e4']} / {clamp['below_1e-7']}"])
    return table(["model", "nodes", "candidates (ours)", "samples", "atol / rtol", "all-FP16 passes (ours)",
                  "all-FP16 passes ORT-CPU FP16 (elemwise, all samples)", "(allclose, sample 0)",
                  "every node blocked passes ORT-CPU FP16 (elemwise, all samples)",
                  "FP32 constants the converter clamps (>1e4 / <1e-7)"], rows)


def render(payload: dict) -> str:
    """The tables of a run, as markdown."""
    cases = payload["cases"]
    planted_cases = [c for c in cases if not c["case"].startswith("zoo:")]
    zoo_cases = [c for c in cases if c["case"].startswith("zoo:")]
    la = payload["loadavg"]
    start = payload.get("commit_start")
    moved = f" (HEAD moved during the run, from {start})" if start and start != payload["machine"].get("git_commit") else ""
    parts = [f"Run: {payload['machine']['date']}, commit {payload['machine'].get('git_commit')}{moved}"
             + (f" (uncommitted in precision_doctor/: {payload['package_status']})" if payload.get("package_dirty") else "")
             + f", loadavg (1, 5, 15 min) at start {la[0]}, at end {la[1]}, whole run {payload['wall_s']:.0f} s.", ""]
    for title, sub in (("Planted suite", planted_cases), ("Zoo", zoo_cases)):
        if not sub:
            continue
        t = results_tables(sub)
        parts += [f"### {title}", "", facts_table(sub), "", compact_table(sub), "", t["per_model"], "", t["summary"], ""]
    if payload.get("modelopt_status"):
        parts.append(f"ModelOpt: {payload['modelopt_status']}")
    return "\n".join(parts) + "\n"


# -- main ------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="planted only (unless --zoo), 2 samples, shipped variant, 120 s caps")
    ap.add_argument("--samples", type=int, default=None, help="search samples per planted case (default 4, --quick 2)")
    ap.add_argument("--zoo", type=Path, default=None,
                    help="fetched zoo folder (default bench/out/zoo; with --quick, no zoo unless given)")
    ap.add_argument("--no-zoo", action="store_true", help="planted suite only")
    ap.add_argument("--only", default="", help="comma-separated case names (planted names or zoo:NAME)")
    ap.add_argument("--timeout", type=float, default=None, help="cap per tool and model, s (default 600, --quick 120)")
    ap.add_argument("--no-modelopt", action="store_true", help="skip ModelOpt AutoCast")
    ap.add_argument("--modelopt-python", type=Path, default=MODELOPT_PY, help="python of the ModelOpt venv")
    ap.add_argument("--ac-variants", default=None, help="auto_convert variants: shipped,matched (--quick: shipped)")
    ap.add_argument("--render", type=Path, default=None, help="print the tables of a saved JSON result and exit")
    ap.add_argument("--name", default=None, help="results name under bench/out/ (default peers, peers_quick)")
    ap.add_argument("--objective", default="nodes", choices=["nodes", "flops", "deploy"],
                    help="precision-doctor's search objective (search.cost) in its rows")
    # child modes (internal)
    ap.add_argument("--child", choices=["autoconvert", "ortfp16", "modelopt"], help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--feed", default="first", help=argparse.SUPPRESS)
    ap.add_argument("--check", default="allclose", help=argparse.SUPPRESS)
    ap.add_argument("--sets", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--model", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child == "autoconvert":
        return child_autoconvert(args.work, args.child_out, args.feed, args.check)
    if args.child == "ortfp16":
        return child_ortfp16(args.work, args.child_out, args.sets)
    if args.child == "modelopt":
        return child_modelopt(args.work, args.child_out, args.model)
    if args.render is not None:
        print(render(json.loads(args.render.read_text(encoding="utf-8"))))
        return None
    run_all(args)
    return None


def run_all(args: argparse.Namespace) -> None:
    """The benchmark: every model, every tool, then the tables and the JSON."""
    from _common import write_results

    n = args.samples or (2 if args.quick else 4)
    args.timeout = args.timeout or (120.0 if args.quick else 600.0)
    args.ac_variants = (args.ac_variants or ("shipped" if args.quick else "shipped,matched")).split(",")
    only = {s for s in args.only.split(",") if s} or None
    mo_ok, mo_status = (False, "skipped (--no-modelopt)") if args.no_modelopt else modelopt_status(args.modelopt_python)
    mo_status = (f"nvidia-modelopt {mo_status}" if mo_ok else mo_status)
    print(f"ModelOpt: {mo_status}", file=sys.stderr)
    t_all = time.perf_counter()
    load_start = _load()
    commit_start = _git("rev-parse", "--short", "HEAD")
    work = planted_workloads(n, only, args.objective)
    zoo = args.zoo or (None if args.quick else HERE / "out" / "zoo")
    if zoo is not None and not args.no_zoo:
        work += zoo_workloads(zoo, only, args.objective)
    cases = []
    work_root = Path(tempfile.mkdtemp(prefix="pd-peers-"))
    try:
        for name, make_bench, proto, tol, expected, orig in work:
            bench = make_bench()
            try:
                cases.append(bench_model(name, bench, proto, tol, expected, args, work_root, mo_ok, orig))
            finally:
                bench.close()
    finally:
        shutil.rmtree(work_root, ignore_errors=True)
    dirty = _git("status", "--porcelain", "--", "precision_doctor")
    payload = {"quick": args.quick, "samples_planted": n, "objective": args.objective, "timeout_s": args.timeout,
               "ac_variants": args.ac_variants,
               "modelopt_status": mo_status, "package_dirty": bool(dirty), "package_status": dirty,
               "commit_start": commit_start,
               "cases": cases, "wall_s": time.perf_counter() - t_all, "loadavg": [load_start, _load()]}
    path = write_results(args.name or ("peers" + ("_quick" if args.quick else "")), payload)
    payload = json.loads(path.read_text(encoding="utf-8"))
    text = render(payload)
    path.with_suffix(".md").write_text(text, encoding="utf-8")
    print("\n" + text)
    print(f"results: {path} and {path.with_suffix('.md')}")


if __name__ == "__main__":
    main()
