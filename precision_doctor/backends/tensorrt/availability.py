"""What a run may ask of TensorRT here, said in one line before any work: whether `--backend trt` can
run engines, and whether engine targets are ones the installed library builds for."""

from __future__ import annotations

from collections.abc import Sequence

from precision_doctor.backends.tensorrt.library import find_library, parse_cc
from precision_doctor.errors import UserError

NOTHING_RUN = "nothing was built or run (use emulate or ort-cuda)"
INSTALL_HINT = "`pip install '.[trt]'` installs TensorRT-RTX from PyPI"


def missing_library(why: Sequence[str]) -> str:
    """Why no TensorRT library is usable, in one line (what each import said, and how to install one)."""
    return f"no TensorRT library is installed ({'; '.join(why) or 'none found'}); {INSTALL_HINT}"


def trt_refusal() -> str | None:
    """Why the `trt` backend cannot search or confirm here (None: it can): no library, or one whose
    engines this machine's GPU cannot run (no GPU; TensorRT-RTX on compute capability 9.0)."""
    try:
        lib, why = find_library()
    except UserError as exc:  # a bad PRECISION_DOCTOR_TRT_LIBRARY
        return f"{exc}; {NOTHING_RUN}"
    if lib is None:
        return f"{missing_library(why)}; {NOTHING_RUN}"
    run = lib.runtime()
    return None if run.can_run else f"{run.reason}; {NOTHING_RUN}"


def check_engine_targets(targets: Sequence[str] | None) -> str | None:
    """Why engine targets cannot be built (None: they can, or none were named). Each must read as a
    compute capability; with a library installed, one it builds for (TensorRT builds only for the GPU
    present). Without a library nothing is checked here: the engine is then not built, and the report
    says why."""
    if not targets:
        return None
    from precision_doctor.backends.tensorrt.build import compute_capability_targets

    try:
        for t in targets:
            parse_cc(t)
        lib = find_library()[0]
        if lib is not None:
            compute_capability_targets(lib, list(targets))
    except UserError as exc:
        return str(exc)
    return None
