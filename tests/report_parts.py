"""Reports built by hand in tests: `report_of(**fields)` takes fields of the report's parts by their own names (as
`fallback_nodes=`, `validation=`, `rounds=`) beside the Report's (`status`, `model`, `pricing`, ...) and puts each
into its part; `with_fields(report, **fields)` does the same for a copy."""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace
from typing import Any, get_type_hints

from precision_doctor.results.report import Report

_PARTS = {f.name: get_type_hints(Report)[f.name] for f in fields(Report)
          if is_dataclass(get_type_hints(Report)[f.name]) and f.name not in ("model", "invocation")}
_OWNER = {f.name: part for part, cls in _PARTS.items() for f in fields(cls)}


def with_fields(report: Report, **given: Any) -> Report:
    """A copy of `report` with `given` in the parts that hold them."""
    top = {k: v for k, v in given.items() if k not in _OWNER or k in _PARTS}
    for part in _PARTS:
        mine = {k: v for k, v in given.items() if _OWNER.get(k) == part and k not in _PARTS}
        if mine:
            top[part] = replace(getattr(report, part), **mine)
    return replace(report, **top)


def report_of(**given: Any) -> Report:
    """A Report with `given` (defaults elsewhere)."""
    return with_fields(Report(), **given)
