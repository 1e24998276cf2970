#!/usr/bin/env bash
# GPU session D (issue #9, stop 18): the default pipeline with image copies that change exposure and white
# balance (data/augment.py) and a confirmation that keeps the members of answers above 64 nodes
# (pipeline/confirmation.py, PRUNE_MAX), on the GPU: `--backend auto` (the emulator searches, ONNX
# Runtime's CUDA provider confirms and probes), each final answer then checked on the split's unseen
# samples on ort-cuda, the real mixed graph as deployed (bench/generalization_pipeline.py). Carry
# .stage/pN (the last part), .whl and zoo in the last staging call (bench/gpu_install.sh).
#
#   bash bench/gpu_session_d.sh a   # GPU-marked tests, silero-vad (3 splits of 2 and of 4), ppocr-v4-det and
#                                   # ppocr-mobile-cls (a split of 2)
#   bash bench/gpu_session_d.sh b K # nudenet's YOLOv8n at atol = rtol = 1e-3, split K (default 0) of 2 images
#
# Results in $OUT/genp-gpu-<part>.jsonl, rendered in $OUT/genp-gpu-<part>.md. Each model runs under its own
# time limit (SIGINT interrupts the split in progress, SIGKILL 10 s later; finished splits stay in the jsonl).
set -uo pipefail
part=${1:?a or b}
source bench/gpu_install.sh || exit 1
RAW="$OUT/genp-gpu-$part${2:-}.jsonl"
run() {  # run LIMIT_S ARGS...: one model's splits, appended to $RAW
  local limit=$1; shift
  timeout -k 10 -s INT "$limit" python3 bench/generalization_pipeline.py --zoo zoo --settings default \
    --check-backend ort-cuda --out "$RAW" --append "$@" 2>&1 | grep -v "^|" | tee -a "$OUT/session-$part.log"
}
: > "$RAW"
case $part in
  a) python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
     timeout -k 10 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tail -5 | tee "$OUT/gpu-tests.log"
     run 130 --only zoo:silero-vad-16k --splits 3
     run 80 --only zoo:ppocr-v4-det --sizes 2 --splits 1
     run 200 --only zoo:ppocr-mobile-cls --sizes 2 --splits 1 ;;
  b) run 570 --only "zoo:nudenet-320n strict" --sizes 2 --splits $((${2:-0} + 1)) --first-split "${2:-0}" ;;
esac
python3 bench/generalization_pipeline.py --render "$RAW" > "$OUT/genp-gpu-$part${2:-}.md"
cat "$OUT/genp-gpu-$part${2:-}.md"
