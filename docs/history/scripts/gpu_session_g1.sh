#!/usr/bin/env bash
# GPU session G, call 1: where issue 20's 60 s go. Carry .stage/pN (the wheel's last part), .whl and zoo in the last
# staging call (bench/gpu_install.sh). Results in $OUT:
#   eval-profile/   one ort-cuda evaluation taken apart (bench/gpu_eval_profile.py)
#   prof/           nudenet-320n with 32 samples and the defaults under cProfile (cal.prof), its log, figures and the
#                   run's small files (report.json, the search logs)
set -uo pipefail
source bench/gpu_install.sh || exit 1
mkdir -p "$OUT/eval-profile" "$OUT/prof"
(cd bench && timeout -k 10 170 python3 gpu_eval_profile.py --zoo ../zoo --out "$OUT/eval-profile" > "$OUT/eval-profile/log" 2>&1)
tail -40 "$OUT/eval-profile/log"
timeout -k 10 -s INT 360 python3 -m cProfile -o "$OUT/prof/cal.prof" bench/gpu_calibration.py --zoo zoo --unseen 30 \
  --out "$OUT/prof" > "$OUT/prof/log" 2>&1
tail -c 1500 "$OUT/prof/log"
find "$OUT/prof" \( -name '*.h5' -o -name '*.onnx' -o -name '*.plan' -o -name '*.npz' -o -name '*.npy' \) -delete
rm -rf "$OUT/prof/inputs"
du -sh "$OUT"/*
