#!/usr/bin/env bash
# GPU session I (issue 20's 60 s target), the measuring call after the staging calls; carry .stage/pN, .whl and zoo.
# MODE=batching: bench/gpu_batching.py (batches of samples through the gated graph); MODE=profile: the 32-sample
# diagnose under cProfile (profile.txt, the run's records); otherwise bench/gpu_session_h.sh (the 32-sample diagnose,
# GPU tests). Calls 3-5 also ran the diagnose with PRECISION_DOCTOR_GATED_ALGO=HEURISTIC, which only the code of
# those calls read (docs/history/gpu-session-i.md).
set -uo pipefail
source bench/gpu_install.sh || exit 1
if [ "${MODE:-}" = profile ]; then  # the diagnose under cProfile, its search records kept
  mkdir -p "$OUT/prof"
  python3 -c "import matplotlib.font_manager"  # its font cache, built once per machine, before the timing
  timeout -k 10 -s INT 300 python3 bench/gpu_calibration.py --zoo zoo \
    --profile --out /tmp/prof > "$OUT/prof/log" 2>&1
  cp /tmp/prof/profile.txt /tmp/prof/gpu_calibration.json "$OUT/prof/"
  tar czf "$OUT/prof/run-records.tgz" -C /tmp/prof/run $(cd /tmp/prof/run && ls *.jsonl report.json)
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(round(d['wall_s'],1), {k: round(v,1) for k,v in d['phases_s'].items()}, d['size'], d['evaluations']); print(d['steps_s'])" "$OUT/prof/gpu_calibration.json"
  head -90 "$OUT/prof/profile.txt"
  exit 0
fi
if [ "${MODE:-}" = batching ]; then
  timeout -k 10 300 python3 bench/gpu_batching.py --zoo zoo --out "$OUT/batching" 2>&1 | tail -c 5000
  exit 0
fi
source bench/gpu_session_h.sh
