#!/usr/bin/env bash
# Issue 20 on the GPU: `--backend auto` searching on ort-cuda-gated and confirming on ort-cuda. The GPU-marked test
# of `auto` (tests/backends/test_certified.py), then nudenet-320n (YOLOv8n) with 32 samples and the defaults against the 60 s
# target, its answer checked on 100 unseen samples on ort-cuda (bench/gpu_calibration.py). Carry .stage/pN (the
# last part), .whl and zoo in the last staging call (bench/gpu_install.sh). Results in $OUT.
set -uo pipefail
source bench/gpu_install.sh || exit 1
timeout -k 10 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/backends/test_certified.py 2>&1 | tail -5 | tee "$OUT/gpu-tests.log"
timeout -k 10 -s INT 480 python3 bench/gpu_calibration.py --zoo zoo --out "$OUT" 2>&1 | tail -45
