"""The default pipeline itself (api.diagnose: --augment 3 --margin 0.1, the probe and its one second search)
against the bare search (--augment 0 --margin 0), on the splits of bench/generalization.py: search on n of
the case's N samples (given as --inputs files with --validation-split 0, so every one searches), then check
the final answer on the N - n others with the emulator. Records the verdict too: the point of the probe is
that a PASS should hold, and an answer that will not hold should not be called PASS.

    .venv/bin/python bench/generalization_pipeline.py --only planted --splits 5
    .venv/bin/python bench/generalization_pipeline.py --zoo /work/main/zoo --only zoo:silero-vad-16k --splits 3
    .venv/bin/python bench/generalization_pipeline.py --render bench/out/generalization_pipeline.jsonl

On a GPU machine (onnxruntime-gpu), `--check-backend ort-cuda` checks the final answers on the unseen
samples with ONNX Runtime's CUDA provider (the real mixed graph, as deployed) instead of the emulator;
the pipeline itself runs its default `--backend auto` there (emulator search, confirmed on ort-cuda).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from statistics import median

import numpy as np
import onnx
from _common import OUT, machine, table
from generalization import planted_cases, splits, zoo_cases

from precision_doctor import api
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.backends.registry import make_backend
from precision_doctor.measure.headroom import sample_shares
from precision_doctor.pipeline import probe
from precision_doctor.render.verdict import verdict
from precision_doctor.spec import InputSpec, RunSpec, SearchSpec

RAW = OUT / "generalization_pipeline.jsonl"
SETTINGS = {"bare": SearchSpec(augment=0, margin=0.0), "default": SearchSpec()}


def run_split(case, model_path: Path, tmp: Path, idx: tuple[int, ...], name: str, search: SearchSpec,
              backend, refs: list[dict], search_backend: str = "auto") -> dict:
    files = []
    for i in idx:
        files.append(tmp / f"s{i}.npz")
        if not files[-1].exists():
            np.savez(files[-1], **case.samples[i])
    spec = RunSpec(str(model_path), inputs=InputSpec(files=tuple(map(str, files)), validation_split=0.0),
                   tolerance=case.tol, search=search).with_settings({"backends.backend": search_backend})
    t0 = time.monotonic()
    rep = api.diagnose(spec, tmp / f"run-{name}", force=True)
    wall = time.monotonic() - t0
    unseen = [i for i in range(len(case.samples)) if i not in idx]
    found = frozenset(rep.fallback_nodes) if rep.status == "complete" and rep.fallback_nodes is not None else None
    holds, shares = None, None
    if found is not None and (rep.passed or rep.expected_headroom is not None):
        per = sample_shares(backend, found, [case.samples[i] for i in unseen], [refs[i] for i in unseen], case.tol)
        holds, shares = all(p.passed for p in per), [p.share for p in per]
    h = rep.expected_headroom
    label, kind = verdict(rep)
    return {"size": len(rep.fallback_nodes), "evaluations": rep.evaluations, "passed": rep.passed, "verdict": label,
            "verdict_kind": kind, "holds": holds, "probe_holds": None if h is None else h.holds,
            "researched": None if h is None else h.researched, "share_unseen_probe": None if h is None else h.share_unseen,
            "predicted_share": None if h is None else h.predicted_share,
            "research_margin": None if h is None else h.research_margin,
            "certified_by": None if rep.certified_by is None else rep.certified_by.backend,
            "fp32_flop_share": rep.fp32_flop_share, "unseen_shares": shares, "fallback": rep.fallback_nodes,
            "wall_s": wall}


def render(records: list[dict]) -> str:
    """One table over every case, one per kind (planted, zoo) and one per case."""
    runs = [r | {"kind": r["case"].split(":")[0], "verdict_kind": r.get("verdict_kind", r["kind"])}
            for r in records if "setting" in r]  # records of the first version kept the verdict's kind in "kind"
    out = ["All cases:", summary(runs)]
    for kind in dict.fromkeys(r["kind"] for r in runs):
        out += [f"{kind} only:", summary([r for r in runs if r["kind"] == kind])]
    for case in dict.fromkeys(r["case"] for r in runs if r["kind"] == "zoo"):
        out += [f"{case}:", summary([r for r in runs if r["case"] == case])]
    return "\n\n".join(out)


def summary(runs: list[dict]) -> str:
    """Per setting: how often the answer holds on the unseen samples, and what the verdict said (runs a
    time limit interrupted are left out: they have no final answer)."""
    rows = []
    for name in dict.fromkeys(r["setting"] for r in runs):
        rs = [r for r in runs if r["setting"] == name and "interrupted" not in r["verdict"]]  # a time limit cut it
        if not rs:
            continue
        base = {(r["case"], r["n"], r["split"]): r for r in runs if r["setting"] == "bare"}
        paired = [(r, base[k]) for r in rs if (k := (r["case"], r["n"], r["split"])) in base]
        said_pass = [r for r in rs if r["verdict_kind"] == "pass"]
        rows.append([name, len(rs), _pct([bool(r["holds"]) for r in rs]), len(said_pass),
                     _pct([bool(r["holds"]) for r in said_pass]), sum(r["verdict_kind"] != "pass" for r in rs),
                     sum(r["verdict_kind"] != "pass" and r["holds"] is False for r in rs),
                     sum(bool(r.get("researched")) for r in rs),
                     _ratio(sum(r["size"] for r, _ in paired), sum(b["size"] for _, b in paired)),
                     _ratio(sum(r["evaluations"] for r, _ in paired), sum(b["evaluations"] for _, b in paired)),
                     f"{median(r['size'] for r in rs):g}",
                     _flops([r["fp32_flop_share"] for r in rs if r.get("fp32_flop_share") is not None])])
    return table(["setting", "splits", "answer holds %", "verdict PASS", "holds % when PASS", "verdict not PASS",
                  "... and would not have held", "second searches", "size / bare", "evals / bare", "median size",
                  "median FP32 FLOP %"], rows)


def _flops(shares: list[float]) -> str:
    return f"{100 * median(shares):.3g}" if shares else "-"


def _pct(xs: list[bool]) -> str:
    return f"{100 * sum(xs) / len(xs):.0f}" if xs else "-"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, default=None)
    ap.add_argument("--only", default=None, help="comma-separated case names, or `planted` / `zoo`")
    ap.add_argument("--sizes", default="2,4")
    ap.add_argument("--splits", type=int, default=5)
    ap.add_argument("--first-split", type=int, default=0, help="skip the splits before this one (a device call each)")
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--check-backend", default="emulate", help="where answers are checked on unseen samples")
    ap.add_argument("--backend", default="auto", help="the pipeline's --backend (auto: emulate, confirmed on a GPU)")
    ap.add_argument("--label", default=None, help="record the default setting under this name (variants)")
    ap.add_argument("--predict-risk", type=float, default=None, help="variant: the setting search.risk (--risk)")
    ap.add_argument("--predict-target", type=float, default=None, help="variant: pipeline.probe.PREDICT_TARGET")
    ap.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated settings to run")
    ap.add_argument("--out", type=Path, default=RAW, help="the raw records (jsonl)")
    ap.add_argument("--append", action="store_true", help="add to --out instead of starting it again")
    ap.add_argument("--render", type=Path, default=None)
    args = ap.parse_args()
    if args.render:
        print(render([json.loads(line) for line in args.render.read_text().splitlines() if line.strip()]))
        return
    cases = planted_cases(args.n) + (zoo_cases(args.zoo, args.n) if args.zoo else [])
    if args.only:
        wanted = args.only.split(",")
        cases = [c for c in cases if any(c.name == w or c.name.startswith(w + ":") for w in wanted)]
    settings = {k: SETTINGS[k] for k in args.settings.split(",")}
    if args.predict_risk is not None:
        settings = {k: replace(v, risk=args.predict_risk) for k, v in settings.items()}
    if args.predict_target is not None:
        probe.PREDICT_TARGET = args.predict_target
    if args.label:
        settings = {args.label if k == "default" else k: v for k, v in settings.items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a" if args.append else "w") as f:
        f.write(json.dumps({"machine": machine(), "args": vars(args) | {"zoo": str(args.zoo), "out": str(args.out),
                                                                       "render": None}}) + "\n")
        for case in cases:
            with tempfile.TemporaryDirectory(prefix="pd-genp-") as tmp:
                tmp = Path(tmp)
                model_path = tmp / "model.onnx"
                onnx.save(case.model.proto, str(model_path))
                ref = ReferenceRunner(case.model)
                refs = [ref.run(s) for s in case.samples]
                with make_backend(args.check_backend, case.model, "fp16", case.model.outputs) as backend:
                    for size in [int(s) for s in args.sizes.split(",")]:
                        for r, idx in enumerate(splits(case, size, args.splits)):
                            if r < args.first_split:
                                continue
                            for name, search in settings.items():
                                res = run_split(case, model_path, tmp, idx, name, search, backend, refs, args.backend)
                                rec = {"case": case.name, "kind": case.kind, "n": size, "split": r, "setting": name,
                                       "backend": args.backend, "check_backend": args.check_backend, **res}
                                f.write(json.dumps(rec) + "\n")
                                f.flush()
                                print(f"{case.name:26s} n={size} r={r} {name:8s} {res['verdict'][:40]:40s} size "
                                      f"{res['size']} holds {res['holds']} {res['wall_s']:.1f} s", file=sys.stderr)
    print(render([json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]))


if __name__ == "__main__":
    main()
