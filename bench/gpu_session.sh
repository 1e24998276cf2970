#!/usr/bin/env bash
# Every GPU check of a session, as the last of the device calls that carry onnxruntime-gpu's wheel
# parts (docs/BENCHMARKS.md, "On the GPU"). Runs on the GPU machine, in the repository root, with
#   carry: .stage/pN (the last part), zoo (fetched), .whl (polygraphy and onnx-graphsurgeon wheels),
#          .gpu/answers (an emulated batch's <model>/report.json files)
# after calls 1..N-1 appended parts 1..N-1 to /tmp/stage/wheel. Results land in $OUT.
set -uo pipefail
last=$(ls -d .stage/p* | sort -V | tail -1)
cat "$last"/part* >> /tmp/stage/wheel
name=$(cat "$last"/WHEEL_NAME)
mv /tmp/stage/wheel "/tmp/stage/$name"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "/tmp/stage/$name" .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"

# 1. emulated verdicts against the real mixed graph on ORT CUDA: planted suite and the zoo's answers
python3 bench/gpu_fidelity.py --out "$OUT" --zoo zoo --answers .gpu/answers | tee "$OUT/gpu_fidelity.md"

# 2. the whole zoo diagnosed with the GPU as the oracle (real FP16 in every evaluation)
timeout -s INT "${BATCH_SECONDS:-360}" python3 -m precision_doctor batch zoo --backend ort-cuda --jobs 2 \
  --out /tmp/gpu-batch
echo "batch exit $?"
cp /tmp/gpu-batch/summary.csv "$OUT/gpu_batch_summary.csv"
python3 - <<'PY' > "$OUT/gpu_batch_answers.json"
import json, pathlib
out = {}
for p in sorted(pathlib.Path("/tmp/gpu-batch").glob("*/report.json")):
    r = json.loads(p.read_text())
    out[p.parent.name] = {k: r.get(k) for k in ("backend", "passed", "status", "fallback_nodes", "evaluations",
                                                 "elapsed_s", "one_minimal_checked", "validation")}
print(json.dumps(out, indent=1, default=str))
PY
