#!/usr/bin/env bash
# GPU session I (issue 20's 60 s target), the measuring call after the staging calls; carry .stage/pN, .whl and zoo.
# MODE=batching: bench/gpu_batching.py (batches of samples through the gated graph); otherwise
# bench/gpu_session_h.sh (the 32-sample diagnose, GPU tests), then the diagnose again with the gated graph's cuDNN
# algorithms chosen by HEURISTIC instead of ORT's default EXHAUSTIVE (label "heuristic").
set -uo pipefail
source bench/gpu_install.sh || exit 1
if [ "${MODE:-}" = batching ]; then
  timeout -k 10 300 python3 bench/gpu_batching.py --zoo zoo --out "$OUT/batching" 2>&1 | tail -c 5000
  exit 0
fi
source bench/gpu_session_h.sh
PRECISION_DOCTOR_GATED_ALGO=HEURISTIC calibrate heuristic
