"""Answers priced as the deployment pays for them (issue 23): precision-doctor's answer against ModelOpt
AutoCast's and onnxconverter-common's auto_mixed_precision, side by side in one run on the planted suite and
the zoo: FP32 FLOP share, Casts, nodes in FP32, evaluations, and whether each set holds on unseen samples.

CPU part (here; the peers as bench/peers.py drives them, ModelOpt in bench/out/modelopt-venv):

    .venv/bin/python bench/price.py --zoo zoo            # planted suite + zoo/
    .venv/bin/python bench/price.py --no-zoo             # planted suite only
    .venv/bin/python bench/price.py --render bench/out/price.json   # the tables of a saved run

writes bench/out/price.json and .md, and bench/price_sets.json: every tool's FP32 set per model, which the
GPU part reads (commit it with the results).

Fusion groups against what the TensorRT-RTX builder here fuses (kernels read from its verbose layer list):

    .venv/bin/python bench/price.py --fusions --zoo zoo

GPU part (an H100 with onnxruntime-gpu; one call, about 3 minutes, 2 files to OUT):

    PYTHONPATH=/tmp/site:. python3 bench/price.py --gpu --zoo zoo --out $OUT

For each model and each tool's set: fixed.onnx built by precision-doctor (Casts at island borders only, for
every tool's set alike: the sets are compared, not the tools' own converters), checked on the unseen samples on
ORT CUDA against the FP32 reference (ORT CPU), and timed with I/O binding at batch 1 and batch 16 with the FP32
and all-FP16 models: latency kept = (t_fp32 - t_fixed) / (t_fp32 - t_fp16). `--device cpu` runs the same code
on ORT's CPU provider (plumbing; bench/self_check.py price).

Precision-doctor runs as a user runs it (api.diagnose, the default settings: the deploy objective, 3 perturbed
copies, margin 0.1; the zoo recipes' budgets), once more with `--cost nodes` (the old default) for comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SETS = HERE / "price_sets.json"
UNSEEN = 6  # unseen samples per model that every set is checked on
UNSEEN_SEED = 99  # planted cases: the seed of the unseen samples (the search's are seed 0)
TOOLS = {
    "pd": "precision-doctor (deploy, the default)",
    "pd_nodes": "precision-doctor --cost nodes",
    "autocast": "ModelOpt AutoCast",
    "converter": "onnxconverter-common auto_mixed_precision",
}
PEERS = ("autocast", "converter")


@dataclass
class Work:
    """One model: its name, file, loaded model, search samples, unseen samples, tolerance and the RunSpec a user
    would give (zoo: the recipe's; planted: the samples as files, written by `pd_spec`)."""

    name: str
    path: Path
    model: object
    samples: list
    unseen: list | None
    tol: object
    spec: object | None = None


def planted_works(only: set[str] | None = None, n: int = 4) -> list[Work]:
    import onnx

    from precision_doctor import planted
    from precision_doctor.graph.model import from_proto
    from precision_doctor.measure.tolerance import Tolerance

    out = []
    tmp = Path(tempfile.mkdtemp(prefix="pd-price-models-"))
    for name, make in planted.CASES.items():
        if only and name not in only:
            continue
        case = make()
        path = tmp / f"{name}.onnx"
        onnx.save(case.model, path)
        out.append(Work(name, path, from_proto(case.model), case.samples(n, 0), case.samples(UNSEEN, UNSEEN_SEED),
                        Tolerance(case.atol, case.rtol)))
    return out


def zoo_works(zoo_dir: Path, only: set[str] | None = None) -> list[Work]:
    from _zoo import unseen_samples

    from precision_doctor.batch.recipes import discover
    from precision_doctor.data.inputs import InputValues
    from precision_doctor.data.workload import load_workload
    from precision_doctor.spec import RunSpec

    out = []
    for ms in discover(zoo_dir, RunSpec(model="")):
        name = f"zoo:{ms.name}"
        if (only and name not in only) or ms.error:
            continue
        work = load_workload(ms.spec.model, ms.spec.inputs, InputValues.parse(ms.spec.inputs))
        out.append(Work(name, ms.path, work.model, work.samples, unseen_samples(ms.name, ms.spec, work.model, UNSEEN),
                        ms.spec.tolerance, ms.spec))
    return out


def works(zoo: Path | None, only: set[str] | None) -> list[Work]:
    planted_only = {o for o in only or () if not o.startswith("zoo:")} or None
    out = planted_works(planted_only) if not only or planted_only else []
    if zoo is not None:
        out += zoo_works(zoo, only)
    return out


# -- CPU part ---------------------------------------------------------------------------------------------


def pd_spec(work: Work, cost: str, tmp: Path):
    """The RunSpec a user gives: the recipe's (zoo), or the samples as .npz files and the tolerance (planted)."""
    from precision_doctor.spec import InputSpec, RunSpec

    if work.spec is not None:
        return work.spec.with_settings({"search.cost": cost})
    files = []
    for i, s in enumerate(work.samples):
        f = tmp / f"{work.name}_{i}.npz"
        np.savez(f, **s)
        files.append(str(f))
    spec = RunSpec(str(work.path), inputs=InputSpec(files=tuple(files)), tolerance=work.tol)
    return spec.with_settings({"search.cost": cost})


def run_pd(work: Work, cost: str, root: Path) -> dict:
    from precision_doctor import api

    out = root / f"{work.name.replace(':', '_')}_{cost}"
    t0 = time.perf_counter()
    report = api.diagnose(pd_spec(work, cost, root), out)
    return {"fallback": list(report.answer.fallback_nodes) if report.answer.fallback_nodes or report.passed else None,
            "passed": report.passed, "evaluations": report.search.evaluations, "wall_s": time.perf_counter() - t0,
            "run_dir": str(out), "status": report.status,
            "tradeoff": None if report.pricing is None or report.pricing.tradeoff is None else [
                [p.multiplier, p.fallback_size, p.fp32_flop_share, p.complete] for p in report.pricing.tradeoff.points]}


def run_peers(work: Work, root: Path, timeout: float, modelopt: bool) -> dict:
    import peers

    wd = root / f"{work.name.replace(':', '_')}_peers"
    peers.write_work(wd, work.model.proto, work.samples, work.tol.atol, work.tol.rtol)
    out = {}
    r = peers.run_child(Path(sys.executable), ["--child", "autoconvert", "--work", str(wd), "--feed", "first", "--check",
                                               "allclose"], wd / "ac.json", timeout)
    names = sorted(set(r["block_list"]) | set(r.get("op_blocked", []))) if r.get("block_list") is not None else None
    out["converter"] = {"fallback": names, "evaluations": r.get("attempts"), "wall_s": r.get("wall_s"),
                        "error": None if names is not None else r.get("error"), "casts": _converter_casts(work, names)}
    if modelopt:
        r = peers.run_child(peers.MODELOPT_PY, ["--child", "modelopt", "--work", str(wd)], wd / "mo.json", timeout)
        out["autocast"] = {"fallback": r.get("high"), "evaluations": 0, "wall_s": r.get("wall_s"), "casts": r.get("casts"),
                           "error": None if r.get("high") is not None else r.get("error"), "version": r.get("version")}
    return out


def _converter_casts(work: Work, names: list[str] | None) -> int | None:
    """The Casts onnxconverter-common's float16 conversion puts in for that block list (each blocked node wrapped)."""
    if names is None:
        return None
    import warnings

    from onnxconverter_common import float16

    proto = copy.deepcopy(work.model.proto)
    before = sum(n.op_type == "Cast" for n in proto.graph.node)
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
        warnings.simplefilter("ignore")
        converted = float16.convert_float_to_float16(proto, keep_io_types=True, node_block_list=names)
    return sum(n.op_type == "Cast" for n in converted.graph.node) - before


def judge(work: Work, backend, refs: list[dict], fallback: list[str] | None) -> dict:
    """A set on the unseen samples, one by one (emulated FP16, the default rules): how many pass, the worst share."""
    from precision_doctor.measure.tolerance import check_all

    if fallback is None or work.unseen is None:
        return {}
    cand = {n.name for n in work.model.candidates}
    fb = frozenset(n for n in fallback if n in cand)
    runner = backend.prepare(fb)
    passed, worst = 0, 0.0
    for sample, ref in zip(work.unseen, refs):
        checks = check_all(runner.run(sample, list(ref)), ref, work.tol)
        passed += all(c.passed for c in checks.values())
        worst = max([worst] + [c.tol_used for c in checks.values() if c.tol_used == c.tol_used])
    return {"holds": passed == len(work.unseen), "passed_unseen": passed, "unseen": len(work.unseen), "worst_share": worst}


def price_model(work: Work, root: Path, args: argparse.Namespace, modelopt: bool) -> dict:
    from precision_doctor.backends.emulate import EmulateBackend
    from precision_doctor.backends.reference import ReferenceRunner
    from precision_doctor.data.activations import captured_shapes
    from precision_doctor.graph.cost import cost_model

    res: dict = {"case": work.name, "candidates": len(work.model.candidates), "tools": {}}
    runs = {"pd": run_pd(work, "deploy", root), "pd_nodes": run_pd(work, "nodes", root)}
    print(f"  {work.name}: pd {len(runs['pd']['fallback'] or [])} nodes, nodes-mode "
          f"{len(runs['pd_nodes']['fallback'] or [])}", file=sys.stderr, flush=True)
    runs.update(run_peers(work, root, args.timeout, modelopt))
    shapes = {k: np.shape(v) for k, v in work.samples[0].items()}
    cm = cost_model(work.model, "fp16", shapes, captured_shapes(Path(runs["pd"]["run_dir"]) / "activations.h5"))
    backend = EmulateBackend(work.model)
    ref = ReferenceRunner(work.model)
    refs = [ref.run(s) for s in work.unseen] if work.unseen is not None else []
    cand = {n.name for n in work.model.candidates}
    for tool, r in runs.items():
        fb = r.get("fallback")
        row = dict(r)
        if fb is not None:
            s = frozenset(n for n in fb if n in cand)
            c = cm.answer_cost(s)
            row.update({"size": len(s), "fp32_flop_share": c.fp32_flop_share, "casts_borders": c.casts,
                        "casts_added": c.casts_added, "deploy_us": c.deploy_us,
                        "estimated_speedup_kept": c.estimated_speedup_kept, **judge(work, backend, refs, fb)})
        res["tools"][tool] = row
    backend.close()
    res["shapes_from"] = cm.shapes_from
    return res


def targets(case: dict) -> dict:
    """The issue's target on one model: precision-doctor's FP32 FLOP share no more than the smallest holding peer's
    (`verdict`: "met", "missed", "no peer holds", or "it does not hold" where its own answer fails an unseen sample)."""
    tools = case["tools"]
    pd = tools["pd"]
    holding = [tools[p]["fp32_flop_share"] for p in PEERS if tools.get(p, {}).get("holds")]
    smallest = min(holding) if holding else None
    if not pd.get("holds"):
        return {"verdict": "it does not hold", "smallest_peer": smallest}
    if smallest is None:
        return {"verdict": "no peer holds", "smallest_peer": None}
    return {"verdict": "met" if pd["fp32_flop_share"] <= smallest + 1e-12 else "missed", "smallest_peer": smallest}


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.2f}"


def render(payload: dict) -> str:
    from _common import table

    rows = []
    for c in payload["cases"]:
        t = targets(c)
        for tool, label in TOOLS.items():
            r = c["tools"].get(tool)
            if r is None:
                continue
            if r.get("fallback") is None:
                rows.append([c["case"], label, "-", "-", "-", "-", r.get("evaluations"), "-", str(r.get("error"))[:80]])
                continue
            held = f"{r['passed_unseen']}/{r['unseen']}" if "unseen" in r else "-"
            own = r.get("casts") if tool in PEERS else r["casts_borders"]
            note = ""
            if tool == "pd":
                note = f"target: {t['verdict']}" + (f" (smallest holding peer {_pct(t['smallest_peer'])}%)"
                                                    if t["verdict"] == "missed" else "")
            rows.append([c["case"], label, r["size"], _pct(r["fp32_flop_share"]), r["casts_borders"], own,
                         r.get("evaluations"), held, note])
    summary = table(["model", "tool", "nodes in FP32", "FP32 FLOP %", "Casts (borders only)", "Casts (the tool's model)",
                     "evaluations", "holds on unseen", "note"], rows)
    verdicts = [targets(c)["verdict"] for c in payload["cases"]]
    counts = ", ".join(f"{k} on {verdicts.count(k)}" for k in ("met", "missed", "no peer holds", "it does not hold"))
    lines = [f"Run: {payload['machine']['date']}, commit {payload['machine'].get('git_commit')}, loadavg {payload['loadavg']}, "
             f"{payload['wall_s']:.0f} s. ModelOpt: {payload['modelopt']}.", "",
             f"Target (precision-doctor's FP32 FLOP share <= the smallest holding peer's), of {len(verdicts)} models: "
             f"{counts}.", "", summary, ""]
    trows = [[c["case"], ", ".join(f"{m:g}x: {n} nodes {_pct(s)}%{'' if done else ' (at most)'}" for m, n, s, done
                                    in (c["tools"]["pd"].get("tradeoff") or []) if n is not None)]
             for c in payload["cases"]]
    lines += ["Trade-off of the default answer (report.json's pricing.tradeoff):", "", table(["model", "points"], trows), ""]
    return "\n".join(lines)


def cpu_main(args: argparse.Namespace) -> None:
    import peers
    from _common import loadavg, write_results

    only = {s for s in args.only.split(",") if s} or None
    mo_ok, mo_status = (False, "skipped") if args.no_modelopt else peers.modelopt_status(peers.MODELOPT_PY)
    t0 = time.perf_counter()
    load = loadavg()
    cases = []
    with tempfile.TemporaryDirectory(prefix="pd-price-") as tmp:
        for work in works(None if args.no_zoo else args.zoo, only):
            print(f"{work.name} ...", file=sys.stderr, flush=True)
            cases.append(price_model(work, Path(tmp), args, mo_ok))
    payload = {"cases": cases, "modelopt": mo_status if mo_ok else f"not run ({mo_status})",
               "wall_s": time.perf_counter() - t0, "loadavg": [load, loadavg()], "unseen": UNSEEN}
    path = write_results(args.name, payload)
    text = render(json.loads(path.read_text()))
    path.with_suffix(".md").write_text(text)
    sets = {"unseen": UNSEEN, "unseen_seed_planted": UNSEEN_SEED, "models": {
        c["case"]: {t: r["fallback"] for t, r in c["tools"].items() if r.get("fallback") is not None} for c in cases}}
    SETS.write_text(json.dumps(sets, indent=1, sort_keys=True) + "\n")
    print(text)
    print(f"results: {path}, {path.with_suffix('.md')}, {SETS}")


# -- what TensorRT-RTX fuses --------------------------------------------------------------------------------


def fusion_check(work: Work, tmp: Path) -> dict:
    """Our fusion groups against the kernels TensorRT-RTX builds (ahead of time, on this CPU): for the all-FP16
    fixed.onnx, how many groups run in one kernel; then with the last member of every other group in FP32 (a split),
    how many kernels the engine has and how many of the split groups still run in one."""
    import onnx

    from precision_doctor.backends.tensorrt.kernels import engine_kernels
    from precision_doctor.graph.groups import fusion_groups
    from precision_doctor.graph.mixed import build_mixed

    model = work.model
    groups = fusion_groups(model)
    shapes = {k: list(np.shape(v)) for k, v in work.samples[0].items()}
    split = groups[::2]
    out: dict = {"case": work.name, "groups": len(groups), "kinds": {}}
    for label, fb in (("all_fp16", frozenset()), ("split", frozenset(g.members[-1] for g in split))):
        path = tmp / f"{work.name.replace(':', '_')}_{label}.onnx"
        onnx.save(build_mixed(model, fb), path)
        try:
            kernels = engine_kernels(path, shapes)
        except Exception as exc:
            out[label] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            continue
        whole = [g for g in groups if any(set(g.members) <= set(k.nodes) for k in kernels)]
        out[label] = {"kernels": len(kernels), "groups_in_one_kernel": len(whole),
                      "split_groups_in_one_kernel": sum(g in whole for g in split) if label == "split" else None}
        if label == "all_fp16":
            for g in groups:
                k = out["kinds"].setdefault(g.kind, [0, 0])
                k[0] += 1
                k[1] += g in whole
    return out


def fusions_main(args: argparse.Namespace) -> None:
    from _common import table, write_results

    rows, cases = [], []
    with tempfile.TemporaryDirectory(prefix="pd-price-trt-") as tmp:
        for work in works(None if args.no_zoo else args.zoo, {s for s in args.only.split(",") if s} or None):
            c = fusion_check(work, Path(tmp))
            cases.append(c)
            a, b = c.get("all_fp16", {}), c.get("split", {})
            kinds = ", ".join(f"{k} {w}/{n}" for k, (n, w) in sorted(c["kinds"].items()))
            rows.append([c["case"], c["groups"], a.get("kernels", a.get("error")), a.get("groups_in_one_kernel"), kinds,
                         b.get("kernels", b.get("error")), b.get("split_groups_in_one_kernel"), (c["groups"] + 1) // 2])
    text = table(["model", "fusion groups", "kernels (all FP16)", "groups in one kernel", "by kind (in one / all)",
                  "kernels (every other group split)", "split groups still in one kernel", "groups split"], rows)
    path = write_results(args.name + "_fusions", {"cases": cases})
    path.with_suffix(".md").write_text(text + "\n")
    print(text)


# -- GPU part ---------------------------------------------------------------------------------------------


def gpu_rows(work: Work, sets: dict[str, list[str]], device: str, batches: tuple[int, ...], runs: int) -> dict:
    """Each set's fixed.onnx on `device`: holds on the unseen samples against the FP32 reference (ORT CPU), and
    latency at each batch with the FP32 and all-FP16 models."""
    from precision_doctor.backends.reference import ReferenceRunner
    from precision_doctor.graph.mixed import build_mixed
    from precision_doctor.graph.ort_session import make_session
    from precision_doctor.measure.latency import batched, time_model
    from precision_doctor.measure.tolerance import check_all

    provider = {"cuda": "CUDAExecutionProvider", "cpu": "CPUExecutionProvider"}[device]
    model = work.model
    ref = ReferenceRunner(model)
    unseen = work.unseen or []
    refs = [ref.run(s) for s in unseen]
    cand = {n.name for n in model.candidates}
    out: dict = {"case": work.name, "tools": {}, "batches": {}}
    fixed = {tool: build_mixed(model, frozenset(n for n in fb if n in cand)) for tool, fb in sets.items()}
    for tool, proto in fixed.items():
        sess = make_session(proto, providers=[provider])
        names = [o.name for o in sess.get_outputs()]
        passed, worst = 0, 0.0
        for sample, r in zip(unseen, refs):
            feeds = {i.name: sample[i.name] for i in sess.get_inputs()}
            got = dict(zip(names, sess.run(names, feeds)))
            checks = check_all({k: np.asarray(v, dtype=np.float32) for k, v in got.items()}, r, work.tol)
            passed += all(c.passed for c in checks.values())
            worst = max([worst] + [c.tol_used for c in checks.values() if c.tol_used == c.tol_used])
        out["tools"][tool] = {"size": len(sets[tool]), "passed_unseen": passed, "unseen": len(unseen),
                              "holds": passed == len(unseen), "worst_share": worst}
    lowp = build_mixed(model, frozenset())
    def med(proto, feeds) -> float:
        return float(np.median(time_model(proto, feeds, device, warmup=5, runs=runs))) * 1e3

    for b in batches:
        feeds = batched(model, work.samples[0], b)
        t32, t16 = med(model.proto, feeds), med(lowp, feeds)
        row = {"fp32_ms": t32, "fp16_ms": t16, "fp16_speedup": t32 / t16 if t16 > 0 else None, "tools": {}}
        for tool, proto in fixed.items():
            tf = med(proto, feeds)
            row["tools"][tool] = {"fixed_ms": tf, "latency_kept": (t32 - tf) / (t32 - t16) if t32 > t16 else None}
        out["batches"][str(b)] = row
    return out


def render_gpu(payload: dict) -> str:
    from _common import table

    rows = []
    for c in payload["models"]:
        for tool, label in TOOLS.items():
            h = c["tools"].get(tool)
            if h is None:
                continue
            cells = [c["case"], label, h["size"], f"{h['passed_unseen']}/{h['unseen']}", f"{h['worst_share']:.2f}"]
            for b in payload["batches"]:
                row = c["batches"].get(str(b))
                if row is None:
                    cells += ["-", "-"]
                    continue
                t = row["tools"][tool]
                cells += [f"{row['fp32_ms']:.3f} / {row['fp16_ms']:.3f} / {t['fixed_ms']:.3f}",
                          "-" if t["latency_kept"] is None else f"{t['latency_kept']:.2f}"]
            rows.append(cells)
    heads = ["model", "tool", "nodes in FP32", f"holds on unseen ({payload['device']})", "worst share"]
    for b in payload["batches"]:
        heads += [f"batch {b}: FP32 / FP16 / fixed ms", f"batch {b}: latency kept"]
    return (f"Device: {payload['device_name']} ({payload['device']}), ORT {payload['ort']}, {payload['wall_s']:.0f} s, "
            f"{payload['runs']} timed runs each (median).\n\n" + table(heads, rows) + "\n")


def gpu_main(args: argparse.Namespace) -> None:
    import onnxruntime as ort

    from precision_doctor.backends.registry import cuda_machine

    if args.device == "cuda" and not cuda_machine():
        sys.exit("bench/price.py --gpu: ONNX Runtime has no CUDA GPU here (install onnxruntime-gpu; or --device cpu)")
    t0 = time.perf_counter()
    data = json.loads(Path(args.sets).read_text())
    only = {s for s in args.only.split(",") if s} or None
    batches = tuple(int(b) for b in args.batches.split(","))
    wanted = {k: v for k, v in data["models"].items() if not only or k in only}
    found = works(args.zoo, set(wanted)) if wanted else []
    models = []
    for work in found:
        if time.perf_counter() - t0 > args.budget_s:
            print(f"{work.name}: skipped, the time budget ({args.budget_s:g} s) is spent", file=sys.stderr)
            continue
        sets = {t: fb for t, fb in wanted[work.name].items() if t in TOOLS}
        bs = batches if work.name.startswith("zoo:") or args.device == "cpu" else ()
        models.append(gpu_rows(work, sets, args.device, bs, args.runs))
        print(f"{work.name}: done at {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    name = ort.get_device() if args.device == "cuda" else "cpu"
    if args.device == "cuda":
        with contextlib.suppress(Exception):
            import subprocess

            name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                  text=True, timeout=20).stdout.strip() or name
    payload = {"device": args.device, "device_name": name, "ort": ort.__version__, "batches": list(batches),
               "runs": args.runs, "models": models, "wall_s": time.perf_counter() - t0}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "price_gpu.json").write_text(json.dumps(payload, indent=1) + "\n")
    text = render_gpu(payload)
    (out / "price_gpu.md").write_text(text)
    print(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, default=None, help="the fetched zoo (precision-doctor zoo fetch --dest DIR)")
    ap.add_argument("--no-zoo", action="store_true", help="planted suite only")
    ap.add_argument("--only", default="", help="comma-separated model names (planted names or zoo:NAME)")
    ap.add_argument("--timeout", type=float, default=600.0, help="cap per peer and model, s")
    ap.add_argument("--no-modelopt", action="store_true", help="leave ModelOpt AutoCast out")
    ap.add_argument("--name", default="price", help="results name under bench/out/")
    ap.add_argument("--gpu", action="store_true", help="the GPU part: holds and latency of every tool's set")
    ap.add_argument("--fusions", action="store_true", help="our fusion groups against TensorRT-RTX's kernels (CPU)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="--gpu: where (cpu: plumbing only)")
    ap.add_argument("--sets", default=str(SETS), help="--gpu: the sets the CPU part chose")
    ap.add_argument("--batches", default="1,16", help="--gpu: batches timed")
    ap.add_argument("--runs", type=int, default=30, help="--gpu: timed runs per model and batch")
    ap.add_argument("--budget-s", type=float, default=200.0, help="--gpu: start no model after this many seconds")
    ap.add_argument("--out", default=str(HERE / "out"), help="--gpu: where price_gpu.json and .md go")
    ap.add_argument("--render", type=Path, default=None, help="print the tables of a saved price.json and exit")
    args = ap.parse_args()
    if args.render is not None:
        print(render(json.loads(args.render.read_text())))
        return
    (gpu_main if args.gpu else fusions_main if args.fusions else cpu_main)(args)


if __name__ == "__main__":
    main()
