"""Every op a real model brings, on a GPU: each node alone in FP16 on ONNX Runtime's CUDA provider against
the emulation rules, and whole models all-FP16 per sample (issue 21).

    PYTHONPATH=/tmp/site:. timeout -s INT 280 python3 bench/gpu_opprobe.py --probes probe --planted --out $OUT
    .venv/bin/python bench/gpu_opprobe.py --probes probe --cpu --out DIR        # plumbing check, CPU only

Inputs: the probe models of `bench/probe_models.py` (`--probes DIR`: trained models with real samples,
subgraphs cut from trained models fed the exact FP32 tensors real samples make there, synthetic ops fed
real activations), optionally the planted suite (`--planted`) and the fetched zoo (`--zoo DIR`).

Per model (`gpu_nodewise.measure_model`): every low-precision-able node alone on the exact FP32 reference
inputs, computed by the provider's own FP16 kernels (`graph.native.native_local_graph`) and by the emulator
under the standard rule, every node rule and the profiles (standard, ort-cuda-nodes, ort-cuda); per node and per
op type (or fused pattern) the ratio of the provider's error to each rule's (`--metric`, default the largest
relative error; every metric is in the JSON) and the share of elements a rule reproduces bit for bit; which
kernels the provider ran for each node (a function op ORT expanded into its body shows as its body's
kernels). Then the whole graph all-FP16 per sample: on the provider at ORT_ENABLE_ALL (what a user runs)
and at ORT_DISABLE_ALL (no fusions), on ONNX Runtime's CPU provider running the same converted FP16 graph
(ALL and DISABLE), and on the emulator under each profile: the share of the tolerance used where the probe
has one (the whole models), else the largest relative error of the outputs; and the op types of ORT's
optimized all-FP16 graph on each provider (which fusions it made).

Writes to --out (3 files): opprobe.json (everything; rewritten after each model; on SIGINT the model in
progress is dropped and the rest is written), opprobe.md (the tables), fixture.npz (a few nodes of every op
type with their exact inputs and the provider's FP16 outputs, `precision_doctor/measure/node_fixture.py`'s format, so the
rules can be replayed offline: `check_rules(path, FP16, rule)`). Imports no polygraphy.
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from _common import fmt as _fmt
from _common import loadavg
from gpu_nodewise import measure_model, providers_for
from probe_models import load_probes

from precision_doctor import planted
from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.formats import FP16
from precision_doctor.graph.mixed import build_mixed
from precision_doctor.graph.model import Model, from_proto
from precision_doctor.graph.rules import PROFILES, RULES, resolve_rules
from precision_doctor.measure.fidelity import STANDARD, by_op, error_stats
from precision_doctor.measure.node_fixture import write_fixture
from precision_doctor.measure.tolerance import Tolerance, check_all

NODE_LABELS = [STANDARD, *RULES, "ort-cuda-nodes", "ort-cuda"]
PATTERNS = "ort-cuda"  # the fusions whose sites run on the provider as real FP16 patterns
PROFILES_RUN = [STANDARD, "ort-cuda"]  # the whole-graph profiles
LEVELS = {"all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL, "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}
WITHIN = 0.10  # emulator and provider agree on a sample when their shares differ by at most 10%


def _session(proto: onnx.ModelProto, providers: list, level: str, save: Path | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[level]
    so.log_severity_level = 3
    if save is not None:
        so.optimized_model_filepath = str(save)
    return ort.InferenceSession(proto.SerializeToString(), so, providers=providers)


def _run(sess: ort.InferenceSession, sample: dict, names: list[str]) -> dict:
    want = {i.name: i.type for i in sess.get_inputs()}
    feed = {k: v.astype(np.float16) if want.get(k) == "tensor(float16)" else v for k, v in sample.items() if k in want}
    return {n: np.asarray(a, np.float32) if a.dtype.kind == "f" else a for n, a in zip(names, sess.run(names, feed))}


def _score(out: dict, ref: dict, tol: Tolerance | None) -> dict:
    """The share of the tolerance used (with a tolerance) and the largest relative error of the float outputs."""
    rel = max((error_stats(out[k], ref[k], FP16, "max_rel")["max_rel"] for k in ref if ref[k].dtype.kind == "f"), default=0.0)
    score = {"max_rel": rel}
    if tol is not None:
        score["tol_used"] = max(c.tol_used for c in check_all(out, ref, tol).values())
    return score


def optimized_ops(proto: onnx.ModelProto, providers: list) -> dict:
    """Op type counts of ORT's optimized graph at ORT_ENABLE_ALL (`domain:op` for other domains); where ORT
    cannot write it, {"error": why}."""
    try:
        with tempfile.TemporaryDirectory(prefix="pd-opt-") as tmp:
            path = Path(tmp) / "opt.onnx"
            _session(proto, providers, "all", path)
            g = onnx.load(str(path), load_external_data=False).graph
    except Exception as exc:  # noqa: BLE001 (the measurement goes on without it)
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return dict(collections.Counter(f"{n.domain}:{n.op_type}" if n.domain else n.op_type for n in g.node).most_common())


def whole_graph(model: Model, samples: list, tol: Tolerance | None, providers: list, profiles: list[str]) -> dict:
    """Per sample: the all-FP16 graph on the provider (ALL, DISABLE), on ORT's CPU provider (ALL, DISABLE) and
    on the emulator per profile (`_score` against the FP32 reference); and ORT's optimized op types."""
    outs = list(model.outputs)
    refs = [ReferenceRunner(model, outs).run(s) for s in samples]
    proto = build_mixed(model, frozenset(), "fp16")
    runs: dict[str, list] = {}
    real = {"provider_all": (providers, "all"), "provider_disable": (providers, "disable"),
            "cpu_all": (["CPUExecutionProvider"], "all"), "cpu_disable": (["CPUExecutionProvider"], "disable")}
    for key, (prov, level) in real.items():
        sess = _session(proto, prov, level)
        runs[key] = [_score(_run(sess, s, outs), r, tol) for s, r in zip(samples, refs)]
    for p in profiles:
        with EmulateBackend(model, "fp16", rules=p) as be:
            runner = be.prepare(frozenset())
            runs[f"emulated {p}"] = [_score(runner.run(s, outs), r, tol) for s, r in zip(samples, refs)]
    key = "tol_used" if tol is not None else "max_rel"
    gpu = [r[key] for r in runs["provider_all"]]
    agree = {}
    for p in profiles:
        emu = [r[key] for r in runs[f"emulated {p}"]]
        ratios = [e / g if g > 0 else (1.0 if e == 0 else float("inf")) for e, g in zip(emu, gpu)]
        agree[p] = {"within_10pct": sum(abs(x - 1) <= WITHIN for x in ratios), "samples": len(ratios),
                    "ratio_min": min(ratios), "ratio_max": max(ratios),
                    "verdicts_agree": sum((e <= 1) == (g <= 1) for e, g in zip(emu, gpu)) if tol is not None else None}
    return {"metric": key, "runs": runs, "agreement": agree,
            "optimized": {"provider": optimized_ops(proto, providers), "cpu": optimized_ops(proto, ["CPUExecutionProvider"])}}


def todo_list(args) -> list[tuple[str, str, Model, list, Tolerance | None, dict]]:
    """(label, kind, model, samples, tolerance, about) of the probes, the planted suite and the zoo."""
    only = set(args.only.split(",")) if args.only else None
    out = []
    if args.probes:
        for p in load_probes(args.probes, only):
            tol = Tolerance(p.tolerance["atol"], p.tolerance["rtol"]) if p.tolerance else None
            out.append((p.name, p.kind, p.model, p.samples[: args.samples], tol, p.about))
    if args.planted:
        for name, make in planted.CASES.items():
            if only and f"planted:{name}" not in only:
                continue
            case = make()
            out.append((f"planted:{name}", "planted", from_proto(case.model), case.samples(args.planted_samples, seed=123),
                        Tolerance(case.atol, case.rtol), {}))
    if args.zoo:
        from _zoo import zoo_works

        for w in zoo_works(args.zoo, only):
            out.append((w.name, "zoo", w.model, w.samples[: args.samples], w.tol, {}))
    return out


def markdown(result: dict) -> str:
    rows = [r for m in result["models"] for r in m["nodes"]]
    pooled = by_op(rows, NODE_LABELS)
    lines = [f"# Op probe ({result['device']}; onnxruntime {result['onnxruntime']})", "",
             f"Node alone on the exact FP32 inputs: ratio = provider's error / the rule's ({result['metric']}; median / max "
             "over nodes), mismatch = ratio outside [0.9, 1.1], bit-exact = median share of elements the rule "
             "reproduces. Best = the rule with the fewest mismatches, then the highest bit-exact share.", "",
             "| op (or fused pattern) | nodes | models | standard | ort-cuda | best rule |", "|---|---|---|---|---|---|"]
    cell = lambda s: f"{_fmt(s['ratio_median'])} / {_fmt(s['ratio_max'])}, {s['mismatches']}, {_fmt(s['exact_median'])}"  # noqa: E731
    for op, e in pooled.items():
        models = sorted({r["model"] for r in rows if r.get("group", r["op_type"]) == op})
        cands = [(lab, e[lab]) for lab in NODE_LABELS if lab in e and e[lab]["applied"]]
        best = min(cands, key=lambda kv: (kv[1]["mismatches"], -kv[1]["exact_median"]), default=None)
        lines.append(f"| {op} | {e['nodes']} | {', '.join(models)[:80]} | {cell(e[STANDARD]) if STANDARD in e else '-'} | "
                     f"{cell(e['ort-cuda']) if 'ort-cuda' in e else '-'} | "
                     f"{best[0] + ': ' + cell(best[1]) if best else '-'} |")
    lines += ["", "## Whole graphs all-FP16, per sample", ""]
    for m in result["models"]:
        w = m.get("whole")
        if not w:
            continue
        key = w["metric"]
        lines.append(f"### {m['model']} ({key})")
        names = list(w["runs"])
        lines += ["", "| sample | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for j in range(len(w["runs"]["provider_all"])):
            lines.append(f"| {j} | " + " | ".join(_fmt(w["runs"][k][j][key]) for k in names) + " |")
        lines += ["", "emulator vs provider (ALL): " + "; ".join(
            f"{p}: {a['within_10pct']}/{a['samples']} within 10%, ratio {_fmt(a['ratio_min'])}-{_fmt(a['ratio_max'])}"
            + (f", verdicts agree {a['verdicts_agree']}/{a['samples']}" if a["verdicts_agree"] is not None else "")
            for p, a in w["agreement"].items()), "",
            "ORT's optimized FP16 graph, provider: " + ", ".join(f"{k} {v}" for k, v in w["optimized"]["provider"].items()),
            "", "ORT's optimized FP16 graph, CPU: " + ", ".join(f"{k} {v}" for k, v in w["optimized"]["cpu"].items()), ""]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probes", type=Path, help="folder made by bench/probe_models.py")
    ap.add_argument("--planted", action="store_true")
    ap.add_argument("--zoo", type=Path)
    ap.add_argument("--only", help="comma-separated probe names (planted:NAME, zoo:NAME)")
    ap.add_argument("--cpu", action="store_true", help="plumbing check: the CPU provider plays the GPU")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--samples", type=int, default=16, help="at most this many samples per model")
    ap.add_argument("--planted-samples", type=int, default=2)
    ap.add_argument("--deadline", type=float, default=220.0, help="seconds; models not started by then are skipped")
    ap.add_argument("--fixture-mb", type=float, default=4.0)
    ap.add_argument("--fixture-per-op", type=int, default=2)
    ap.add_argument("--group-mb", type=float, default=256.0)
    ap.add_argument("--metric", default="max_rel", choices=["max_rel", "max_abs", "max_ulp", "rel_l2"],
                    help="the error whose provider/rule ratio the tables show (every one is in opprobe.json)")
    args = ap.parse_args()
    for lab in NODE_LABELS:
        resolve_rules(lab)
    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    todo = todo_list(args)
    device = "CPU (plumbing check)" if args.cpu else _device()
    result = {"device": device, "onnxruntime": ort.__version__, "metric": args.metric, "labels": NODE_LABELS,
              "profiles": dict(PROFILES),
              "models": [], "skipped": [], "errors": []}
    entries: list = []
    for label, kind, model, samples, tol, about in todo:
        if time.perf_counter() - start > args.deadline:
            result["skipped"].append(label)
            continue
        t0 = time.perf_counter()
        try:  # one model's failure is recorded and the others go on
            providers = providers_for(model, args.cpu)
            kernels: list[dict] = []
            with tempfile.TemporaryDirectory(prefix="pd-opprobe-") as tmp:
                res, ents, obs = measure_model(label, model, samples, NODE_LABELS, [], providers,
                                               Path(tmp) / "store.h5", args.metric, args.group_mb, args.fixture_per_op,
                                               fixture_ops=None, kernels=kernels, pattern_rules=PATTERNS)
            res.update(kind=kind, about=about, kernels=kernels)
            result["models"].append(res)  # kept even if the whole-graph part fails
            entries += ents
            try:
                res["whole"] = whole_graph(obs, samples, tol, providers, PROFILES_RUN)
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                res["whole_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                print(f"{label}: whole graph FAILED {res['whole_error']}", flush=True)
            res["seconds"]["total"] = time.perf_counter() - t0
        except KeyboardInterrupt:  # `timeout -s INT` or Ctrl-C: what is measured so far is still written
            result["interrupted"] = label
            print(f"{label}: interrupted; writing what was measured", flush=True)
            break
        except Exception as exc:
            result["errors"].append({"model": label, "error": f"{type(exc).__name__}: {exc}",
                                     "traceback": traceback.format_exc(limit=8)})
            print(f"{label}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            continue
        result["seconds"] = time.perf_counter() - start
        result["loadavg"] = loadavg()
        (args.out / "opprobe.json").write_text(json.dumps(result, indent=1, default=str))
        print(f"{label}: {len(res['nodes'])} nodes in {res['seconds']['total']:.1f} s (total {result['seconds']:.0f} s)",
              flush=True)
    result["seconds"] = time.perf_counter() - start
    (args.out / "opprobe.json").write_text(json.dumps(result, indent=1, default=str))
    md = markdown(result)
    (args.out / "opprobe.md").write_text(md)
    kept, size = [], 0
    for e in entries:
        nbytes = sum(a.nbytes for a in e[1].values())
        if size + nbytes <= args.fixture_mb * (1 << 20):
            kept.append(e)
            size += nbytes
    if kept:
        write_fixture(args.out / "fixture.npz", kept)
    print(md)
    print(f"{len(kept)} fixture nodes ({size / 1e6:.1f} MB); {result['seconds']:.0f} s; skipped: "
          f"{', '.join(result['skipped']) or 'none'}; failed: {', '.join(e['model'] for e in result['errors']) or 'none'}")


def _device() -> str:
    try:
        import subprocess

        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20).stdout.strip()
        return out.splitlines()[0] if out else "GPU (nvidia-smi said nothing)"
    except (OSError, subprocess.SubprocessError):
        return "GPU (no nvidia-smi)"


if __name__ == "__main__":
    main()
