# The large-model benchmark on the GPU machine (issue 35), in device calls of at most 64 MiB each.
#
# Here:   bash bench/gpu_bundle.sh make          # .bundle/pNN: onnxruntime-gpu's wheel (.stage, from
#                                                  ../shared/device/stage-ort-gpu.sh), .whl and .large, one tar in
#                                                  52 MiB parts (git-ignored; each part and the tree fit one call)
# There:  bash bench/gpu_bundle.sh add pNN       # one call per part, back to back: appended to /tmp/b/bundle.tar
#         LIMIT=1080 bash bench/gpu_bundle.sh start [gpu_truth.py arguments...]
#                                                # unpacks and checks it, installs the wheels into /tmp/site, copies
#                                                  the tree to /tmp/repo and starts bench/gpu_truth.py there in its
#                                                  own session (it outlives the call), output in /tmp/o
#         bash bench/gpu_bundle.sh collect       # the run's state; its tables and logs into $OUT when it has ended
set -euo pipefail
case "${1:?make, add, start or collect}" in
make)
  rm -rf /tmp/bund .bundle && mkdir -p /tmp/bund/large .bundle
  cat $(ls -d .stage/p* | sort -V | sed 's|$|/part*|') > "/tmp/bund/$(cat "$(ls -d .stage/p* | sort -V | tail -1)"/WHEEL_NAME)"
  cp .whl/*.whl /tmp/bund/
  cp -r .large/. /tmp/bund/large/
  (cd /tmp/bund && find . -type f ! -name SHA256SUMS | sort | xargs sha256sum > SHA256SUMS)
  tar -cf - -C /tmp/bund . | split -b 52m -d -a 2 - .bundle/part
  for f in .bundle/part*; do mkdir -p ".bundle/p${f##*part}" && mv "$f" ".bundle/p${f##*part}/"; done
  rm -rf /tmp/bund
  ls .bundle ;;
add)
  mkdir -p /tmp/b && cat ".bundle/${2:?part}"/part* >> /tmp/b/bundle.tar && ls -l /tmp/b/bundle.tar ;;
start)
  shift
  tar -xf /tmp/b/bundle.tar -C /tmp/b && rm /tmp/b/bundle.tar
  (cd /tmp/b && sha256sum -c --quiet SHA256SUMS) && echo "bundle checked"
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/b/*.whl
  mkdir -p /tmp/repo
  tar --exclude=./.bundle --exclude=./.stage --exclude=./.truth --exclude=./.large --exclude=./.venv -cf - . | tar -xf - -C /tmp/repo
  cd /tmp/repo
  export PYTHONPATH=/tmp/site:/tmp/repo PYTHONUNBUFFERED=1
  nvidia-smi -L
  setsid nohup python3 bench/gpu_truth.py --data /tmp/b/large --out /tmp/o --work /tmp/w --limit-s "${LIMIT:-1080}" \
    "$@" > /tmp/o.log 2>&1 < /dev/null &
  sleep 20; cat /tmp/o.log ;;
collect)
  tail -5 /tmp/o.log; tail -3 /tmp/o/logs/*.log 2>/dev/null || true
  nvidia-smi --query-gpu=memory.used --format=csv,noheader
  if [ -f /tmp/o/truth.json ]; then cp /tmp/o/truth.json /tmp/o/truth.md /tmp/o.log "$OUT"/; cp /tmp/o/logs/*.log "$OUT"/ 2>/dev/null || true; fi ;;
esac
