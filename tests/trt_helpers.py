"""The TensorRT-RTX library for the tests that run the real parser and builder."""

from __future__ import annotations

import os

import pytest

from precision_doctor.backends.tensorrt.library import TrtLibrary, find_library


def require_tensorrt_rtx() -> TrtLibrary:
    """TensorRT-RTX, or skip the calling test module where it does not import; where
    PRECISION_DOCTOR_REQUIRE_TRT=1 (CI on x86-64 Linux) a missing library fails instead."""
    lib, why = find_library("tensorrt_rtx")
    if lib is None:
        if os.environ.get("PRECISION_DOCTOR_REQUIRE_TRT") == "1":
            pytest.fail(f"TensorRT-RTX is required here (PRECISION_DOCTOR_REQUIRE_TRT=1) but does not import: {why}",
                        pytrace=False)
        pytest.skip(f"TensorRT-RTX does not import: {why}", allow_module_level=True)
    return lib
