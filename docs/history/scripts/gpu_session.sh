#!/usr/bin/env bash
# Every GPU check of a session, as the last of the device calls that carry onnxruntime-gpu's wheel
# parts (docs/BENCHMARKS.md, "On the GPU"). Runs on the GPU machine, in the repository root, with
#   carry: .stage/pN (the last part), zoo (fetched), .whl (polygraphy and onnx-graphsurgeon wheels),
#          .gpu/answers (an emulated batch's <model>/report.json files)
# after calls 1..N-1 appended parts 1..N-1 to /tmp/stage/wheel. Results land in $OUT.
set -uo pipefail
source bench/gpu_install.sh || exit 1
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"

# 1. emulated verdicts against the real mixed graph on ORT CUDA: planted suite and the zoo's answers
#    (one run per folder of answers under .gpu/, e.g. .gpu/answers, .gpu/answers-margin)
if [ "${GPU_FIDELITY:-1}" = 1 ]; then
  python3 bench/gpu_fidelity.py --out "$OUT" | tee "$OUT/gpu_fidelity.md"
  for dir in .gpu/answers*; do
    name=gpu_fidelity_zoo_$(basename "$dir")
    python3 bench/gpu_fidelity.py --out "$OUT" --no-planted --zoo zoo --answers "$dir" --name "$name" | tee "$OUT/$name.md"
  done
fi
[ "${GPU_BATCH:-1}" = 1 ] || exit 0

# 2. the whole zoo diagnosed on the GPU: with the GPU as the oracle (BATCH_BACKEND=ort-cuda, real FP16 in
#    every evaluation), or searched with the emulator and confirmed on the GPU (BATCH_BACKEND=emulate
#    BATCH_ARGS="--confirm-backend ort-cuda"; add --knobs to try ORT CUDA's knobs around each answer there)
timeout -s INT "${BATCH_SECONDS:-360}" python3 -m precision_doctor batch zoo --backend "${BATCH_BACKEND:-ort-cuda}" \
  --jobs 2 --out /tmp/gpu-batch ${BATCH_ARGS:-}
echo "batch exit $?"
cp /tmp/gpu-batch/summary.csv "$OUT/gpu_batch_summary.csv"
python3 - <<'PY' > "$OUT/gpu_batch_answers.json"
import json, pathlib
out = {}
for p in sorted(pathlib.Path("/tmp/gpu-batch").glob("*/report.json")):
    r = json.loads(p.read_text())
    out[p.parent.name] = {k: r.get(k) for k in ("backend", "passed", "status", "reason", "fallback_nodes", "evaluations",
                                                 "elapsed_s", "one_minimal_checked", "margin", "tolerance_used",
                                                 "validation", "confirm", "knobs")}
print(json.dumps(out, indent=1, default=str))
PY
