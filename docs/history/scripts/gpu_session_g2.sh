#!/usr/bin/env bash
# GPU session G, the measuring call: what changed after call 1 (bench/gpu_session_g1.sh: the confirmation's trials
# on cuDNN's HEURISTIC algorithms with EXHAUSTIVE's final check, polygraphy's JSON without torch, the capture's
# batched writes, the loop's keep-and-polish rounds, the halfway second search). Carry .stage/pN, .whl and zoo in
# the last staging call. Results in $OUT:
#   gpu-tests.log   the GPU-marked tests
#   calibration/    nudenet-320n with 32 samples and the defaults (issue 20's 60 s target), judged on 100 unseen
# matplotlib builds its font cache on its first import on a machine (8 s on a fresh GPU machine, once per machine:
# a user's machine has it); it is built here first, and timed, so that the diagnose's time is a user's.
set -uo pipefail
source bench/gpu_install.sh || exit 1
python3 -c "import time; t = time.time(); import matplotlib.font_manager; print(f'matplotlib font cache: {time.time() - t:.1f} s')"
timeout -k 10 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/backends/test_certified.py tests/graph/test_mixed.py 2>&1 | tail -3 | tee "$OUT/gpu-tests.log"
mkdir -p "$OUT/calibration"
timeout -k 10 -s INT 300 python3 bench/gpu_calibration.py --zoo zoo --out "$OUT/calibration" > "$OUT/calibration/log" 2>&1
tail -c 2500 "$OUT/calibration/log"
find "$OUT/calibration" \( -name '*.h5' -o -name '*.onnx' -o -name '*.plan' -o -name '*.npz' -o -name '*.npy' \) -delete
rm -rf "$OUT/calibration/inputs" "$OUT/calibration/run/trtexec_io"
