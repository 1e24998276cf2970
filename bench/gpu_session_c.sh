#!/usr/bin/env bash
# GPU session C (issue #9): does the default pipeline's answer hold on new inputs where it is deployed?
# The default pipeline (`--backend auto`: the emulator searches, ONNX Runtime's CUDA provider confirms,
# and the probe of the final answer runs there) on repeated splits of the zoo's samples
# (bench/generalization_pipeline.py), each final answer then checked on the split's unseen samples on
# ort-cuda: the real mixed graph, as deployed. One device call, the last of those that stage
# onnxruntime-gpu (bench/gpu_install.sh); carry .stage/pN (the last part), .whl and zoo.
#
#   bash bench/gpu_session_c.sh            # results in $OUT/genp-gpu.jsonl, rendered in $OUT/genp-gpu.md
#
# Each model runs under its own time limit (SECONDS_PER_MODEL); what finished stays in the jsonl.
set -uo pipefail
source bench/gpu_install.sh || exit 1
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
RAW="$OUT/genp-gpu.jsonl"
run() {  # run LIMIT_S ARGS...: one model's splits, appended to $RAW
  local limit=$1; shift
  timeout -s INT "$limit" python3 bench/generalization_pipeline.py --zoo zoo --settings default \
    --check-backend ort-cuda --out "$RAW" --append "$@" 2>&1 | grep -v "^|" | tee -a "$OUT/session.log"
}
: > "$RAW"
run 90 --only zoo:silero-vad-16k --splits 3
run 170 --only zoo:ppocr-mobile-cls --splits 2
run 60 --only zoo:ppocr-v4-det --sizes 2 --splits 1
run 180 --only "zoo:nudenet-320n strict" --sizes 2 --splits 2
python3 bench/generalization_pipeline.py --render "$RAW" > "$OUT/genp-gpu.md"
cat "$OUT/genp-gpu.md"
