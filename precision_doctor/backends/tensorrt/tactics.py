"""Tactic sources: parse what a user asks for, resolve it against what the installed library has.

TensorRT 10.x documents CUBLAS, CUBLAS_LT and CUDNN (deprecated, disabled by default) and the two
convolution sources EDGE_MASK_CONVOLUTIONS and JIT_CONVOLUTIONS (enabled by default); TensorRT 11.x
and TensorRT-RTX 1.7 have only the two convolution sources (RTX: `get_tactic_sources()` is 3 by
default, both on; setting them works in a CPU-only ahead-of-time build).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from precision_doctor.errors import UserError

# Tactic sources documented for TensorRT 10.x (CUBLAS, CUBLAS_LT, CUDNN deprecated there) and
# 11.x (only the two convolution sources remain).
TACTIC_SOURCES_TRT10 = ("CUBLAS", "CUBLAS_LT", "CUDNN", "EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")
TACTIC_SOURCES_TRT11 = ("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")
# Enabled by default in TensorRT 10 and 11 (10.x documents CUBLAS, CUBLAS_LT and CUDNN as "Disabled by
# default"; 11.x has only these two).
DEFAULT_TACTIC_SOURCES = TACTIC_SOURCES_TRT11
_TACTIC_ALIASES = {"CUBLASLT": "CUBLAS_LT", "EDGE_MASK": "EDGE_MASK_CONVOLUTIONS", "JIT": "JIT_CONVOLUTIONS"}


@dataclass(frozen=True)
class TacticSpec:
    """Tactic sources to use. `only` (polygraphy's `--tactic-sources A B`): exactly these, the
    rest disabled; else `enable`/`disable` change TensorRT's defaults (trtexec's `+A,-B`)."""

    only: tuple[str, ...] | None = None
    enable: tuple[str, ...] = ()
    disable: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return (self.only or ()) + self.enable + self.disable


def _normalize_tactic(name: str) -> str:
    key = re.sub(r"[\s]+", "", name).upper().replace("-", "_")
    return _TACTIC_ALIASES.get(key, key)


def parse_tactic_sources(spec: str | Sequence[str] | None) -> TacticSpec | None:
    """Parse tactic sources: names (`["CUBLAS", "CUDNN"]`, `"cublas,cudnn"`: only these) or
    signed changes of the defaults (`"-CUBLAS,+CUDNN"`, trtexec's form). Case-insensitive; `-`
    inside a name is read as `_` (`cublas-lt` is `CUBLAS_LT`). An empty list disables all."""
    if spec is None:
        return None
    items = [t for t in re.split(r"[,\s]+", spec)] if isinstance(spec, str) else [str(t) for t in spec]
    items = [t.strip() for t in items if t and t.strip()]
    signed = [t for t in items if t[0] in "+-"]
    if signed and len(signed) != len(items):
        raise UserError(f"tactic sources: use either names (enable only these) or +/- changes, not both: {', '.join(items)}")
    if not signed:
        if isinstance(spec, str) and not items:
            return TacticSpec(only=())
        return TacticSpec(only=tuple(dict.fromkeys(_normalize_tactic(t) for t in items)))
    enable, disable = [], []
    for t in items:
        name = _normalize_tactic(t[1:])
        if not name:
            raise UserError(f"tactic sources: empty name in '{t}'")
        (enable if t[0] == "+" else disable).append(name)
    return TacticSpec(enable=tuple(dict.fromkeys(enable)), disable=tuple(dict.fromkeys(disable)))


def resolve_tactic_sources(spec: TacticSpec, available: Mapping[str, int], default_mask: int, version: str = "") -> list[str]:
    """Names of the tactic sources to enable, given the members of `trt.TacticSource`
    (`available`: name -> bit index) and the builder's default bit mask."""
    unknown = [n for n in spec.names if n not in available]
    if unknown:
        removed = [n for n in unknown if n in TACTIC_SOURCES_TRT10]
        why = " (TensorRT 10 deprecated the cuBLAS/cuDNN tactic sources and TensorRT 11 removed them)" if removed else ""
        raise UserError(
            f"tactic source(s) {', '.join(unknown)} not available in TensorRT {version or '(this version)'}{why}; "
            f"available: {', '.join(available) or 'none'}"
        )
    if spec.only is not None:
        return list(spec.only)
    enabled = {n for n, bit in available.items() if default_mask >> int(bit) & 1}
    enabled |= set(spec.enable)
    enabled -= set(spec.disable)
    return [n for n in available if n in enabled]
