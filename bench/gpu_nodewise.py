"""Node by node: the emulation rules against a provider's real FP16 (ONNX Runtime CUDA), and the
gated native backend against the real mixed graph.

For each model (the zoo's recipes, the planted suite) on a few samples: the FP32 reference of every
tensor (CPU), each node's local output under each emulation rule (CPU), each node's real local
output on the provider (`graph.native`, each node alone on the exact FP32 inputs), and the whole
all-FP16 graph emulated and real. Per node and per op type: the provider's local error, each rule's,
their ratio and how many elements each rule reproduces bit for bit (`precision_doctor.measure.fidelity`).
Then per model, on every sample of the recipe and a few fallback sets (all-FP16, all-FP32, batch
answers, random sets): the share of the tolerance used on the provider's mixed graph, on the gated
native backend (`ort-cuda-gated`) and on the emulator per rules profile, and the time of one
evaluation of the gated backend against one new mixed-graph session per set.

    PYTHONPATH=/tmp/site:. timeout -s INT 560 python3 bench/gpu_nodewise.py --zoo zoo --planted --out $OUT  # GPU
    python bench/gpu_nodewise.py --zoo zoo --planted --cpu --out DIR      # plumbing check, CPU only

Fused patterns (graph/fusions.py: QuickGelu, Conv+BN folding, FusedMatMul, Gemm): each site of the
`ort-cuda` profile is also run alone on the provider as the real FP16 pattern with its graph
optimizations on (`capture_patterns`), and that output, the fused kernel's, replaces the anchor's
node-alone output in `gpu_local`; those rows are grouped under the fusion's name.

Writes to --out: nodewise.json (every node row, per-op tables, per-set checks and timings; rewritten
after each model; on SIGINT the model in progress is dropped and the rest is written),
nodewise.md (the tables), fixture.npz (a few Conv/ReduceMean/HardSigmoid/... nodes' and fused
patterns' exact inputs and the provider's FP16 outputs, for tests/graph/test_gpu_rules.py). Imports no
polygraphy. `measure_model` and `check_sets` are the library entry points. `--answers-json` takes
the answers of bench/gpu_pipeline.py's pipeline step ({model: {set name: [nodes]}}).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import traceback
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
from _common import fmt as _fmt
from _common import loadavg

from precision_doctor import control, planted
from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.ort import CUDA, OrtBackend
from precision_doctor.backends.ort_gated import OrtGatedBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.control import StopToken
from precision_doctor.data.activations import LOCAL, REFERENCE, ActivationStore
from precision_doctor.errors import UserError
from precision_doctor.graph.emulate import MASK_INPUT, gated_graph, local_graph
from precision_doctor.graph.formats import FP16
from precision_doctor.graph.fusions import Site, pattern_model
from precision_doctor.graph.mixed import build_mixed, forced_fp32
from precision_doctor.graph.model import Model, from_proto, tensor_types_and_shapes
from precision_doctor.graph.native import native_local_graph
from precision_doctor.graph.ort_session import make_session, with_outputs
from precision_doctor.graph.rules import PROFILES, RULES, resolve_rules
from precision_doctor.measure.capture import capture_run, group_by_bytes, tensor_bytes
from precision_doctor.measure.fidelity import (
    GPU_LOCAL,
    GPU_LOWP,
    STANDARD,
    as_f32,
    by_op,
    capture_local_with,
    effective,
    node_rows,
    run_name,
    with_observed_shapes,
)
from precision_doctor.measure.node_fixture import fixture_entries, pattern_entries, write_fixture
from precision_doctor.measure.tolerance import Tolerance, check_all, merge

DEFAULT_RULES = ",".join([STANDARD, *RULES, "ort-cuda-nodes", "ort-cuda"])
PATTERN_RULES = "ort-cuda"  # the fusions whose patterns are run on the provider
FIXTURE_OPS = ("Conv", "ConvTranspose", "ReduceMean", "GlobalAveragePool", "HardSigmoid", "LeakyRelu")


def capture_graph(
    store: ActivationStore,
    run: str,
    proto: onnx.ModelProto,
    names: Sequence[str],
    samples: Sequence[dict],
    budget: int,
    providers: Sequence = ("CPUExecutionProvider",),
    optimize: bool = False,
    stop: StopToken | None = None,
) -> float:
    """Tensors `names` of a whole graph (marked as outputs, in groups of at most `budget` bytes, one
    session each) into `run`, floating ones as float32. Inputs are cast to the graph's input types.
    Returns seconds."""
    t0 = time.perf_counter()
    types, shapes = tensor_types_and_shapes(onnx.shape_inference.infer_shapes(proto))
    sizer = SimpleNamespace(tensor_types=types, tensor_shapes=shapes)  # what _tensor_bytes reads of a Model
    names = [t for t in names if t in types]
    for group in group_by_bytes(names, lambda t: tensor_bytes(sizer, t), budget):
        sess = make_session(with_outputs(proto, group, types), providers, optimize=optimize)
        want = {i.name: i.type for i in sess.get_inputs()}
        for i, s in enumerate(samples):
            control.check(stop)
            feed = {k: v.astype(np.float16) if want.get(k) == "tensor(float16)" else v for k, v in s.items()}
            for name, value in zip(group, sess.run(group, feed)):
                store.write(run, name, i, len(samples), as_f32(value))
        del sess
    return time.perf_counter() - t0


def capture_patterns(
    store: ActivationStore,
    run: str,
    model: Model,
    sites: Sequence[Site],
    samples_n: int,
    providers: Sequence = ("CPUExecutionProvider",),
    precision: str = "fp16",
    stop: StopToken | None = None,
) -> float:
    """Each fusion site's anchor output as the provider computes the real low-precision pattern
    (`fusions.pattern_model` made mixed, all of it low precision, graph optimizations on: the provider
    fuses it as it would in the whole graph), fed the stored exact reference inputs, into `run` (it
    replaces the anchor's node-alone output there). Returns seconds."""
    t0 = time.perf_counter()
    for site in sites:
        pattern = from_proto(pattern_model(model, site))
        proto = build_mixed(pattern, frozenset(), precision)
        sess = make_session(proto, providers, optimize=True)
        ins = [i.name for i in sess.get_inputs()]
        y = proto.graph.output[0].name
        for i in range(samples_n):
            control.check(stop)
            feed = {t: store.read(REFERENCE, t, i) for t in ins}
            store.write(run, y, i, samples_n, as_f32(sess.run([y], feed)[0]))
        del sess
    return time.perf_counter() - t0


def providers_for(model: Model, cpu: bool) -> list:
    """The provider list of the 'real' side: ORT CUDA with TF32 off (as OrtBackend), or CPU."""
    if cpu:
        return ["CPUExecutionProvider"]
    if CUDA not in ort.get_available_providers():
        raise SystemExit("no CUDAExecutionProvider here: install onnxruntime-gpu on a GPU machine, or pass --cpu")
    return OrtBackend(model, "fp16", [CUDA, "CPUExecutionProvider"]).providers


def measure_model(
    label: str, model: Model, samples: list, labels: list[str], lowp_labels: list[str], providers: list,
    store_path: Path, metric: str = "max_abs", budget_mb: float = 256.0, fixture_per_op: int = 3,
    fixture_ops: Iterable[str] | None = FIXTURE_OPS, kernels: list[dict] | None = None, pattern_rules: str = PATTERN_RULES,
) -> tuple[dict, list, Model]:
    """Node rows, per-op table and timings of one model (see the module docstring), its fixture entries
    (nodes of `fixture_ops` and of op types with a standard-rule mismatch; None: every op type), and the
    model with the shapes the samples fix (rules that need static shapes apply there). Every run is
    captured into the activation store `store_path` (runs: precision_doctor.measure.fidelity); `kernels`
    receives the provider's kernels for the node-alone graphs (`capture_local_with`); the sites of the
    fusions in `pattern_rules` run on the provider as real FP16 patterns."""
    fmt, budget, n = FP16, int(budget_mb * (1 << 20)), len(samples)
    times: dict[str, float] = {}
    cands = model.candidates
    with ActivationStore(store_path, "w", compression=None) as store:
        store.set_attrs(precision=fmt.name, samples=n, model=label)
        t = time.perf_counter()
        for i, s in enumerate(samples):
            for k, v in s.items():
                store.write(REFERENCE, k, i, n, v)
        capture_run(store, REFERENCE, model.proto, model, [t for nd in model.nodes for t in nd.outputs if t], samples, {},
                    budget, None)
        times["reference"] = time.perf_counter() - t
        obs = with_observed_shapes(model, store)
        for lab in labels:
            rs = resolve_rules(lab)
            anchors = rs.sites(obs, fmt)
            nodes = cands if lab == STANDARD else [
                c for c in cands if rs.for_node(obs, obs.proto.graph.node[c.index], c) is not None or c.name in anchors]
            if nodes:
                times[f"local {lab}"] = capture_local_with(
                    store, run_name(LOCAL, lab), obs, lambda g, rs=rs: local_graph(obs, fmt, g, rs), nodes, n, budget)
        placement: dict[str, str] = {}
        times["gpu local"] = capture_local_with(store, GPU_LOCAL, obs, lambda g: native_local_graph(obs, fmt, g),
                                                cands, n, budget, providers, placement, kernels=kernels)
        sites = resolve_rules(pattern_rules).sites(obs, fmt)
        times["gpu patterns"] = capture_patterns(store, GPU_LOCAL, obs, list(sites.values()), n, providers)
        names = [t for nd in cands for t in nd.float_outputs]
        t = time.perf_counter()
        capture_graph(store, GPU_LOWP, build_mixed(model, frozenset(), "fp16"), names, samples, budget, providers,
                      optimize=True)
        times["gpu lowp"] = time.perf_counter() - t
        for lab in lowp_labels:
            t = time.perf_counter()
            g = gated_graph(obs, fmt, rules=lab)
            capture_run(store, run_name("lowp", lab), g.proto, model, names, samples, {MASK_INPUT: g.mask(frozenset())},
                        budget, None)
            times[f"lowp {lab}"] = time.perf_counter() - t
        t = time.perf_counter()
        rows = node_rows(store, obs, fmt, labels, metric, forced_fp32(model), placement, lowp_labels,
                         {a: site.fusion for a, site in sites.items()})
        times["analysis"] = time.perf_counter() - t
        for r in rows:
            r["model"] = label
        meta = {"provider_set": [p if isinstance(p, str) else p[0] for p in providers], "onnxruntime": ort.__version__}
        fused = set(sites)
        chosen = _fixture_nodes(obs, rows, fixture_per_op, fixture_ops)
        entries = fixture_entries(store, obs, [c for c in chosen if c.name not in fused],
                                  label, meta)
        entries += pattern_entries(store, obs, _fixture_sites(obs, sites, fixture_per_op), GPU_LOCAL, label, meta)
    return {"model": label, "samples": n, "nodes": rows, "by_op": by_op(rows, labels), "seconds": times}, entries, obs


def _fixture_nodes(model: Model, rows: list[dict], per_op: int, fixture_ops: Iterable[str] | None = FIXTURE_OPS) -> list:
    """Up to `per_op` nodes of each op type in `fixture_ops` (None: every op type measured) and of any op
    type with a standard-rule mismatch, the smallest first."""
    every = {r["op_type"] for r in rows}
    ops = (every if fixture_ops is None else set(fixture_ops)) | {r["op_type"] for r in rows if r["mismatch"].get(STANDARD)}
    measured = {r["node"] for r in rows if not r["forced_fp32"]}
    chosen = []
    for op in sorted(ops):
        nodes = [c for c in model.candidates if c.op_type == op and c.name in measured]
        size = {c.name: sum(int(np.prod(model.tensor_shapes.get(t) or (1 << 20))) for t in c.inputs if t) for c in nodes}
        chosen += sorted(nodes, key=lambda c: size[c.name])[:per_op]
    return chosen


def _fixture_sites(model: Model, sites: dict, per_fusion: int) -> list:
    """Up to `per_fusion` sites of each fusion, those reading the fewest input elements first."""
    chosen = []
    for fusion in sorted({s.fusion for s in sites.values()}):
        mine = [s for s in sites.values() if s.fusion == fusion]
        size = {s.anchor: sum(int(np.prod([d or 1 for d in model.tensor_shapes.get(t) or (1 << 20,)])) for t in s.reads)
                for s in mine}
        chosen += sorted(mine, key=lambda s: size[s.anchor])[:per_fusion]
    return chosen


def warm_gated(model: Model, sample: dict, providers: list) -> tuple[OrtGatedBackend, float, float]:
    """The gated native backend, its build time, and the time of its first runs (all-FP16 and all-FP32:
    they pick kernels and convolution algorithms)."""
    t = time.perf_counter()
    gated = OrtGatedBackend(model, "fp16", providers)
    build = time.perf_counter() - t
    t = time.perf_counter()
    for fb in (frozenset(), frozenset(gated.graph.candidates)):
        gated.prepare(fb).run(sample)
    return gated, build, time.perf_counter() - t


def check_sets(
    label: str, model: Model, samples: list, tol: Tolerance, sets: dict[str, frozenset[str]], providers: list,
    profiles: list[str],
) -> list[dict]:
    """Per fallback set on every sample: tolerance used on the real mixed graph (one new session per
    set), on the gated native backend (one session for all sets, built and warmed up once) and on the
    emulator per rules profile; the gated outputs against the mixed ones; the time of each evaluation
    (mixed: session and runs; gated: runs)."""
    refs = [ReferenceRunner(model).run(s) for s in samples]
    gated, build, warmup = warm_gated(model, samples[0], providers)
    mixed = OrtBackend(model, "fp16", providers, cache_size=1)
    emus = {p: EmulateBackend(model, "fp16", rules=p) for p in profiles}
    rows = []
    for k, (name, fb) in enumerate(sets.items()):
        t = time.perf_counter()
        runner = mixed.prepare(fb)
        m_out = [runner.run(s, list(r)) for s, r in zip(samples, refs)]
        t_mixed = time.perf_counter() - t
        t = time.perf_counter()
        g_runner = gated.prepare(fb)
        g_out = [g_runner.run(s, list(r)) for s, r in zip(samples, refs)]
        t_gated = time.perf_counter() - t
        row = {"model": label, "set": name, "fp32_nodes": len(fb), "samples": len(samples),
               "mixed": _used(m_out, refs, tol), "gated": _used(g_out, refs, tol),
               "gated_vs_mixed": _diff(g_out, m_out),
               "mixed_eval_s": t_mixed, "gated_eval_s": t_gated,
               "gated_build_s": build if k == 0 else None, "gated_warmup_s": warmup if k == 0 else None}
        row["emulated"] = {p: _used([e.prepare(fb).run(s, list(r)) for s, r in zip(samples, refs)], refs, tol)
                           for p, e in emus.items()}
        rows.append(row)
    return rows


def _used(outs: list[dict], refs: list[dict], tol: Tolerance) -> dict:
    per: dict[str, list] = {}
    for o, r in zip(outs, refs):
        for k, c in check_all(o, r, tol).items():
            per.setdefault(k, []).append(c)
    merged = [merge(v) for v in per.values()]
    return {"passed": all(c.passed for c in merged), "tol_used": max(c.tol_used for c in merged),
            "max_abs": max(c.max_abs for c in merged)}


def _diff(a: list[dict], b: list[dict]) -> dict:
    worst, same, total = 0.0, 0, 0
    for x, y in zip(a, b):
        for k in y:
            u, v = np.asarray(x[k], np.float64), np.asarray(y[k], np.float64)
            with np.errstate(invalid="ignore"):
                d = np.abs(u - v)
            worst = max(worst, float(np.nanmax(d)) if d.size else 0.0)
            same += int(np.count_nonzero((u == v) | (np.isnan(u) & np.isnan(v))))
            total += v.size
    return {"max_abs": worst, "exact": same / max(total, 1)}


def fallback_sets(model: Model, answers: dict[str, frozenset[str]], n_random: int, seed: int = 0) -> dict:
    cands = [c.name for c in model.candidates]
    sets = {"all-fp16": frozenset(), **answers}
    rng = np.random.default_rng(seed)
    for k in range(n_random):
        share = (k + 1) / (n_random + 2)
        sets[f"random {share:.0%}"] = frozenset(c for c in cands if rng.random() < share)
    sets["all-fp32"] = frozenset(cands)
    return sets


def works(args) -> list[tuple[str, Model, list, Tolerance, dict]]:
    """(label, model, samples, tolerance, answers) for the zoo's models, then the planted cases."""
    out = []
    only = set(args.only.split(",")) if args.only else None
    listed: dict[str, dict] = {}
    for path in getattr(args, "answers_json", []):
        for model, sets in json.loads(path.read_text()).items():
            listed.setdefault(model, {}).update({name: frozenset(nodes) for name, nodes in sets.items()})
    if args.zoo:
        from _zoo import batch_answer, zoo_works

        for w in zoo_works(args.zoo, only):
            answers = {f"answer {d.name}": a for d in args.answers if (a := batch_answer(d, w)) is not None}
            answers.update(listed.get(w.name, {}))
            out.append((w.name, w.model, w.samples, w.tol, answers))
    if args.planted:
        for name, make in planted.CASES.items():
            if only and name not in only and f"planted:{name}" not in only:
                continue
            case = make()
            out.append((f"planted:{name}", from_proto(case.model), case.samples(args.planted_samples, seed=123),
                        Tolerance(case.atol, case.rtol), {"certified": frozenset(case.expected)}))
    return out


def _cell(s: dict) -> str:
    return f"{_fmt(s['ratio_median'])} / {_fmt(s['ratio_max'])}, {s['mismatches']}, {_fmt(s['exact_median'])}"


def markdown(result: dict, labels: list[str], profiles: list[str]) -> str:
    rows = [r for m in result["models"] for r in m["nodes"]]
    pooled = by_op(rows, labels)
    lines = [f"# Node-wise fidelity ({result['device']}; onnxruntime {result['onnxruntime']}; metric {result['metric']})", "",
             "Ratio = provider's local error / the rule's (median, max over nodes); mismatch = ratio outside [0.9, 1.1]; "
             "bit-exact = share of a node's elements the rule reproduces exactly (median over nodes).", ""]
    lines.append("| op | rules | nodes | changed | ratio median | ratio max | mismatches | bit-exact median | bit-exact min |"
                 " max diff (ulp) |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for op, e in pooled.items():
        for lab in labels:
            s = e.get(lab)
            if s is None or (lab != STANDARD and s["applied"] == 0):
                continue
            lines.append(f"| {op} | {lab} | {e['nodes']} | {s['applied']} | {_fmt(s['ratio_median'])} | {_fmt(s['ratio_max'])} | "
                         f"{s['mismatches']} | {_fmt(s['exact_median'])} | {_fmt(s['exact_min'])} | {_fmt(s['max_ulp_diff'])} |")
    lines += ["", f"Per model: the standard rule against {', '.join(profiles[1:]) or 'no profile'} (ratio median / max, "
              "mismatches, bit-exact median):", "",
              "| model | op | nodes | " + " | ".join(profiles) + " |", "|---|---|---|" + "---|" * len(profiles)]
    for m in result["models"]:
        for op, e in by_op(m["nodes"], profiles).items():
            cells = [_cell(e[p]) if p in e else "-" for p in profiles]
            lines.append(f"| {m['model']} | {op} | {e['nodes']} | " + " | ".join(cells) + " |")
    worst = sorted((r for r in rows if not r["forced_fp32"] and any(r["mismatch"].values())),
                   key=lambda r: -abs(np.log(max(min(effective(r, profiles[-1], "ratio"), 1e30), 1e-30))))[:40]
    if worst:
        lines += ["", f"Nodes furthest from {profiles[-1]} (up to 40; provider = where ORT ran the node):", "",
                  f"| model | node | op | provider | provider error | standard error | ratio standard | ratio {profiles[-1]} | "
                  f"bit-exact standard | bit-exact {profiles[-1]} |", "|---|---|---|---|---|---|---|---|---|---|"]
        metric = result["metric"]
        for r in worst:
            lines.append(f"| {r['model']} | {r['node']} | {r['op_type']} | {r['provider'] or '?'} | {_fmt(r['gpu'][metric])} | "
                         f"{_fmt(r['emulated'][STANDARD][metric])} | {_fmt(r['ratio'][STANDARD])} | "
                         f"{_fmt(effective(r, profiles[-1], 'ratio'))} | {_fmt(r['agree'][STANDARD]['exact'])} | "
                         f"{_fmt(effective(r, profiles[-1], 'agree')['exact'])} |")
    checks = result.get("sets", [])
    if checks:
        lines += ["", "Share of the tolerance used on every sample (above 1 fails):", "",
                  "| model | set | FP32 nodes | mixed graph (provider) | gated native | " +
                  " | ".join(f"emulated {p}" for p in profiles) + " | gated vs mixed max abs | mixed eval s | gated eval s |",
                  "|---|---|---|---|---|" + "---|" * len(profiles) + "---|---|---|"]
        for r in checks:
            emu = " | ".join(_fmt(r["emulated"][p]["tol_used"]) for p in profiles)
            lines.append(f"| {r['model']} | {r['set']} | {r['fp32_nodes']} | {_fmt(r['mixed']['tol_used'])} | "
                         f"{_fmt(r['gated']['tol_used'])} | {emu} | {_fmt(r['gated_vs_mixed']['max_abs'])} | "
                         f"{_fmt(r['mixed_eval_s'])} | {_fmt(r['gated_eval_s'])} |")
    lines += ["", "Seconds per model: " + "; ".join(
        f"{m['model']} " + ", ".join(f"{k} {v:.1f}" for k, v in m["seconds"].items()) for m in result["models"])]
    return "\n".join(lines) + "\n"


def headline(result: dict, labels: list[str]) -> str:
    """A few lines for the end of the log: per op type, the standard rule and the rule that reproduces
    the provider best (highest median share of bit-exact elements)."""
    pooled = by_op([r for m in result["models"] for r in m["nodes"]], labels)
    lines = ["op: nodes | standard: ratio median/max, mismatches, bit-exact | best rule: the same"]
    for op, e in pooled.items():
        std = e.get(STANDARD)
        if std is None:
            continue
        tried = [lab for lab in labels if lab != STANDARD and lab in e and e[lab]["applied"]]
        best = max(tried, key=lambda lab: e[lab]["exact_median"], default=None)
        tail = f" | {best}: {_cell(e[best])}" if best else ""
        lines.append(f"{op}: {e['nodes']} | {_cell(std)}{tail}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, help="fetched zoo folder (each recipe's samples and tolerance)")
    ap.add_argument("--only", help="models to measure, comma-separated (zoo names, planted case names)")
    ap.add_argument("--planted", action="store_true", help="the planted suite too")
    ap.add_argument("--planted-samples", type=int, default=4)
    ap.add_argument("--rules", default=DEFAULT_RULES, help="emulation rules and profiles to measure, comma-separated")
    ap.add_argument("--lowp-rules", default="standard,ort-cuda-nodes,ort-cuda",
                    help="profiles for the whole all-FP16 graph and the set checks")
    ap.add_argument("--samples", type=int, default=2, help="samples per model for the node-wise part (the set checks use all)")
    ap.add_argument("--metric", default="max_abs", choices=["max_rel", "max_ulp", "max_abs", "rel_l2"])
    ap.add_argument("--answers", type=Path, action="append", default=[], help="a batch output folder (repeatable)")
    ap.add_argument("--answers-json", type=Path, action="append", default=[],
                    help="answers as JSON {model: {set name: [nodes]}} (bench/gpu_pipeline.py pipeline; repeatable)")
    ap.add_argument("--random-sets", type=int, default=2, help="random fallback sets per model in the set checks")
    ap.add_argument("--no-sets", action="store_true", help="skip the set checks and timings")
    ap.add_argument("--fixture-per-op", type=int, default=2)
    ap.add_argument("--fixture-mb", type=float, default=4.0, help="stop adding fixture nodes past this many MB of arrays")
    ap.add_argument("--group-mb", type=float, default=256.0)
    ap.add_argument("--deadline", type=float, default=360.0, help="seconds: past this no new model is started")
    ap.add_argument("--keep-stores", type=Path, help="keep each model's activation store (HDF5, large) in this folder")
    ap.add_argument("--cpu", action="store_true", help="the 'real' side on ORT's CPU provider (plumbing only)")
    ap.add_argument("--out", type=Path, default=Path("bench/out/gpu_nodewise"))
    args = ap.parse_args()
    if not args.zoo and not args.planted:
        ap.error("give --zoo DIR and/or --planted")
    labels = [x.strip() for x in args.rules.split(",") if x.strip()]
    profiles = [x.strip() for x in args.lowp_rules.split(",") if x.strip()]
    try:
        for lab in labels + profiles:
            resolve_rules(lab)  # a bad name stops here, before any work
    except UserError as exc:
        ap.error(str(exc))
    if STANDARD not in labels:
        labels.insert(0, STANDARD)
    start = time.perf_counter()
    todo = works(args)
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"device": "CPU (plumbing)" if args.cpu else "CUDA", "onnxruntime": ort.__version__, "metric": args.metric,
              "rules": {lab: list(resolve_rules(lab).names) for lab in labels}, "profiles": dict(PROFILES),
              "models": [], "sets": [], "skipped": []}
    entries: list = []
    result["errors"] = []
    for label, model, samples, tol, answers in todo:
        if time.perf_counter() - start > args.deadline:
            result["skipped"].append(label)
            continue
        providers = providers_for(model, args.cpu)
        try:  # one model's failure is recorded and the others go on (a GPU call is not repeated lightly)
            with tempfile.TemporaryDirectory(prefix="pd-nodewise-") as tmp:
                store = (args.keep_stores or Path(tmp)) / f"{label.replace(':', '_')}.h5"
                store.parent.mkdir(parents=True, exist_ok=True)
                res, ents, model = measure_model(label, model, samples[: args.samples], labels, profiles, providers,
                                                 store, args.metric, args.group_mb, args.fixture_per_op)
            result["models"].append(res)
            entries += ents
            if not args.no_sets:
                sets = fallback_sets(model, answers, args.random_sets)
                result["sets"] += check_sets(label, model, samples, tol, sets, providers, profiles)
        except KeyboardInterrupt:  # a `timeout -s INT` or Ctrl-C: what is measured so far is still written
            result["interrupted"] = label
            print(f"{label}: interrupted; writing what was measured", flush=True)
            break
        except Exception as exc:
            result["errors"].append({"model": label, "error": f"{type(exc).__name__}: {exc}",
                                     "traceback": traceback.format_exc(limit=8)})
            print(f"{label}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        result["seconds"] = time.perf_counter() - start
        result["loadavg"] = loadavg()
        (args.out / "nodewise.json").write_text(json.dumps(result, indent=1, default=str))
        print(f"{label}: {len(res['nodes'])} nodes in {sum(res['seconds'].values()):.1f} s "
              f"(total {result['seconds']:.0f} s)", flush=True)
    (args.out / "nodewise.json").write_text(json.dumps(result, indent=1, default=str))
    md = markdown(result, labels, profiles)
    (args.out / "nodewise.md").write_text(md)
    kept, size = [], 0
    for e in entries:
        nbytes = sum(a.nbytes for a in e[1].values())
        if size + nbytes <= args.fixture_mb * (1 << 20):
            kept.append(e)
            size += nbytes
    if kept:
        write_fixture(args.out / "fixture.npz", kept)
    print(md)
    print(headline(result, labels))
    print(f"{len(kept)} fixture nodes; {result['seconds']:.0f} s; skipped: {', '.join(result['skipped']) or 'none'}; "
          f"failed: {', '.join(e['model'] for e in result['errors']) or 'none'}")


if __name__ == "__main__":
    main()
