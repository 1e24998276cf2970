"""Shared bits of the benchmark scripts: machine facts, markdown tables, JSON results under bench/out/."""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import subprocess
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"


def machine() -> dict:
    """What the numbers were measured on."""
    import h5py
    import numpy
    import onnx
    import onnxruntime

    try:
        import psutil

        mem_gib = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        mem_gib = None
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "memory_gib": mem_gib,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
        "onnx": onnx.__version__,
        "numpy": numpy.__version__,
        "h5py": h5py.__version__,
        "git_commit": commit,
        "loadavg_at_end": loadavg(),
    }


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages: other processes on the machine skew wall times."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def fmt(v, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf"
        if v != 0 and (abs(v) >= 1e5 or abs(v) < 10 ** -digits):
            return f"{v:.{digits - 1}e}"
        return f"{v:.{digits}g}" if abs(v) < 10**digits else f"{v:.0f}"
    return str(v)


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(fmt(c) for c in r) + " |")
    return "\n".join(lines)


def write_results(name: str, payload: dict) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    payload = {"benchmark": name, "machine": machine(), **payload}
    path.write_text(json.dumps(payload, indent=2, default=_default) + "\n", encoding="utf-8")
    return path


def _default(o):
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def written_bytes(run_dir: Path) -> int:
    """The bytes a run wrote into `run_dir`: its files', not what its links point to (model.onnx links to the
    user's model)."""
    return sum(f.lstat().st_size for f in run_dir.rglob("*") if f.is_file() and not f.is_symlink())


def run_measured(cmd: list[str], **popen) -> tuple[str, int, float]:
    """Run `cmd` with its stdout captured (stderr as `popen` says): its stdout, exit code and own peak RSS in GiB
    (os.wait4's rusage of that child, KiB on Linux)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, **popen)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    return out, os.waitstatus_to_exitcode(status), usage.ru_maxrss / 2**20
