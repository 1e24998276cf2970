"""Compare report.md, report.html and the printed CLI output of two runs of bench/same_results.sh, each rendered by its
own commit's code, with times, durations, dates and the run directories' paths masked (`MASKS`). For commits whose
report.json versions differ, where bench/same_words.sh (one commit's code rendering the other's run directories)
cannot read both.

usage: python bench/same_pages.py BEFORE_OUT AFTER_OUT   (each as bench/same_results.sh wrote it)"""
import csv
import difflib
import io
import re
import sys
from pathlib import Path

FILES = ["demo.stdout", "demo/report.md", "demo/report.html", "planted.stdout", "planted/report.md",
         "planted/report.html", "batch.stdout", "batch/dynamic_image/report.md", "batch/dynamic_image/report.html",
         "batch/summary.html", "batch/summary.csv"]
MASKS = [
    (r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d)?(\+00:00|Z| UTC)?", "DATE"),
    (r"\[ *\d+(\.\d+)?s\]", "[T]"),  # the CLI's progress lines
    (r"\d+(\.\d+)?(e-?\d+)? ?(ms|s|min|h)\b", "DUR"),
    (r'"(elapsed_s|at_s|seconds|search_s|before_search_s|after_search_s)": ?[-\d.e]+', r'"\1": DUR'),
    (r"(?:/tmp/|(?:\.\./)+)pd-[a-z0-9]+", "CODE"),
    (r'data-v="[-\d.e]+">DUR', 'data-v="DUR">DUR'),  # report.html's sort key of a duration cell
]


def masked(path: Path, root: Path) -> list[str]:
    text = path.read_text(encoding="utf-8").replace(str(root.resolve()), "OUT")
    if path.suffix == ".csv":  # summary.csv's seconds column
        rows = list(csv.reader(io.StringIO(text)))
        col = rows[0].index("elapsed_s") if rows and "elapsed_s" in rows[0] else None
        for row in rows[1:]:
            if col is not None and col < len(row):
                row[col] = "DUR"
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(rows)
        text = out.getvalue()
    for pat, rep in MASKS:
        text = re.sub(pat, rep, text)
    return text.splitlines()


before, after = Path(sys.argv[1]), Path(sys.argv[2])
bad = 0
for f in FILES:
    a, b = masked(before / f, before), masked(after / f, after)
    d = [line for line in difflib.unified_diff(a, b, "before", "after", n=0, lineterm="") if line[:1] in "+-"][2:]
    print(f"{f}: {'identical (masked)' if not d else f'{len(d)} differing lines'} ({len(b)} lines)")
    for line in d[:12]:
        print("   ", line[:200])
    bad += bool(d)
sys.exit(1 if bad else 0)
