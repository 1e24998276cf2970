"""The emulator's columns of a GPU run, recomputed here: for every (model, fallback set) of a
bench/gpu_nodewise.py result (nodewise.json, from a GPU), the share of the tolerance the emulator
uses on the same samples under each rules profile, beside what the GPU's real mixed graph used.

The sets are rebuilt as gpu_nodewise.py built them (all-FP16, the batch answers given with
--answers, the random sets of `fallback_sets`, all-FP32) and checked against the JSON's set names
and sizes, so a profile changed since the GPU run (new rules) is compared with the GPU's numbers on
exactly the same sets and samples. CPU only; needs no GPU.

    python bench/gpu_replay_sets.py --nodewise /work/gpu-results/a/nodewise/nodewise.json --zoo zoo \
        --answers .gpu/answers --answers .gpu/answers-strict --planted --out bench/out/replay_a

Writes replay.json (every row) and replay.md (the table: GPU, each profile, each profile's ratio to the
GPU, and where the emulator says pass and the GPU fail).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _common import fmt as _fmt
from gpu_nodewise import _used, fallback_sets, works

from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.rules import resolve_rules

PROFILES = ("standard", "ort-cuda-nodes", "ort-cuda")


def replay(gpu_sets: list[dict], todo: list, profiles: list[str], log=print) -> list[dict]:
    """One row per set of `gpu_sets` whose model is in `todo`: the GPU's mixed-graph share and the
    emulator's per profile, on the same samples."""
    by_model: dict[str, dict[str, dict]] = {}
    for row in gpu_sets:
        by_model.setdefault(row["model"], {})[row["set"]] = row
    out = []
    for label, model, samples, tol, answers in todo:
        wanted = by_model.get(label)
        if not wanted:
            continue
        t0 = time.perf_counter()
        sets = fallback_sets(model, answers, n_random=sum(1 for s in wanted if s.startswith("random")))
        refs = [ReferenceRunner(model).run(s) for s in samples]
        emus = {p: EmulateBackend(model, "fp16", rules=p) for p in profiles}
        for name, fb in sets.items():
            gpu = wanted.get(name)
            if gpu is None:
                continue
            if gpu["fp32_nodes"] != len(fb) or gpu["samples"] != len(samples):
                raise SystemExit(f"{label} {name}: the GPU run had {gpu['fp32_nodes']} FP32 nodes and {gpu['samples']} "
                                 f"samples, here {len(fb)} and {len(samples)}: not the same set")
            row = {"model": label, "set": name, "fp32_nodes": len(fb), "samples": len(samples),
                   "gpu": gpu["mixed"], "gated": gpu.get("gated"), "emulated": {}}
            for p, e in emus.items():
                runner = e.prepare(fb)
                row["emulated"][p] = _used([runner.run(s, list(r)) for s, r in zip(samples, refs)], refs, tol)
            out.append(row)
        log(f"{label}: {sum(1 for r in out if r['model'] == label)} sets in {time.perf_counter() - t0:.1f} s")
    return out


def ratio(emulated: float, gpu: float) -> float:
    """emulated / gpu share (1 when both are 0 or both are infinite)."""
    if gpu == emulated:
        return 1.0
    if gpu == 0 or gpu == float("inf"):
        return float("inf") if emulated > gpu else 0.0
    return emulated / gpu


def markdown(rows: list[dict], profiles: list[str]) -> str:
    head = "| model | set | FP32 nodes | GPU (mixed, ORT_ENABLE_ALL) | " + " | ".join(profiles) + " | " + \
        " | ".join(f"{p} / GPU" for p in profiles) + " |"
    lines = [head, "|" + "---|" * (4 + 2 * len(profiles))]
    for r in rows:
        g = r["gpu"]["tol_used"]
        cells = [_fmt(r["emulated"][p]["tol_used"]) + (" **pass/GPU fail**" if r["emulated"][p]["passed"] and not
                                                          r["gpu"]["passed"] else "") for p in profiles]
        ratios = [_fmt(ratio(r["emulated"][p]["tol_used"], g)) for p in profiles]
        lines.append(f"| {r['model']} | {r['set']} | {r['fp32_nodes']} | {_fmt(g)} | " + " | ".join(cells) + " | "
                     + " | ".join(ratios) + " |")
    lines.append("")
    for p in profiles:  # all-FP32 sets measure the GPU's FP32 kernels against the CPU reference, not the rules
        finite = [r for r in rows if r["gpu"]["tol_used"] not in (0.0, float("inf")) and r["set"] != "all-fp32"]
        within = sum(1 for r in finite if abs(ratio(r["emulated"][p]["tol_used"], r["gpu"]["tol_used"]) - 1) <= 0.1)
        wrong = sum(1 for r in rows if r["emulated"][p]["passed"] and not r["gpu"]["passed"])
        lines.append(f"- {p}: within 10% of the GPU on {within} of {len(finite)} sets with FP16 nodes and a finite GPU "
                     f"share; emulator pass where the GPU fails: {wrong}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodewise", type=Path, required=True, help="nodewise.json of a GPU run")
    ap.add_argument("--zoo", type=Path)
    ap.add_argument("--planted", action="store_true")
    ap.add_argument("--planted-samples", type=int, default=4)
    ap.add_argument("--answers", type=Path, action="append", default=[], help="the batch folders the GPU run used")
    ap.add_argument("--only", help="models, comma-separated")
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--out", type=Path, default=Path("bench/out/gpu_replay"))
    ap.add_argument("--from-json", type=Path, help="re-render the tables of an earlier replay.json")
    args = ap.parse_args()
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    for p in profiles:
        resolve_rules(p)
    gpu = json.loads(args.nodewise.read_text())
    if args.from_json:  # re-render an earlier replay
        rows = json.loads(args.from_json.read_text())["rows"]
    else:
        rows = replay(gpu["sets"], works(args), profiles)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "replay.json").write_text(json.dumps({"source": str(args.nodewise), "device": gpu.get("device"),
                                                      "onnxruntime": gpu.get("onnxruntime"), "profiles": profiles,
                                                      "rows": rows}, indent=1, default=str))
    md = markdown(rows, profiles)
    (args.out / "replay.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
