#!/usr/bin/env bash
# The GPU truth benchmark (issue 33: bench/gpu_truth.py) on a lent GPU machine, in the last of the device calls that
# carry onnxruntime-gpu's wheel parts (bench/gpu_install.sh) or in any later call on the same warm machine.
# Data: .truth/a and .truth/b (bench/truth_prepare.py; 26 and 18 MB), carried in this call or copied to /tmp/truth/
# by an earlier call (`mkdir -p /tmp/truth && cp -r .truth/* /tmp/truth/`); what this call carries is copied there too,
# so a second call needs no data. Both (42.5 MiB) fit beside the tree (9.3 MiB) in one call, not beside a 48-MiB part. The code before: a copy of the package at that commit in .base/ (untracked, so it
# travels with the tree: `mkdir -p .base && git archive BASE precision_doctor | tar -x -C .base`).
# Settings: TRUTH_LIMIT_S (520: everything ends and the tables are printed within it), TRUTH_RUNS ("current hindsight
# before", most important first; `before` only where .base/ is), TRUTH_SIZES ("24 8"), TRUTH_JOBS (6), TRUTH_ONLY
# (comma-separated models; default all). Results: $OUT/truth (truth.md, truth.json, progress.log, records/, logs/).
# TRUTH_DRY=1: the same flow on a CPU machine (no install, gpu_truth.py --dry-run; PYTHON=.venv/bin/python).
set -uo pipefail
start=$(date +%s)
dry=""
if [ -n "${TRUTH_DRY:-}" ]; then dry=--dry-run; else source bench/gpu_install.sh || exit 1; fi
py=${PYTHON:-python3}
mkdir -p /tmp/truth
for g in .truth/*/; do [ -f "$g/manifest.json" ] && cp -r "$g" /tmp/truth/; done
runs=${TRUTH_RUNS:-current hindsight before}
[ -d .base/precision_doctor ] || runs=${runs/before/}
limit=$(( ${TRUTH_LIMIT_S:-520} - ($(date +%s) - start) - 10 ))
$py -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
# shellcheck disable=SC2086  # runs, sizes: word lists
$py bench/gpu_truth.py $dry --data /tmp/truth --out "$OUT/truth" --work /tmp/truth-work --runs $runs \
  --sizes ${TRUTH_SIZES:-24 8} --jobs "${TRUTH_JOBS:-6}" --limit-s "$limit" --timeout-s 420 --package-dir .base \
  ${TRUTH_ONLY:+--only "$TRUTH_ONLY"} 2>&1 | grep --line-buffered -v "^20[0-9-]* [0-9:.]* \[" |
  tee /tmp/truth-progress.log | grep --line-buffered -v "\] running "  # the 10 s lines: in progress.log only
mkdir -p "$OUT/truth" && cp /tmp/truth-progress.log "$OUT/truth/progress.log"
rm -rf /tmp/truth-work
