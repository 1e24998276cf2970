#!/usr/bin/env bash
# GPU session J (issue 20's 60 s target), the measuring call after the staging calls; carry .stage/pN, .whl and zoo.
# The 32-sample diagnose of nudenet-320n (bench/gpu_calibration.py) with the code before this session (BASE, a copy
# of the package at that commit put in .base/ beside the tree, untracked) and with this tree's, one after the other
# on the same machine, then the GPU tests. Results in $OUT/cal-base, $OUT/cal-new, $OUT/gpu-tests.log.
set -uo pipefail
source bench/gpu_install.sh || exit 1
python3 -c "import time; t = time.time(); import matplotlib.font_manager; print(f'matplotlib font cache: {time.time() - t:.1f} s')"
calibrate() {  # $1: label, $2: the directory whose precision_doctor runs
  mkdir -p "$OUT/cal-$1"
  PYTHONPATH=/tmp/site:$2 timeout -k 10 -s INT 200 python3 bench/gpu_calibration.py --zoo zoo --out "$OUT/cal-$1" \
    > "$OUT/cal-$1/log" 2>&1
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], round(d['wall_s'],1), {k: round(v,1) for k,v in d['phases_s'].items()}, d['size'], d['passed'], d['status'], d.get('unseen_ort-cuda'), d.get('unseen_emulate')); print(d['steps_s'])" "$OUT/cal-$1/gpu_calibration.json" "$1" || tail -c 1500 "$OUT/cal-$1/log"
  find "$OUT/cal-$1" \( -name '*.h5' -o -name '*.onnx' -o -name '*.plan' -o -name '*.npz' -o -name '*.npy' \) -delete
  rm -rf "$OUT/cal-$1/inputs" "$OUT/cal-$1/run/trtexec_io"
}
if [ -d .base/precision_doctor ]; then calibrate base "$PWD/.base"; fi
calibrate new "$PWD"
timeout -k 10 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/backends/test_certified.py tests/graph/test_mixed.py 2>&1 | tail -3 | tee "$OUT/gpu-tests.log"
