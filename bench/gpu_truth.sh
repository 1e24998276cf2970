#!/usr/bin/env bash
# The GPU truth benchmark (issue 33: bench/gpu_truth.py) on a lent GPU machine, in the last of the device calls that
# carry onnxruntime-gpu's wheel parts (bench/gpu_install.sh) or in any later call on the same warm machine.
# Data: .truth/a and .truth/b (bench/truth_prepare.py; 26 and 18 MB), carried in this call or copied to /tmp/truth/
# by an earlier call (`mkdir -p /tmp/truth && cp -r .truth/* /tmp/truth/`); what this call carries is copied there too,
# so a second call needs no data. Both (42.5 MiB) fit beside the tree (9.3 MiB) in one call, not beside a 48-MiB part.
# The code before: a copy of the package at that commit in .base/ (untracked, so it travels with the tree:
# `mkdir -p .base && git archive BASE precision_doctor | tar -x -C .base`).
# Settings: TRUTH_LIMIT_S (520: everything ends and the tables are printed within it), TRUTH_RUNS ("current hindsight
# before", most important first; `before` only where .base/ is), TRUTH_SIZES ("24 8"), TRUTH_JOBS (7), TRUTH_ONLY
# (comma-separated models; default all). Results: $OUT/truth.md, truth.json, logs.txt, progress.log (4 files: a call
# brings back 8). Several calls: `python3 bench/gpu_truth.py --render call1/truth.json call2/truth.json` (later wins).
# TRUTH_COMMIT: the commit to record (the device's copy of the tree may report another).
# TRUTH_DRY=1: the same flow on a CPU machine (no install, gpu_truth.py --dry-run; PYTHON=.venv/bin/python).
set -uo pipefail
start=$(date +%s)
dry=""
if [ -n "${TRUTH_DRY:-}" ]; then dry=--dry-run; else source bench/gpu_install.sh || exit 1; fi
py=${PYTHON:-python3}
mkdir -p /tmp/truth "$OUT"
rm -rf /tmp/truth-out
for g in .truth/*/; do [ -f "$g/manifest.json" ] && cp -r "$g" /tmp/truth/; done
runs=${TRUTH_RUNS:-current hindsight before}
[ -d .base/precision_doctor ] || runs=${runs/before/}
[ -n "${runs// /}" ] || { echo "nothing to run: TRUTH_RUNS='${TRUTH_RUNS:-}' (before needs .base/precision_doctor)"; exit 2; }
limit=$(( ${TRUTH_LIMIT_S:-520} - ($(date +%s) - start) - 10 ))
$py -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
# shellcheck disable=SC2086  # runs, sizes: word lists
$py bench/gpu_truth.py $dry --data /tmp/truth --out /tmp/truth-out --work /tmp/truth-work --runs $runs \
  --sizes ${TRUTH_SIZES:-24 8} --jobs "${TRUTH_JOBS:-7}" --limit-s "$limit" --timeout-s 420 --package-dir .base \
  ${TRUTH_ONLY:+--only "$TRUTH_ONLY"} 2>&1 | grep --line-buffered -v "^20[0-9-]* [0-9:.]* \[" |
  tee /tmp/truth-progress.log | grep --line-buffered -v "\] running "  # the 10 s lines: in progress.log only
cp /tmp/truth-out/truth.json /tmp/truth-out/truth.md /tmp/truth-out/logs.txt "$OUT/"
cp /tmp/truth-progress.log "$OUT/progress.log"
rm -rf /tmp/truth-work
