"""Runs the cases: each in its own temp directory, the CLI as a subprocess, then the checks.

A case is one or more steps (CLI invocations), optionally preceded by `prep` steps whose outputs
count as the user's files (a finished batch, an interrupted run). Checks, each with its class:

- `timeout`            a step ran past its time limit
- `traceback`          "Traceback" on stderr or stdout
- `exit code`          the exit code is not one the case accepts
- `not one line`       an error (exit 2) or interruption (130) printed more than one line on stderr
                       (a second line is allowed when it points to a log file; the progress lines a run prints
                       where stderr is not a terminal, `cli.shared.PROGRESS_LINE`, are not counted)
- `message unclear`    the message does not name the flag/file/tensor, or says something it must not
- `user file changed`  a file that existed before the run changed or vanished
- `behaviour`          the case's own check (locks, resume, checkpoint, directories left behind)
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from badinputs.fixtures import child_env
from precision_doctor.cli.shared import PROGRESS_LINE

_LOST = re.compile(r"\S  +\S|:,")  # what is left where rich took a '[...]' for markup
CLASSES = ("timeout", "traceback", "exit code", "not one line", "message unclear", "user file changed", "behaviour")
STEP_TIMEOUT_S = 120.0
Names = Sequence["str | tuple[str, ...]"]  # each entry must appear; a tuple: one of its members must


@dataclass
class Step:
    """One CLI invocation (args after `precision-doctor`), run with the case directory as cwd."""

    args: Sequence[str]
    expect: frozenset[int] = frozenset({2})
    names: Names = ()
    absent: Sequence[str] = ()
    signal_when: str | None = None  # a glob (relative to the case dir): once it exists, send `signal`
    signal: int = signal.SIGINT
    start_when: str | None = None  # concurrent cases: start once this glob exists (the first run is under way)


@dataclass
class Result:
    """What one step did."""

    step: Step
    code: int | None
    out: str
    err: str
    pid: int
    elapsed_s: float


@dataclass
class Case:
    """A bad input: what to run, what is right, and which module must handle it."""

    id: str
    steps: list[Step]
    use: Sequence[str] = ()  # fixtures to copy into the case dir (besides those named in args)
    setup: Callable[[Path], None] | None = None  # after the copies, before prep
    prep: list[Step] = field(default_factory=list)  # runs before the snapshot of user files
    after_prep: Callable[[Path], None] | None = None  # e.g. cut a checkpoint line as a kill would
    owned: Sequence[str] = ()  # globs of pre-existing files the tool may rewrite (its own outputs)
    check: Callable[[Path, list[Result]], list[str]] | None = None  # -> "behaviour" failures
    concurrent: bool = False
    where: str = ""  # the module that must handle it (the phase-2 plan), shown with failures

    @property
    def command(self) -> str:
        args = self.steps[0].args
        return args[0] if args and not args[0].startswith("-") else "(none)"


@dataclass
class Outcome:
    case: Case
    failures: list[tuple[str, str]]  # (class, detail)
    results: list[Result]
    elapsed_s: float

    @property
    def passed(self) -> bool:
        return not self.failures


def case(id: str, *args: str, expect: Sequence[int] = (2,), names: Names = (), absent: Sequence[str] = (),
         **kw) -> Case:
    """A one-step case."""
    return Case(id, [Step(list(args), frozenset(expect), names, absent)], **kw)


# -- running ------------------------------------------------------------------------------------------


def _wrap(cmd: list[str]) -> list[str]:
    """As root, drop the capabilities that bypass file permissions: read-only directories then refuse
    writes as they do for a user (setpriv is in util-linux)."""
    if os.geteuid() == 0 and shutil.which("setpriv"):
        return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--", *cmd]
    return cmd


def _popen(step: Step, cwd: Path) -> subprocess.Popen:
    cmd = _wrap([sys.executable, "-m", "precision_doctor", *map(str, step.args)])
    return subprocess.Popen(cmd, cwd=cwd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)


def _finish(step: Step, proc: subprocess.Popen, cwd: Path, t0: float) -> Result:
    """Wait for `proc` (sending the step's signal to its process group, as a terminal's Ctrl-C does,
    once `signal_when` exists); kill it at the time limit."""
    deadline = t0 + STEP_TIMEOUT_S
    if step.signal_when:
        while proc.poll() is None and time.monotonic() < deadline:
            if any(cwd.glob(step.signal_when)):
                time.sleep(0.05)
                _killpg(proc, step.signal)
                break
            time.sleep(0.02)
    try:
        out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        _killpg(proc, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    return Result(step, code, out, err, proc.pid, time.monotonic() - t0)


def _killpg(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def run_steps(steps: Sequence[Step], cwd: Path, concurrent: bool = False) -> list[Result]:
    if not concurrent:
        out = []
        for s in steps:
            t0 = time.monotonic()
            out.append(_finish(s, _popen(s, cwd), cwd, t0))
        return out
    started: list[tuple[Step, subprocess.Popen, float]] = []
    for s in steps:
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while s.start_when and not any(cwd.glob(s.start_when)) and time.monotonic() < deadline:
            if all(p.poll() is not None for _, p, _ in started):
                break  # the others ended before it appeared: start anyway, the checks will tell
            time.sleep(0.02)
        started.append((s, _popen(s, cwd), time.monotonic()))
    return [_finish(s, p, cwd, t0) for s, p, t0 in started]


# -- checks -------------------------------------------------------------------------------------------


def _hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under `root`."""
    return {str(p.relative_to(root)): _hash(p) for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def _lines(text: str) -> list[str]:
    """The lines of `text` that say something other than the progress of a run."""
    return [ln for ln in text.splitlines() if ln.strip() and not PROGRESS_LINE.match(ln)]


def _has(text: str, name: str | tuple[str, ...]) -> bool:
    return any(n in text for n in name) if isinstance(name, tuple) else name in text


def check_step(r: Result) -> list[tuple[str, str]]:
    s, fails = r.step, []
    if r.code is None:
        return [("timeout", f"still running after {STEP_TIMEOUT_S:.0f} s")]
    if "Traceback" in r.err or "Traceback" in r.out:
        last = next((ln for ln in reversed(_lines(r.err or r.out))), "")
        fails.append(("traceback", last[:160]))
    if r.code not in s.expect:
        want = "/".join(map(str, sorted(s.expect)))
        fails.append(("exit code", f"exit {r.code}, expected {want}; {_brief(r)}"))
    if r.code in (2, 130) and "Traceback" not in r.err:
        lines = _lines(r.err)
        extra = [ln for ln in lines[1:] if "log" not in ln.lower()] if len(lines) <= 2 else lines[1:]
        if (not lines and r.code == 2) or extra:
            fails.append(("not one line", f"{len(lines)} lines on stderr: {' | '.join(lines[:3])[:200]}"))
        if r.code == 2 and lines and _LOST.search(lines[0]):
            fails.append(("message unclear", f"text missing from the message (rich markup?): {lines[0][:200]}"))
    # An error is on stderr; an interrupted search prints its outcome (and how to continue) on stdout.
    text = r.err if r.code == 2 else r.out + r.err
    missing = [n if isinstance(n, str) else "|".join(n) for n in s.names if not _has(text, n)]
    if missing and r.code in s.expect and (r.code == 2 or 2 not in s.expect):  # names are the error's
        fails.append(("message unclear", f"does not name {', '.join(map(repr, missing))}: {_brief(r)}"))
    said = [a for a in s.absent if a in r.err]
    if said:
        fails.append(("message unclear", f"says {', '.join(map(repr, said))}: {_brief(r)}"))
    return fails


def _brief(r: Result) -> str:
    lines = _lines(r.err) or _lines(r.out)
    return (lines[-1] if lines else "(nothing printed)")[:200]


def check_files(before: dict[str, str], root: Path, owned: Sequence[str]) -> list[tuple[str, str]]:
    fails = []
    for rel, digest in before.items():
        if any(fnmatch.fnmatch(rel, g) for g in owned):
            continue
        p = root / rel
        if not p.is_file():
            fails.append(("user file changed", f"{rel} is gone"))
        elif _hash(p) != digest:
            fails.append(("user file changed", f"{rel} was overwritten"))
    return fails


# -- one case, many cases -----------------------------------------------------------------------------


def _named(c: Case) -> set[str]:
    """The first path components of every argument, and `use`: the fixtures a case may need."""
    return set(c.use) | {str(a).split("/", 1)[0] for s in [*c.prep, *c.steps] for a in s.args} - {"", ".", ".."}


def uses(c: Case, fixture: str) -> bool:
    return fixture in _named(c)


def _copy_fixtures(c: Case, fixtures: Path, into: Path) -> None:
    names = {n for n in _named(c) if (fixtures / n).exists()}
    for n in names:
        src = fixtures / n
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, into / n)


def _make_writable(root: Path) -> None:
    for p in [root, *root.rglob("*")]:
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)


def run_case(c: Case, fixtures: Path, keep: Path | None = None) -> Outcome:
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f"pd-bad-{c.id.replace('/', '-')[:40]}-"))
    try:
        tmp.chmod(0o755)
        _copy_fixtures(c, fixtures, tmp)
        if c.setup:
            c.setup(tmp)
        failures: list[tuple[str, str]] = []
        for r in run_steps(c.prep, tmp):
            if r.code not in r.step.expect:
                failures.append(("behaviour", f"prep step {' '.join(map(str, r.step.args))[:80]} exited {r.code}: "
                                 f"{_brief(r)}"))
        if c.after_prep:
            c.after_prep(tmp)
        before = snapshot(tmp)
        results = run_steps(c.steps, tmp, c.concurrent)
        for r in results:
            failures.extend(check_step(r))
        failures.extend(check_files(before, tmp, c.owned))
        if c.check:
            failures.extend(("behaviour", f) for f in c.check(tmp, results))
        return Outcome(c, failures, results, time.monotonic() - t0)
    finally:
        _make_writable(tmp)
        if keep is not None:
            shutil.copytree(tmp, keep / c.id.replace("/", "-"), dirs_exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)


def run_all(cases: Sequence[Case], fixtures: Path, jobs: int = 2, on_done: Callable[[Outcome], None] | None = None,
            keep: Path | None = None) -> list[Outcome]:
    """Every case, `jobs` at a time; outcomes in catalogue order."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_case, c, fixtures, keep) for c in cases]
        outcomes = []
        for f in futures:
            o = f.result()
            if on_done:
                on_done(o)
            outcomes.append(o)
    return outcomes


def table(outcomes: Sequence[Outcome]) -> str:
    """Failures by class, then each failing case with its first failure and the module to change."""
    failing = [o for o in outcomes if not o.passed]
    lines = [f"{len(outcomes)} cases, {len(outcomes) - len(failing)} pass, {len(failing)} fail", "",
             "failures by class (a case can fail in several):"]
    for cls in CLASSES:
        ids = [o.case.id for o in failing if any(k == cls for k, _ in o.failures)]
        if ids:
            lines.append(f"  {cls:<18} {len(ids):>3}  {', '.join(ids)}")
    cmds: dict[str, list[int]] = {}
    for o in outcomes:
        n = cmds.setdefault(o.case.command, [0, 0])
        n[0] += 1
        n[1] += not o.passed
    lines += ["", "by command: " + ", ".join(f"{k} {v[1]}/{v[0]} fail" for k, v in sorted(cmds.items())), ""]
    for o in failing:
        cls, detail = o.failures[0]
        more = f" (+{len(o.failures) - 1})" if len(o.failures) > 1 else ""
        lines.append(f"FAIL {o.case.id:<38} {cls}{more}: {detail}")
        if o.case.where:
            lines.append(f"     -> {o.case.where}")
    return "\n".join(lines)
