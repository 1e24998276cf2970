"""TensorRT's tactic-source and TF32 flags, built in one place: for every command precision-doctor prints
(results/commands.py: trtexec for TensorRT 10 and 11, polygraphy, the TensorRT-RTX script) and for a knob
configuration (`backends.knobs`).

trtexec changes the library's defaults (`--tacticSources=-CUBLAS,+CUDNN`) and has TF32 on unless told
`--noTF32`; polygraphy enables exactly the sources it lists (`--tactic-sources A B`: the defaults less those
avoided plus those added; an empty list disables all) and has TF32 off for TensorRT unless told `--tf32`.
Names are read as `tactics.py` reads them (case, blanks and a leading sign ignored, `-` inside a name is `_`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from precision_doctor.backends.knobs import TACTICS, TF32, TRT, KnobConfig
from precision_doctor.backends.tensorrt.tactics import DEFAULT_TACTIC_SOURCES, TACTIC_SOURCES_TRT11


@dataclass(frozen=True)
class TacticChange:
    """What a build changes of TensorRT's defaults: tactic sources to avoid and to add (as given; read by
    `source_names`), and whether TF32 stays on (precision-doctor's commands clear it otherwise)."""

    avoid: tuple[str, ...] = ()
    add: tuple[str, ...] = ()
    tf32: bool = False

    @classmethod
    def of(cls, knob: KnobConfig | None, avoid: Iterable[str] | None = None) -> TacticChange:
        """`avoid` and what a TensorRT knob configuration changes (its one `+`/`-` source, its TF32); any other
        configuration (none, ONNX Runtime's) changes nothing here."""
        avoid, add, tf32 = list(avoid or ()), [], False
        if knob is not None and knob.backend == TRT:
            change = knob.get(TACTICS, "")
            if change:
                (add if change[0] == "+" else avoid).append(change[1:])
            tf32 = knob.get(TF32, "0") == "1"
        return cls(tuple(avoid), tuple(add), tf32)


def source_names(names: Iterable[str] | None, available: Sequence[str] | None = None) -> list[str]:
    """Tactic source names in TensorRT's spelling, without duplicates, in order; with `available` only those."""
    out = []
    for name in names or ():
        key = re.sub(r"\s+", "", str(name)).lstrip("+-").upper().replace("-", "_")
        if key and (available is None or key in available):
            out.append(key)
    return list(dict.fromkeys(out))


def trtexec_tactic_sources(avoid: Iterable[str] | None, trt_major: int = 10, add: Iterable[str] | None = None) -> str:
    """trtexec's `--tacticSources` value that removes `avoid` from the defaults and adds `add` (`-CUBLAS,-CUDNN`,
    `+CUBLAS`; empty: no change). For TensorRT 11 only sources that still exist there are kept."""
    available = TACTIC_SOURCES_TRT11 if trt_major >= 11 else None
    return ",".join([*(f"-{t}" for t in source_names(avoid, available)),
                     *(f"+{t}" for t in source_names(add, available))])


def trtexec_tactic_args(avoid: Iterable[str] | None, trt_major: int = 10, add: Iterable[str] | None = None) -> list[str]:
    """`--tacticSources=...`, or nothing when the defaults stay."""
    value = trtexec_tactic_sources(avoid, trt_major, add)
    return [f"--tacticSources={value}"] if value else []


def trtexec_tf32_args(tf32: bool) -> list[str]:
    """`--noTF32` unless TF32 is to stay on (trtexec's default)."""
    return [] if tf32 else ["--noTF32"]


def polygraphy_tactic_args(avoid: Iterable[str] | None, add: Iterable[str] | None = None, tf32: bool = False, *,
                           defaults: Sequence[str] = DEFAULT_TACTIC_SOURCES,
                           available: Sequence[str] | None = None) -> list[str]:
    """polygraphy's `--tactic-sources` (the `defaults` less `avoid`, plus `add`; nothing when neither changes
    anything) and `--tf32` when TF32 is to be on. `available`: the library's sources (TensorRT-RTX: the
    two convolution sources); an added source it lacks is left out."""
    avoided, added = set(source_names(avoid)), source_names(add, available)
    args = []
    if avoided or added:
        args = ["--tactic-sources", *dict.fromkeys([*(t for t in defaults if t not in avoided), *added])]
    return args + (["--tf32"] if tf32 else [])


def knob_trtexec_args(config: KnobConfig) -> list[str]:
    """trtexec's flags for a TensorRT knob configuration (`--noTF32` unless it turns TF32 on)."""
    change = TacticChange.of(config)
    return trtexec_tactic_args(change.avoid, 10, change.add) + trtexec_tf32_args(change.tf32)


def knob_polygraphy_args(config: KnobConfig, enabled_by_default: Sequence[str]) -> list[str]:
    """polygraphy's flags for a TensorRT knob configuration, the library enabling `enabled_by_default`. polygraphy
    clears TF32 for TensorRT, but not with POLYGRAPHY_USE_TENSORRT_RTX=1 (there TF32 stays on unless a config
    postprocess script clears it: `results.commands.NO_TF32_POSTPROCESS`)."""
    change = TacticChange.of(config)
    return polygraphy_tactic_args(change.avoid, change.add, change.tf32, defaults=enabled_by_default)
