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
# Each model runs under its own time limit (SIGINT interrupts the split in progress, SIGKILL 10 s later
# ends the model; finished splits stay in the jsonl). The GPU-marked tests run first.
# Session C (2026-11-23) ran this in its last call; nudenet's strict case did not fit in a call (one
# split of `--only "zoo:nudenet-320n strict" --sizes 2 --splits 1` ran over 500 s).
set -uo pipefail
source bench/gpu_install.sh || exit 1
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
timeout -k 10 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tail -5 | tee "$OUT/gpu-tests.log"
RAW="$OUT/genp-gpu.jsonl"
run() {  # run LIMIT_S ARGS...: one model's splits, appended to $RAW
  local limit=$1; shift
  timeout -k 10 -s INT "$limit" python3 bench/generalization_pipeline.py --zoo zoo --settings default \
    --check-backend ort-cuda --out "$RAW" --append "$@" 2>&1 | grep -v "^|" | tee -a "$OUT/session.log"
}
: > "$RAW"
run 120 --only zoo:silero-vad-16k --splits 3
run 80 --only zoo:ppocr-v4-det --sizes 2 --splits 1
run 200 --only zoo:ppocr-mobile-cls --sizes 2 --splits 1
python3 bench/generalization_pipeline.py --render "$RAW" > "$OUT/genp-gpu.md"
cat "$OUT/genp-gpu.md"
