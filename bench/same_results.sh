#!/bin/bash
# Run the demo and one zoo model (a one-model batch) with the code of one commit, for bench/same_results.py.
# usage: bench/same_results.sh COMMIT OUT_DIR [ZOO_DIR]   (ZOO_DIR: `precision-doctor zoo fetch --dest ZOO_DIR
#        --name ppocr-mobile-cls`; default /tmp/pdzoo). The commit's code is unpacked into /tmp/pd-<commit>.
set -e
COMMIT=$1; OUT=$(realpath -m "$2"); ZOO=${3:-/tmp/pdzoo}
V=$(pwd)/.venv/bin/python  # not realpath: the venv's python is a link to its base python
CODE=/tmp/pd-$(git rev-parse --short "$COMMIT")
rm -rf "$CODE" "$OUT"; mkdir -p "$CODE" "$OUT"
git archive "$COMMIT" | tar -x -C "$CODE"
cd "$CODE"
run() { PYTHONPATH="$CODE" "$V" -c "import sys; from precision_doctor.cli import main; sys.argv[0] = 'precision-doctor'; sys.exit(main())" "$@"; }
PYTHONPATH="$CODE" "$V" examples/make_examples.py >/dev/null
run diagnose examples/three_defects.onnx $(for f in examples/three_defects_inputs/*.npz; do printf -- '--inputs %s ' "$f"; done) \
  --precision fp16 --atol 1e-2 --rtol 1e-2 --out "$OUT/demo" > "$OUT/demo.stdout" 2>&1 || echo "demo exit $?"
run batch "$ZOO" --only ppocr-mobile-cls --out "$OUT/batch" > "$OUT/batch.stdout" 2>&1 || echo "batch exit $?"
