#!/usr/bin/env bash
# GPU session B (issue #10, phase 2): does the emulator with the ort-cuda rules (fusions included)
# match the real GPU, and does the default pipeline's answer hold on the GPU? Two calls on the H100,
# each the last of the device calls that stage onnxruntime-gpu (bench/gpu_install.sh), each < 8 min:
#
#   bash bench/gpu_session_b.sh pipeline   # 1: the default pipeline on the zoo (batch --backend auto:
#                                          #    emulate + confirm on ort-cuda), its answers on the samples
#                                          #    searched and on unseen ones, gated evaluation vs new session
#   bash bench/gpu_session_b.sh fidelity   # 2: per zoo model and planted case, the emulator's share
#                                          #    (standard, ort-cuda-nodes, ort-cuda) against the real mixed
#                                          #    graph on the same sets and samples (all-FP16, the default
#                                          #    answers of call 1, random sets), node by node, and node
#                                          #    fixtures of the fused patterns (fixture.npz)
#
# carry: .stage/pN (the wheel's last part, unless /tmp/site is still there), zoo (fetched), .whl (the
# polygraphy wheel: diagnose writes polygraphy's inputs.json/reference_outputs.json), and for call 2
# .gpu/b/answers.json (call 1's answers.json; without it call 2 checks all-FP16 and random sets only).
# Results land in $OUT. On a machine without a GPU, `bash bench/gpu_session_b.sh cpu [DIR]` runs both
# steps on ORT's CPU provider (plumbing only) into DIR (default bench/out/session_b_cpu).
set -uo pipefail
step=${1:-}
PY=${PD_PYTHON:-python3}  # the Python to run (here: .venv/bin/python)
ZOO=$(cd "${ZOO:-zoo}" && pwd) || { echo "no zoo folder (ZOO=${ZOO:-zoo})" >&2; exit 2; }
if [ "$step" = cpu ]; then
  OUT=$(mkdir -p "${2:-bench/out/session_b_cpu}" && cd "${2:-bench/out/session_b_cpu}" && pwd)
  mkdir -p "$OUT/pipeline" "$OUT/fidelity"
  export PYTHONUNBUFFERED=1
  (cd bench && $PY gpu_session_b.py --zoo "$ZOO" --cpu --jobs 2 --unseen 2 --seconds "${BATCH_SECONDS:-900}" \
     --out "$OUT/pipeline" --batch-dir "$OUT/batch" -- --only silero-vad-16k) || exit 1
  (cd bench && $PY gpu_nodewise.py --zoo "$ZOO" --only silero-vad-16k,deep_stack_one_bad,softmax_no_max --planted \
     --cpu --rules standard,ort-cuda-nodes,ort-cuda --answers-json "$OUT/pipeline/answers.json" \
     --out "$OUT/fidelity") || exit 1
  exit 0
fi
source bench/gpu_install.sh || exit 1
$PY -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
cd bench
case "$step" in
  pipeline)
    # the batch gets 330 s; then each model's answer is checked on the GPU (about 1-2 min in all)
    timeout -s INT 470 $PY gpu_session_b.py --zoo "$ZOO" --out "$OUT" --jobs 4 --seconds "${BATCH_SECONDS:-330}" ;;
  fidelity)
    answers=()  # call 1's answers, and session A's batch answers where carried
    [ -f ../.gpu/b/answers.json ] && answers+=(--answers-json ../.gpu/b/answers.json)
    for dir in ../.gpu/answers ../.gpu/answers-strict; do [ -d "$dir" ] && answers+=(--answers "$dir"); done
    timeout -s INT 470 $PY gpu_nodewise.py --zoo "$ZOO" --planted --rules standard,ort-cuda-nodes,ort-cuda \
      --lowp-rules standard,ort-cuda-nodes,ort-cuda "${answers[@]}" --deadline 380 --out "$OUT" | tee "$OUT/nodewise.log" ;;
  *)
    echo "usage: bash bench/gpu_session_b.sh pipeline|fidelity|cpu [DIR]" >&2; exit 2 ;;
esac
