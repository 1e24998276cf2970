"""What the deployment cost of one fallback set costs to compute (`CostModel.deploy_us`, `casts`): the search asks it
once per evaluation, so on a large model it is CPU time every evaluation pays (whisper-base on the H200: 13.8 s of a
run's sampled 601 s). The current code and, with `--before DIR`, the code in DIR (a folder holding precision_doctor/),
each in its own process on the same models and the same seeded random sets, side by side with their ratio; each
checks that both count the same Casts.

    .venv/bin/python bench/set_cost.py .large/whisper-base/model.onnx --before /tmp/before
    .venv/bin/python bench/set_cost.py --planted --before /tmp/before
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

SIZES = (0.0, 0.01, 0.1, 0.4, 1.0)  # shares of the candidates in a set


def measure(model_path: str | None, planted_name: str | None, sets: int, seed: int) -> dict:
    """In this process: load, make the cost model, time `deploy_us` and `casts` on `sets` random sets per size."""
    from precision_doctor import planted
    from precision_doctor.graph.cost import cost_model
    from precision_doctor.graph.model import from_proto, load_model

    model = load_model(model_path) if model_path else from_proto(planted.CASES[planted_name]().model)
    shapes = {i: tuple(d if isinstance(d, int) and d > 0 else 1 for d in model.tensor_shapes[i]) for i in model.inputs}
    cm = cost_model(model, "fp16", shapes)
    names, rng = [n.name for n in model.candidates], random.Random(seed)
    fallbacks = [frozenset(rng.sample(names, round(share * len(names)))) for share in SIZES for _ in range(sets)]
    cm.deploy_us(frozenset())  # the all-low estimate, made once
    t = time.perf_counter()
    costs = [cm.deploy_us(fb) for fb in fallbacks]
    deploy = (time.perf_counter() - t) / len(fallbacks)
    t = time.perf_counter()
    casts = [len(cm.casts(fb)) for fb in fallbacks]
    per_casts = (time.perf_counter() - t) / len(fallbacks)
    return {"nodes": len(model.nodes), "candidates": len(names), "deploy_ms": deploy * 1e3, "casts_ms": per_casts * 1e3,
            "casts": casts, "costs": costs}


def run(code: str | None, target: dict) -> dict:
    """`measure` in a subprocess whose precision_doctor is `code`'s (None: the current one)."""
    env = dict(os.environ)
    if code:
        env["PYTHONPATH"] = os.pathsep.join([code, env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(target)], env=env, capture_output=True,
                         text=True, cwd="/", check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*")
    ap.add_argument("--planted", action="store_true", help="the planted suite's models too")
    ap.add_argument("--before", default=None, help="a folder holding the precision_doctor/ to compare with")
    ap.add_argument("--sets", type=int, default=4, help="random sets per size")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        t = json.loads(args.child)
        print(json.dumps(measure(t.get("model"), t.get("planted"), t["sets"], t["seed"])))
        return
    from precision_doctor import planted

    targets = [{"model": str(Path(m).resolve())} for m in args.models]
    targets += [{"planted": name} for name in planted.CASES] if args.planted else []
    print("| model | nodes | candidates | deploy_us ms a set, before | after | ratio | casts ms a set, before | after "
          "| ratio | the same costs and Casts |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for t in targets:
        t.update(sets=args.sets, seed=2026)
        after = run(None, t)
        before = run(str(Path(args.before).resolve()), t) if args.before else {}
        print(_row(t, before, after), flush=True)


def _row(target: dict, before: dict, after: dict) -> str:
    name = Path(target["model"]).parent.name if "model" in target else f"planted:{target['planted']}"
    same = "-" if not before else ("yes" if (before["casts"], before["costs"]) == (after["casts"], after["costs"]) else "NO")
    cells = [name, after["nodes"], after["candidates"]]
    for key in ("deploy_ms", "casts_ms"):
        b = before.get(key)
        cells += ["-" if b is None else f"{b:.2f}", f"{after[key]:.2f}", f"{after[key] / b:.2f}x" if b else "-"]
    return "| " + " | ".join(map(str, cells + [same])) + " |"

if __name__ == "__main__":
    main()
