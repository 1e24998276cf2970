"""Which nodes of a mixed-precision graph ONNX Runtime's CUDA provider leaves to the CPU (where an
FP16 op without a CPU FP16 kernel computes in FP32 between inserted Casts), from ORT's profile.

    python bench/gpu_placement.py --zoo zoo [--answers DIR] --out DIR
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from pathlib import Path

import onnxruntime as ort
from _zoo import batch_answer, zoo_works

from precision_doctor.graph.mixed import build_mixed


def placement(proto, feeds) -> dict[str, list[str]]:
    """provider -> ["op_type name", ...] for every node ORT's profile saw run once."""
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.log_severity_level = 3
    with tempfile.TemporaryDirectory() as tmp:
        so.profile_file_prefix = str(Path(tmp) / "prof")
        sess = ort.InferenceSession(proto.SerializeToString(), so,
                                    providers=[("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"])
        want = {i.name: i.type for i in sess.get_inputs()}
        sess.run(None, {k: v.astype("float16") if want[k] == "tensor(float16)" else v for k, v in feeds.items()})
        events = json.loads(Path(sess.end_profiling()).read_text())
    out: dict[str, set[str]] = {}
    for e in events:
        a = e.get("args") or {}
        if e.get("cat") == "Node" and "provider" in a and e["name"].endswith("_kernel_time"):
            out.setdefault(a["provider"], set()).add(f"{a.get('op_name', '?')} {e['name'][: -len('_kernel_time')]}")
    return {k: sorted(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, required=True)
    ap.add_argument("--answers", type=Path)
    ap.add_argument("--out", type=Path, default=Path("bench/out"))
    args = ap.parse_args()
    result = {}
    for w in zoo_works(args.zoo):
        sets = {"all-fp16": frozenset()}
        answer = batch_answer(args.answers, w) if args.answers else None
        if answer is not None:
            sets["answer"] = answer
        for label, fb in sets.items():
            placed = placement(build_mixed(w.model, fb, "fp16", True), w.samples[0])
            result[f"{w.name} {label}"] = placed
            counts = {p: dict(Counter(x.split()[0] for x in names)) for p, names in placed.items()}
            print(w.name, label, json.dumps(counts), flush=True)
            for name in placed.get("CPUExecutionProvider", []):
                print("   on CPU:", name)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_placement.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
