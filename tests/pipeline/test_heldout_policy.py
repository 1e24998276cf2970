"""The held-out policy: few files, many files, generated samples, explicit flags, which check decides, and the
held-out bound's arithmetic (one-sided Clopper-Pearson)."""

from __future__ import annotations

import math

import pytest

from precision_doctor.errors import UserError
from precision_doctor.measure.bound import binomial_cdf, failure_rate_upper, samples_for_bound
from precision_doctor.outcome import Decider
from precision_doctor.pipeline.heldout_policy import (
    GENERATED,
    NONE,
    SPLIT,
    VALIDATE_INPUTS,
    decider,
    default_held_out,
    held_out_bound,
    inputs_for_held_out,
    plan_held_out,
    spread,
)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_few_files_are_not_validated(n):
    plan = plan_held_out(n, generated=False)
    assert plan.source == NONE and plan.search == tuple(range(n)) and plan.n_held_out == 0
    assert not plan.from_user_data and f"only {n}" in plan.reason


@pytest.mark.parametrize("n, held", [(4, (1, 3)), (5, (1, 3)), (8, (2, 6)), (12, (2, 6, 10)), (16, (2, 6, 10, 14))])
def test_a_few_files_hold_out_as_before(n, held):
    """2-4 --inputs behave as before the calibration-set policy (4 hold 2 out), and so do up to 20."""
    plan = plan_held_out(n, generated=False)
    assert plan.source == SPLIT and plan.held_out == held and plan.from_user_data
    assert sorted(plan.search + plan.held_out) == list(range(n)) and not set(plan.search) & set(held)
    assert "no search sees them" in plan.reason


def test_many_files_hold_a_fifth_at_least_ten_where_a_quarter_allows():
    assert [default_held_out(n) for n in (3, 4, 7, 12, 20, 39, 40, 50, 60, 100, 1000)] == \
        [0, 2, 2, 3, 5, 9, 10, 10, 12, 20, 200]
    assert inputs_for_held_out(10) == 40 and default_held_out(inputs_for_held_out(59)) >= 59
    assert default_held_out(inputs_for_held_out(59) - 1) < 59


def test_generated_search_samples_get_generated_held_out_ones():
    plan = plan_held_out(4, generated=True)
    assert plan.source == GENERATED and plan.generate == 2 and plan.search == (0, 1, 2, 3) and not plan.from_user_data
    assert "not on your data" in plan.reason
    assert plan_held_out(3, generated=True, split=0.34).generate == 1
    assert plan_held_out(4, generated=True, split=0).source == NONE


def test_user_files_never_get_generated_held_out_samples():
    for n in range(1, 20):
        assert plan_held_out(n, generated=False).generate == 0


def test_validate_inputs_win():
    plan = plan_held_out(2, generated=False, n_validate=5)
    assert plan.source == VALIDATE_INPUTS and plan.search == (0, 1) and plan.n_held_out == 5 and plan.from_user_data
    assert plan_held_out(3, generated=True, n_validate=1).source == VALIDATE_INPUTS


def test_explicit_split():
    plan = plan_held_out(2, generated=False, split=0.5)  # asked for: one searches, one confirms
    assert plan.source == SPLIT and plan.search == (0,) and plan.held_out == (1,) and "--validation-split 0.5" in plan.reason
    assert plan_held_out(8, generated=False, split=0.5).held_out == (1, 3, 5, 7)
    assert plan_held_out(8, generated=False, split=0).source == NONE
    assert plan_held_out(3, generated=False, split=0.1).source == NONE  # rounds to none
    assert len(plan_held_out(3, generated=False, split=0.9).search) == 1  # at least one sample searches
    with pytest.raises(UserError, match="--validation-split"):
        plan_held_out(4, generated=False, split=1.0)
    with pytest.raises(UserError, match="no input samples"):
        plan_held_out(0, generated=False)


def test_spread():
    assert spread(10, 1) == (5,) and spread(3, 3) == (0, 1, 2)


def test_held_out_samples_of_the_users_data_decide():
    assert decider(2, from_user=True) == Decider.HELD_OUT
    assert decider(50, from_user=False) == Decider.SEARCHED  # generated: not the user's data
    assert decider(0, from_user=True) == Decider.SEARCHED


def test_clopper_pearson_against_known_values():
    """Exact values: k = 0 is 1 - alpha^(1/n) (0 of 60 -> 4.87%), k = n - 1 is (1 - alpha)^(1/n), k = n is 1;
    1 of 100 -> 4.66% and 2 of 50 -> 12.06% (published one-sided 95% Clopper-Pearson bounds); at the bound the
    binomial CDF of the observed count is alpha."""
    assert failure_rate_upper(0, 60) == pytest.approx(1 - 0.05 ** (1 / 60), abs=1e-12)
    assert round(100 * failure_rate_upper(0, 60), 2) == 4.87
    assert failure_rate_upper(9, 10) == pytest.approx(0.95 ** (1 / 10), abs=1e-12)
    assert failure_rate_upper(5, 5) == 1.0 and failure_rate_upper(0, 0) == 1.0
    assert failure_rate_upper(1, 100) == pytest.approx(0.0466, abs=5e-5)
    assert failure_rate_upper(2, 50) == pytest.approx(0.1206, abs=5e-5)
    for k, n in ((1, 100), (3, 40), (7, 2000), (30, 5000)):
        p = failure_rate_upper(k, n)
        assert binomial_cdf(k, n, p) == pytest.approx(0.05, rel=1e-6) and k / n < p < 1
    assert failure_rate_upper(0, 10, 0.99) == pytest.approx(1 - 0.01 ** 0.1)
    assert samples_for_bound(0.05) == 59 and failure_rate_upper(0, 59) <= 0.05 < failure_rate_upper(0, 58)
    assert binomial_cdf(3, 10, 0.5) == pytest.approx(sum(math.comb(10, i) for i in range(4)) / 1024)
    with pytest.raises(ValueError):
        failure_rate_upper(3, 2)


def test_held_out_bound_record():
    b = held_out_bound(60, 0)
    assert (b.samples, b.failures, b.confidence, b.samples_for_useful) == (60, 0, 0.95, 59) and b.useful
    assert "Clopper-Pearson" in b.method and not held_out_bound(2, 0).useful
