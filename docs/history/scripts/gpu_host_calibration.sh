#!/usr/bin/env bash
# The CPU calibration benchmark (bench/calibration.py, the emulator) on the GPU machine's 16 CPU cores, for the
# runs that take too long on the 2-core machine; after a staging call (bench/gpu_install.sh). Arguments are
# bench/calibration.py's (--only, --sizes, --no-hindsight); records in $OUT/cal-cpu/calibration.jsonl as they come.
set -uo pipefail
source bench/gpu_install.sh || exit 1
mkdir -p "$OUT/cal-cpu"
nproc
timeout -k 10 -s INT "${LIMIT:-560}" python3 bench/calibration.py --zoo zoo --out "$OUT/cal-cpu/calibration.jsonl" "$@" \
  > "$OUT/cal-cpu/log" 2>&1
tail -30 "$OUT/cal-cpu/log"
