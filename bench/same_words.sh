#!/bin/bash
# The words of two commits on the same runs: report.md, report.html, the CLI's printed outcome (`report`), the
# service's brief (digest), the batch row's message, summary.csv/html and `compare`'s printed verdict, rendered by each
# commit's code from the run directories bench/same_results.sh wrote (so times and paths are the same for both): the
# demo, the planted model diagnosed from the CLI and the same model's batch run.
# usage: bench/same_words.sh BEFORE_COMMIT AFTER_COMMIT RUNS_DIR OUT_DIR   (RUNS_DIR: same_results.sh's OUT_DIR)
# Prints "identical" or the differing files; exit 1 on any difference.
set -e
RUNS=$(realpath "$3"); OUT=$(realpath -m "$4")
V=$(pwd)/.venv/bin/python  # not realpath: the venv's python is a link to its base python
rm -rf "$OUT"; mkdir -p "$OUT"
for which in before after; do
  COMMIT=$([ $which = before ] && echo "$1" || echo "$2")
  CODE=/tmp/pd-words-$which
  rm -rf "$CODE"; mkdir -p "$CODE"
  git archive "$COMMIT" | tar -x -C "$CODE"
  mkdir -p "$OUT/$which"
  cp -r "$RUNS/demo" "$OUT/$which/demo"; cp -r "$RUNS/planted" "$OUT/$which/planted"
  cp -r "$RUNS/batch/dynamic_image" "$OUT/$which/zoo"
  for run in demo planted zoo; do
    (cd "$OUT/$which" && PYTHONPATH="$CODE" "$V" -c "import sys; from precision_doctor.cli import main; sys.argv[0] = 'precision-doctor'; sys.exit(main())" \
      report "$run" > "$run.stdout" 2>&1 || echo "report $run exit $?" >> "$run.stdout")
    (cd "$OUT/$which" && PYTHONPATH="$CODE" "$V" - "$run" > "$run.words.json" <<'PY'
import json, re, sys
from pathlib import Path
from precision_doctor.batch.jobs import row_from_report
try:  # the service's summary: render/brief.py's Brief, render/digest.py's Digest before it
    from precision_doctor.render.brief import brief as digest
except ImportError:
    from precision_doctor.render.digest import digest
from precision_doctor.render.summary import summary_csv, summary_html
from precision_doctor.results.report import Report
run = Path(sys.argv[1])
report = Report.from_json(json.loads((run / "report.json").read_text()))
row = row_from_report(run.name, report)
html = re.sub(r"updated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "updated TIME", summary_html([row]))
print(json.dumps({"digest": digest(report).to_json(), "row": row.columns(), "summary_csv": summary_csv([row]),
                  "summary_html": html}, indent=1, sort_keys=True))
PY
    )
  done
  (cd "$CODE" && PYTHONPATH="$CODE" "$V" examples/make_examples.py >/dev/null && PYTHONPATH="$CODE" "$V" -c \
    "import sys; from precision_doctor.cli import main; sys.argv[0] = 'precision-doctor'; sys.exit(main())" compare \
    examples/three_defects.onnx $(for f in examples/three_defects_inputs/*.npz; do printf -- '--inputs %s ' "$f"; done) \
    --precision fp16 --atol 1e-2 --rtol 1e-2 --out "$OUT/$which/compare" 2>/dev/null | sed "s#$OUT/$which#OUT#g" \
    > "$OUT/$which/compare.stdout" || true)
  rm -rf "$OUT/$which/compare"
done
bad=0
for f in demo/report.md demo/report.html demo.stdout demo.words.json planted/report.md planted/report.html \
         planted.stdout planted.words.json zoo/report.md zoo/report.html zoo.stdout zoo.words.json compare.stdout; do
  if cmp -s "$OUT/before/$f" "$OUT/after/$f"; then echo "$f: identical ($(wc -c < "$OUT/after/$f") bytes)"
  else echo "$f: DIFFERS"; diff "$OUT/before/$f" "$OUT/after/$f" | head -10; bad=1; fi
done
exit $bad
