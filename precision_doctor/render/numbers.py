"""Number formats every front end shares (report.md, report.html, the CLI, the service pages, the batch summary):
`num` reads a report number, the `fmt_*` functions write one."""

from __future__ import annotations

import math
from typing import Any

from precision_doctor.words import counted  # noqa: F401 (the render layer's name for it)


def num(v: Any) -> float:
    """A report number as float: "inf"/"-inf"/"nan" strings and None (-> nan) included."""
    if v is None or isinstance(v, bool):
        return float(v) if isinstance(v, bool) else math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def fmt(v: Any, digits: int = 3) -> str:
    """Compact number: "inf", "nan", "0", 0.0123, 1.23e-05, 65504."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    x = num(v)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    ax = abs(x)
    if 1e3 <= ax < 1e6:
        return f"{x:.0f}"
    if 1e-3 <= ax < 1e3:
        return f"{x:.{digits}g}"
    mant, _, exp = f"{x:.{max(digits - 1, 0)}e}".partition("e")
    if "." in mant:
        mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{exp}"


def fmt_pct(v: Any, digits: int = 2) -> str:
    """Fraction 0..1 as a percentage; tiny non-zero shares stay visible ("<0.01 %")."""
    x = num(v)
    if math.isnan(x):
        return "nan"
    if x == 0:
        return "0 %"
    p = 100 * x
    floor = 10.0**-digits
    if 0 < p < floor:
        return f"<{floor:g} %"
    return f"{p:.{digits}f} %"


def fmt_flops(v: Any) -> str:
    """FLOPs with an SI prefix."""
    x = num(v)
    if not math.isfinite(x):
        return fmt(x)
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.0f} FLOP"


def fmt_time(v: Any) -> str:
    """Seconds as "0.42 s", "12.3 s", "4 min 05 s", "2 h 03 min"."""
    s = num(v)
    if not math.isfinite(s):
        return fmt(s)
    if s < 60:
        return f"{s:.3g} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


def fmt_bytes(v: Any) -> str:
    """A size in bytes with a binary prefix: "812 B", "2.4 KiB", "199 MiB", "1.03 GiB"."""
    x = num(v)
    if not math.isfinite(x):
        return fmt(x)
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.0f} B"


def fmt_rate(rate: float) -> str:
    """A failure rate as a percentage: "4.9%", "26%", "100%"."""
    p = 100 * float(rate)
    return f"{p:.1f}%" if p < 10 else f"{p:.0f}%"


def fmt_short_pct(v: Any) -> str:
    """A share as a short percentage, as the cost sentences and tables say it: "0%", "0.62%", "4.1%", "41%"; "-" for
    a missing or non-numeric value."""
    if v is None or not isinstance(v, (int, float)) or math.isnan(v):
        return "-"
    p = 100 * v
    return "0%" if p == 0 else f"{p:.2g}%" if p < 1 else f"{p:.0f}%" if p >= 10 else f"{p:.1f}%"


def fmt_share(v: Any) -> str:
    """A FLOP share as a percentage with 3 significant digits ("0.000619%", "12.5%"; "" for None): the batch summary."""
    return "" if v is None else f"{100 * float(v):.3g}%"


def fmt_seconds(v: Any) -> str:
    """Seconds with one decimal ("12.3 s"; "" for None): the batch summary and the CLI's run lines."""
    return "" if v is None else f"{float(v):.1f} s"


def fmt_decimal_bytes(v: int) -> str:
    """A size in bytes with a decimal prefix: "812 B", "2.4 kB", "199 MB", "1.03 GB" (the cost model's bytes moved)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v} B"


def fmt_3g(v: float) -> str:
    """3 significant digits; "inf", "-inf", "nan" as Python writes them (`compare`'s layer table and verdict)."""
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
        return str(v)
    return f"{v:.3g}"

