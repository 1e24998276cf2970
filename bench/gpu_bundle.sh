# The large-model benchmark on the GPU machine (issue 35), in device calls of at most 64 MiB each.
#
# Here:   WHEELS=1 bash bench/gpu_bundle.sh make .bundle-a isnet-1024   # DIR/pNN: one tar in 52 MiB parts (git-
#         bash bench/gpu_bundle.sh make .bundle-b mpnet-base             # ignored): the named models of .large (and
#                                                  with WHEELS=1 onnxruntime-gpu's wheel from .stage, made by
#                                                  ../shared/device/stage-ort-gpu.sh, and .whl's wheels)
# There:  bash bench/gpu_bundle.sh add DIR/pNN   # one call per part, back to back: appended to /tmp/b/bundle.tar
#         bash bench/gpu_bundle.sh unpack        # unpacks and checks it, installs its wheels into /tmp/site
#         TAG=a LIMIT=1080 bash bench/gpu_bundle.sh start [gpu_truth.py arguments...]
#                                                # copies the tree to /tmp/repo (once) and starts bench/gpu_truth.py
#                                                  there in its own session (it outlives the call), out in /tmp/o-TAG;
#                                                  a later TAG waits for the earlier ones (one GPU, one run); AFTER=TAG
#                                                  queues it once that TAG has begun (the order of the starts)
#                                                  (STACKS=1: every process's stacks sampled, bench/stack_sampler)
#         TAG=a bash bench/gpu_bundle.sh collect # the run's state; its tables and logs into $OUT when it has ended
# So a second bundle's parts travel while the first bundle's models run.
set -euo pipefail
tag=${TAG:-a}
case "${1:?make, add, unpack, start or collect}" in
make)
  dest=${2:?the bundle folder, e.g. .bundle-a}; shift 2
  rm -rf /tmp/bund "$dest" && mkdir -p /tmp/bund/large "$dest"
  if [ -n "${WHEELS:-}" ]; then
    cat $(ls -d .stage/p* | sort -V | sed 's|$|/part*|') > "/tmp/bund/$(cat "$(ls -d .stage/p* | sort -V | tail -1)"/WHEEL_NAME)"
    cp .whl/*.whl /tmp/bund/
  fi
  cp .large/manifest.json /tmp/bund/large/
  for m in "$@"; do cp -r ".large/$m" /tmp/bund/large/; done
  (cd /tmp/bund && find . -type f ! -name SHA256SUMS | sort | xargs sha256sum > SHA256SUMS)
  tar -cf - -C /tmp/bund . | split -b 52m -d -a 2 - "$dest/part"
  for f in "$dest"/part*; do mkdir -p "$dest/p${f##*part}" && mv "$f" "$dest/p${f##*part}/"; done
  rm -rf /tmp/bund
  ls "$dest" ;;
add)
  mkdir -p /tmp/b && cat "${2:?part}"/part* >> /tmp/b/bundle.tar && ls -l /tmp/b/bundle.tar ;;
unpack)
  # a bundle's manifest names the models .large had when it was made: merged into the one unpacked before, not over it
  [ -f /tmp/b/large/manifest.json ] && mv /tmp/b/large/manifest.json /tmp/b/manifest.before.json
  tar -xf /tmp/b/bundle.tar -C /tmp/b && rm /tmp/b/bundle.tar
  (cd /tmp/b && sha256sum -c --quiet SHA256SUMS) && echo "bundle checked"
  if [ -f /tmp/b/manifest.before.json ]; then
    python3 - <<'PY'
import json
before, new = (json.load(open(p)) for p in ("/tmp/b/manifest.before.json", "/tmp/b/large/manifest.json"))
names = {m["name"] for m in new["models"]}
new["models"] += [m for m in before["models"] if m["name"] not in names]
json.dump(new, open("/tmp/b/large/manifest.json", "w"), indent=1)
PY
    rm /tmp/b/manifest.before.json
  fi
  if ls /tmp/b/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/b/*.whl && rm /tmp/b/*.whl
  fi
  ls /tmp/b/large ;;
start)
  shift
  if [ ! -d /tmp/repo ]; then
    mkdir -p /tmp/repo
    tar --exclude='./.bundle*' --exclude=./.stage --exclude=./.truth --exclude=./.large --exclude=./.venv \
      --exclude=./.whl -cf - . | tar -xf - -C /tmp/repo
  fi
  cd /tmp/repo
  export PYTHONPATH=/tmp/site:/tmp/repo${STACKS:+:/tmp/repo/bench/stack_sampler} PYTHONUNBUFFERED=1
  export PD_STACK_SAMPLES=${STACKS:+/tmp/o-$tag-stacks}  # STACKS=1: where each process's time goes (stack_sampler)
  # one harness at a time (a queue: flock), so that a later start waits for the GPU instead of sharing it
  # (AFTER=TAG: queued only once that TAG's run has begun, so that the queue keeps the order of the starts)
  after=${AFTER:+/tmp/o-$AFTER}
  setsid nohup bash -c 'while [ -n "$0" ] && [ ! -d "$0" ]; do sleep 2; done; exec flock /tmp/gpu-queue.lock "$@"' \
    "$after" python3 bench/gpu_truth.py --data /tmp/b/large --out "/tmp/o-$tag" --work "/tmp/w-$tag" \
    --limit-s "${LIMIT:-1080}" "$@" > "/tmp/o-$tag.log" 2>&1 < /dev/null &
  sleep "${WAIT:-5}"; cat "/tmp/o-$tag.log" ;;
collect)
  tail -4 "/tmp/o-$tag.log"; tail -3 "/tmp/o-$tag"/logs/*.log 2>/dev/null || true
  nvidia-smi --query-gpu=memory.used --format=csv,noheader
  if [ -f "/tmp/o-$tag/truth.json" ]; then
    for f in truth.json truth.md; do cp "/tmp/o-$tag/$f" "$OUT/$tag-$f"; done
    cp "/tmp/o-$tag.log" "$OUT/$tag-run.log"
    for f in "/tmp/o-$tag"/logs/*.log /tmp/o-"$tag"-stacks-*.folded; do [ -f "$f" ] && cp "$f" "$OUT/$tag-$(basename "$f")"; done
  fi ;;
esac
