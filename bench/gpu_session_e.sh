#!/usr/bin/env bash
# GPU session E (stop 25), round 1: the op probe of issue 21 (bench/gpu_opprobe.py on the probe models of
# bench/probe_models.py and the planted suite), the GPU-marked tests, and the time of today's default pipeline on a
# YOLOv8n detector with 32 samples (issue 20's target is 60 s). Carry .stage/pN (the last part), .whl, probe and zoo
# in the last staging call (bench/gpu_install.sh). Results in $OUT.
set -uo pipefail
source bench/gpu_install.sh || exit 1
timeout -s INT 280 python3 bench/gpu_opprobe.py --probes probe --planted --out "$OUT" 2>&1 | tail -40
timeout -k 10 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tail -5 | tee "$OUT/gpu-tests.log"
start=$(date +%s)
timeout -k 10 -s INT 100 python3 -m precision_doctor diagnose zoo/nudenet-320n.onnx --samples 32 \
  --input-shapes 'images:[1,3,320,320]' --val-range 'images:[0,1]' --atol 1e-3 --rtol 1e-2 --out /tmp/nd32 2>&1 | tail -15
echo "nudenet 32 samples: $(( $(date +%s) - start )) s"
cp /tmp/nd32/report.json "$OUT/nudenet32-report.json" 2>/dev/null || true
