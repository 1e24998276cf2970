#!/bin/bash
# Run the demo and a planted model with the code of one commit, for bench/same_results.py and bench/same_words.sh.
# usage: bench/same_results.sh COMMIT OUT_DIR   (the commit's code is unpacked into /tmp/pd-<commit>)
# What runs (each deterministic: seeded generated samples or the shipped example files, no time budget):
#   demo     diagnose examples/three_defects.onnx on its 6 shipped sample files (the README's first run)
#   planted  diagnose of planted.dynamic_image() (dynamic batch, height and width) on generated samples, through the
#            settings strings --input-shapes and --val-range (parsed into shapes and ranges, also for the held-out ones)
#   batch    a one-model batch of the same planted model, its recipe giving the same settings (batch/dynamic_image/)
set -e
COMMIT=$1; OUT=$(realpath -m "$2")
V=$(pwd)/.venv/bin/python  # not realpath: the venv's python is a link to its base python
CODE=/tmp/pd-$(git rev-parse --short "$COMMIT")
rm -rf "$CODE" "$OUT"; mkdir -p "$CODE" "$OUT/zoo"
git archive "$COMMIT" | tar -x -C "$CODE"
cd "$CODE"
run() { PYTHONPATH="$CODE" "$V" -c "import sys; from precision_doctor.cli import main; sys.argv[0] = 'precision-doctor'; sys.exit(main())" "$@"; }
PYTHONPATH="$CODE" "$V" examples/make_examples.py >/dev/null
PYTHONPATH="$CODE" "$V" - "$OUT/zoo" <<'PY'
import json, sys
import onnx
from precision_doctor import planted
onnx.save(planted.dynamic_image().model, f"{sys.argv[1]}/dynamic_image.onnx")
recipe = {"inputs": {"samples": 6, "seed": 3, "input_shapes": ["x:[1,3,48,192]"], "val_range": ["x:[0,1]"]},
          "tolerance": {"atol": 1e-2, "rtol": 1e-2}, "precision": "fp16"}
json.dump(recipe, open(f"{sys.argv[1]}/dynamic_image.json", "w"))
PY
run diagnose examples/three_defects.onnx $(for f in examples/three_defects_inputs/*.npz; do printf -- '--inputs %s ' "$f"; done) \
  --precision fp16 --atol 1e-2 --rtol 1e-2 --out "$OUT/demo" > "$OUT/demo.stdout" 2>&1 || echo "demo exit $?"
run diagnose "$OUT/zoo/dynamic_image.onnx" --samples 6 --seed 3 --input-shapes 'x:[1,3,48,192]' --val-range 'x:[0,1]' \
  --atol 1e-2 --rtol 1e-2 --out "$OUT/planted" > "$OUT/planted.stdout" 2>&1 || echo "planted exit $?"
run batch "$OUT/zoo" --out "$OUT/batch" > "$OUT/batch.stdout" 2>&1 || echo "batch exit $?"
