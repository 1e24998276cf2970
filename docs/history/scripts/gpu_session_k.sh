#!/usr/bin/env bash
# GPU session K (issue 20's 60 s target), the measuring call after the staging calls; carry .stage/pN, .whl, zoo and
# bench/data/nudenet-320n-answer74.txt (the 74-node answer of sessions H-J, one node a line). What one ort-cuda confirmation trial
# costs and whether cuDNN's algorithm search changes its verdict (bench/ort_session_cost.py), then the 32-sample
# diagnose of nudenet-320n under cProfile (bench/gpu_calibration.py --profile), then the GPU tests.
set -uo pipefail
source bench/gpu_install.sh || exit 1
if [ "${MODE:-}" = forms ]; then  # the gated graph's If and Where forms, and the Where form as a CUDA graph
  (cd bench && timeout 300 python3 gated_forms.py --zoo ../zoo --fallback data/nudenet-320n-answer74.txt --out "$OUT/forms" 2>&1 |
    grep -v Warning | grep -v "^20[0-9-]* [0-9:.]* \[V" | tail -20)
  (cd bench && timeout 300 python3 gated_forms.py --zoo ../zoo --fallback data/nudenet-320n-answer74.txt --samples 2 \
    --out /tmp/forms2 2>&1 | grep -A12 "placed on \[CPUExecutionProvider\]" | head -30)
  exit 0
fi
if [ "${MODE:-}" = final ]; then  # the end of the session's code: the 32-sample diagnose unprofiled and the GPU tests
  python3 -c "import matplotlib.font_manager"  # a user's machine has its font cache already
  PROFILE=""
  # a user's command line: a directory of samples, stderr not a terminal (plain progress lines), --backend auto
  timeout -k 10 -s INT 200 python3 -m precision_doctor diagnose zoo/ppocr-mobile-cls.onnx --inputs zoo/ppocr-mobile-cls_inputs \
    --input-shapes 'x:[1,3,48,192]' --atol 0.002 --rtol 0.002 --out "$OUT/cli-cls" > "$OUT/cli-cls.log" 2>&1
  echo "cli rc=$?"; grep -v "^20[0-9-]* [0-9:.]* \[" "$OUT/cli-cls.log" | tail -30 | cut -c1-400
  find "$OUT/cli-cls" \( -name '*.h5' -o -name '*.onnx' -o -name '*.plan' -o -name '*.npz' \) -delete
  rm -rf "$OUT/cli-cls/trtexec_io"
  # which nodes ONNX Runtime places on the CPU in the Where form of the gated graph (no CUDA graph capture then)
  (cd bench && timeout 200 python3 gated_forms.py --zoo ../zoo --fallback data/nudenet-320n-answer74.txt --samples 2 \
    --out /tmp/forms2 2>&1 | grep -A12 "placed on \[CPUExecutionProvider\]" | head -30)
else
  PROFILE="--profile"
  (cd bench && timeout 240 python3 ort_session_cost.py --zoo ../zoo --fallback data/nudenet-320n-answer74.txt \
  --out "$OUT/session-cost" 2>&1 | grep -v Warning | tail -20)
fi
mkdir -p "$OUT/cal"
timeout -k 10 -s INT 240 python3 bench/gpu_calibration.py --zoo zoo --out "$OUT/cal" $PROFILE > "$OUT/cal/log" 2>&1
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(round(d['wall_s'],1), {k: round(v,1) for k,v in d['phases_s'].items()}, d['size'], d['passed'], d.get('unseen_ort-cuda')); print(d['steps_s'])" "$OUT/cal/gpu_calibration.json" || tail -c 1500 "$OUT/cal/log"
find "$OUT/cal" \( -name '*.h5' -o -name '*.onnx' -o -name '*.plan' -o -name '*.npz' -o -name '*.npy' \) -delete
rm -rf "$OUT/cal/inputs" "$OUT/cal/run/trtexec_io"
timeout -k 10 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/backends/test_certified.py tests/graph/test_mixed.py 2>&1 | tail -3
