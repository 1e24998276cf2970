"""The tolerance rule: polygraphy's elemwise check and its statistics."""

from __future__ import annotations

import numpy as np
import pytest

from precision_doctor.errors import UserError
from precision_doctor.tolerance import Tolerance, check, merge


def test_elemwise_needs_both_abs_and_rel_to_fail():
    ref = np.array([1000.0, 0.001, 0.0])
    out = np.array([1000.5, 0.0015, 0.0])
    c = check(out, ref, Tolerance(atol=0.1, rtol=0.01))
    # 1000.5: abs 0.5 > 0.1 but rel 5e-4 <= 0.01 -> passes; 0.0015: abs 5e-4 <= 0.1 -> passes
    assert c.passed and c.mismatches == 0
    c = check(np.array([1020.0]), np.array([1000.0]), Tolerance(atol=0.1, rtol=0.01))
    assert not c.passed and c.mismatches == 1


def test_zero_reference_uses_epsilon_and_nan_fails():
    c = check(np.array([1e-3]), np.array([0.0]), Tolerance(atol=1e-4, rtol=1e3))
    assert not c.passed  # rel = 1e-3 / 2.22e-16
    c = check(np.array([np.nan]), np.array([1.0]), Tolerance(atol=10, rtol=10))
    assert not c.passed
    c = check(np.array([np.inf]), np.array([1.0]), Tolerance(atol=10, rtol=10))
    assert not c.passed


def test_statistics_modes():
    ref = np.ones(100)
    out = ref.copy()
    out[0] = 2.0  # one large error
    assert not check(out, ref, Tolerance(0.5, 0.5, "max")).passed
    assert check(out, ref, Tolerance(0.5, 0.5, "mean")).passed
    assert check(out, ref, Tolerance(0.5, 0.5, "median")).passed
    assert not check(out, ref, Tolerance(0.5, 0.5, "elemwise")).passed


def test_cosine_floor():
    ref = np.array([1.0, 0.0])
    out = np.array([0.0, 1.0])
    assert not check(out, ref, Tolerance(10, 10, cosine_floor=0.9)).passed
    assert check(ref, ref, Tolerance(0, 0, cosine_floor=0.999)).passed


def test_merge_over_samples_fails_if_any_fails():
    ok = check(np.ones(3), np.ones(3), Tolerance())
    bad = check(np.array([1, 1, 9.0]), np.ones(3), Tolerance())
    m = merge([ok, bad])
    assert not m.passed and m.max_abs == 8.0 and m.size == 6


def test_bad_settings_are_user_errors():
    with pytest.raises(UserError):
        Tolerance(check_error_stat="quantile2")
    with pytest.raises(UserError):
        Tolerance(atol=-1)
