"""The replay as one call: build fixtures, run the catalogue, compare with the known failures."""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from badinputs import fixtures
from badinputs.cases import catalogue
from badinputs.harness import Case, Outcome, run_all, table, uses
from badinputs.known import KNOWN_FAILING


def select(cases: Sequence[Case], only: Sequence[str] = ()) -> list[Case]:
    return [c for c in cases if not only or any(o in c.id for o in only)]


def replay(only: Sequence[str] = (), jobs: int = 2, keep: Path | None = None, verbose: bool = False,
           ids: Sequence[str] | None = None) -> list[Outcome]:
    """Run the cases whose id contains one of `only` (all by default), or exactly `ids`."""
    _sigint_reaches_children()
    with tempfile.TemporaryDirectory(prefix="pd-bad-fixtures-") as tmp:
        root = Path(tmp)
        fixtures.build(root)
        cases = catalogue()
        cases = [c for c in cases if c.id in ids] if ids is not None else select(cases, only)
        if any(uses(c, "run_ok") for c in cases):
            fixtures.build_run(root)
        if any(uses(c, "bomb.npz") for c in cases):
            fixtures.build_bomb(root)
        if any(uses(c, "wide.npz") or uses(c, "wide.json") for c in cases):
            fixtures.build_wide(root)
        if any(uses(c, "m0.npz") for c in cases):
            fixtures.build_million(root)

        def show(o: Outcome) -> None:
            if verbose:
                mark = "ok  " if o.passed else "FAIL"
                print(f"{mark} {o.case.id:<45} {o.elapsed_s:5.1f} s", flush=True)

        return run_all(cases, root, jobs=jobs, on_done=show, keep=keep)


def _sigint_reaches_children() -> None:
    """A shell starts a background job with SIGINT ignored, and the CLI processes would inherit that: the
    Ctrl-C cases then see a run that never stops. Give SIGINT its default handling, as in a terminal."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def compare_known(outcomes: Sequence[Outcome]) -> tuple[list[str], list[str]]:
    """(failing cases not in KNOWN_FAILING, known failures that now pass)."""
    new = [o.case.id for o in outcomes if not o.passed and o.case.id not in KNOWN_FAILING]
    fixed = [o.case.id for o in outcomes if o.passed and o.case.id in KNOWN_FAILING]
    return new, fixed


def to_json(outcomes: Sequence[Outcome]) -> list[dict]:
    return [{
        "id": o.case.id, "command": o.case.command, "passed": o.passed, "elapsed_s": round(o.elapsed_s, 2),
        "failures": [{"class": k, "detail": d} for k, d in o.failures], "where": o.case.where,
        "steps": [{"args": list(map(str, r.step.args)), "code": r.code, "stderr": r.err[-2000:],
                   "stdout": r.out[-1000:]} for r in o.results],
    } for o in outcomes]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tests/badinputs", description=__doc__)
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    ap.add_argument("--only", action="append", default=[], help="run cases whose id contains this; repeatable")
    ap.add_argument("--json", type=Path, help="write every result here")
    ap.add_argument("--keep", type=Path, help="copy each case directory here afterwards (for debugging)")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per case as it ends")
    ap.add_argument("--code", type=Path, help="run the CLI of the checkout in this directory (e.g. /work/main), "
                    "not the installed one")
    args = ap.parse_args(argv)
    if args.code:
        os.environ["PYTHONPATH"] = str(args.code.resolve())
    t0 = time.monotonic()
    outcomes = replay(args.only, args.jobs, args.keep, args.verbose)
    print(table(outcomes))
    new, fixed = compare_known(outcomes)
    print(f"\nreplay took {time.monotonic() - t0:.0f} s with {args.jobs} job(s)")
    if args.json:
        args.json.write_text(json.dumps(to_json(outcomes), indent=1))
    if fixed:
        print(f"now passing, remove from known.py: {', '.join(fixed)}")
    if new:
        print(f"NEW failures (not in known.py): {', '.join(new)}")
    return 1 if new else 0
