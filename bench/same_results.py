"""Compare two runs of bench/same_results.sh (report.json, summary.json/csv, batch_entry.json), times and paths aside.

usage: python bench/same_results.py BEFORE_OUT AFTER_OUT [FILE ...]   (each as bench/same_results.sh wrote it)

A report.json of schema_version 3 (its keys grouped by part: `search.evaluations`, `answer.fallback_nodes`, ...) is
compared by its keys lifted back to the top as schema_version 2 had them (`flat`), so that a report of each version
compares key by key; `schema_version` itself and the order of the top keys are left out of the comparison."""
import csv
import json
import re
import sys
from pathlib import Path

TIMES = {"elapsed_s", "at_s", "created", "updated", "capture_s", "time_s", "wall_s", "phase_s", "seconds", "before_search_s",
         "search_s", "after_search_s"}


def clean(v, roots):
    if isinstance(v, dict):
        return {k: clean(x, roots) for k, x in v.items() if k not in TIMES}
    if isinstance(v, list):
        return [clean(x, roots) for x in v]
    if isinstance(v, str):
        for r in roots:
            v = v.replace(r, "OUT")
        v = re.sub(r"(?:/tmp/|(?:\.\./)+)pd-[a-z0-9]+", "CODE", v)  # the checkout each run used (absolute or relative)
    return v


PARTS = ("search", "answer", "checks", "promise", "analysis", "tensorrt", "invocation")
RENAMED = {("search", "rounds"): "search_rounds", ("tensorrt", "check"): "trt_check", ("tensorrt", "engine"): "engine"}
INVOCATION = ("origin", "directory", "spec")  # what schema 2's `invocation` held; its other keys were at the top


def flat(data):
    """A schema-3 report.json with its parts' keys at the top, as schema 2 had them (other files as they are)."""
    if not isinstance(data, dict) or data.get("schema_version") != 3:
        return data
    out = {k: v for k, v in data.items() if k not in PARTS}
    for part in PARTS:
        for k, v in (data.get(part) or {}).items():
            if part == "invocation" and k in INVOCATION:
                out.setdefault("invocation", {})[k] = v
            else:
                out[RENAMED.get((part, k), k)] = v
    return out


def load(path, roots):
    if path.suffix == ".csv":
        rows = list(csv.DictReader(path.open()))
        return [clean({k: x for k, x in r.items()}, roots) for r in rows]
    data = flat(json.loads(path.read_text()))
    if isinstance(data, dict) and "verdict" in data:  # a report: its version and order of keys aside
        data.pop("schema_version", None)
        data = dict(sorted(data.items()))
    return clean(data, roots)


def diff(a, b, where=""):
    if type(a) is not type(b):
        yield f"{where}: {a!r:.80} != {b!r:.80}"
    elif isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                yield f"{where}.{k}: only in {'after' if k not in a else 'before'}"
            else:
                yield from diff(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        if len(a) != len(b):
            yield f"{where}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            yield from diff(x, y, f"{where}[{i}]")
    elif a != b:
        yield f"{where}: {a!r:.80} != {b!r:.80}"


before, after = Path(sys.argv[1]), Path(sys.argv[2])
files = sys.argv[3:] or ["demo/report.json", "planted/report.json", "batch/dynamic_image/report.json", "batch/summary.json",
                         "batch/summary.csv", "batch/dynamic_image/batch_entry.json"]
bad = 0
for f in files:
    a, b = load(before / f, [str(before.resolve())]), load(after / f, [str(after.resolve())])
    d = list(diff(a, b))
    if not d and json.dumps(a) != json.dumps(b):
        d = ["same keys and values, in another order"]
    print(f"{f}: {'identical (times and paths aside)' if not d else f'{len(d)} difference(s)'}")
    for line in d[:20]:
        print("   ", line)
    bad += bool(d)
sys.exit(1 if bad else 0)
