"""Augmentation and headroom figures: the reusable mechanisms of issue #9 (its image-like renders are bench/'s,
checked by bench/self_check.py)."""

from __future__ import annotations

import numpy as np
import pytest

from precision_doctor import planted
from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.data.augment import Augment, augment, perturbable
from precision_doctor.graph.model import from_proto
from precision_doctor.measure.headroom import (
    expected_max_z,
    log_spread,
    margin_from_spread,
    predicted_share,
    sample_shares,
)
from precision_doctor.measure.tolerance import Tolerance


def _samples():
    rng = np.random.default_rng(0)
    return [{"img": rng.uniform(0, 1, (1, 3, 8, 8)).astype(np.float32),
             "ids": rng.integers(0, 100, (1, 5)),
             "mask": (rng.random((1, 5)) > 0.5).astype(np.float32),
             "flag": np.array([True])} for _ in range(2)]


def test_augment_perturbs_only_continuous_float_inputs():
    samples = _samples()
    ranges = perturbable(samples)
    assert set(ranges) == {"img"}  # token ids, a 0/1 float mask and a boolean stay as they are
    copies = augment(samples, Augment(copies=3, noise=0.01, seed=0))
    assert len(copies) == 6
    for j, c in enumerate(copies):
        src = samples[j // 3]
        assert c["ids"] is src["ids"] and c["mask"] is src["mask"] and c["flag"] is src["flag"]
        assert c["img"].dtype == np.float32 and c["img"].shape == src["img"].shape
        diff = c["img"] - src["img"]
        assert 0 < np.abs(diff).max() < 0.05 and np.std(diff) < 0.02 * np.std(src["img"]) * 1.5
        assert c["img"].min() >= ranges["img"][0] and c["img"].max() <= ranges["img"][1]
    assert not np.array_equal(copies[0]["img"], copies[1]["img"])


def test_augment_is_deterministic_per_sample_id():
    samples = _samples()
    a = augment(samples, Augment(2, 0.01, seed=3), ids=[7, 9])
    b = augment(samples[1:], Augment(2, 0.01, seed=3), perturbable(samples), ids=[9])
    np.testing.assert_array_equal(a[2]["img"], b[0]["img"])  # copy 0 of sample 9, whatever else was asked
    c = augment(samples, Augment(2, 0.01, seed=4), ids=[7, 9])
    assert not np.array_equal(a[0]["img"], c[0]["img"])


def test_spread_margin_and_prediction():
    assert log_spread([1.0]) is None and log_spread([0.0, 0.0, np.inf]) is None
    mean, sd = log_spread([1.0, np.e])
    assert mean == pytest.approx(0.5) and sd == pytest.approx(np.sqrt(0.5))
    assert expected_max_z(1) == 0.0 and 1.4 < expected_max_z(8) < 1.5 < expected_max_z(16)
    assert margin_from_spread([1.0, 1.0, 1.0], 3, 0.005) == 0.0  # no spread, no margin
    tight, wide = [1.0, 1.1, 0.95, 1.05], [0.3, 1.0, 2.5, 0.6]
    assert 0 < margin_from_spread(tight, 4, 0.005) < margin_from_spread(wide, 4, 0.005) <= 0.6
    assert margin_from_spread(tight, 4, 0.005) > margin_from_spread(tight, 64, 0.005)  # more samples searched, less margin
    assert margin_from_spread([0.0, 0.0], 2, 0.005) is None
    assert predicted_share([0.5, 0.5], 0.005) == pytest.approx(0.5)
    assert predicted_share([0.5, 0.6, 0.55], risk=0.005) > 0.6


def test_sample_shares_on_a_planted_case():
    case = planted.cancellation()
    model = from_proto(case.model)
    samples = case.samples(3, 0)
    ref = ReferenceRunner(model)
    refs = [ref.run(s) for s in samples]
    backend, tol = EmulateBackend(model), Tolerance(case.atol, case.rtol)
    low = sample_shares(backend, frozenset(), samples, refs, tol)
    fixed = sample_shares(backend, frozenset(case.expected), samples, refs, tol)
    assert len(low) == 3 and min(x.share for x in low) > 1.0 and max(x.share for x in fixed) < 1.0
    assert not any(x.passed for x in low) and all(x.passed for x in fixed)  # the defect fails every sample, the fix none

