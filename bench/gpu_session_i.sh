#!/usr/bin/env bash
# GPU session I (issue 20's 60 s target), the measuring call after the staging calls; carry .stage/pN, .whl and zoo.
# MODE=gating: bench/gpu_gating.py on nudenet-320n and ppocr-mobile-cls (the gated graph's If and Where forms, a
# CUDA graph, cuDNN's algorithm search); otherwise as bench/gpu_session_h.sh (the 32-sample diagnose, GPU tests).
set -uo pipefail
source bench/gpu_install.sh || exit 1
if [ "${MODE:-}" = batching ]; then
  timeout -k 10 300 python3 bench/gpu_batching.py --zoo zoo --out "$OUT/batching" 2>&1 | tail -c 5000
  exit 0
fi
source bench/gpu_session_h.sh
