"""The held-out policy: few files, many files, generated samples, explicit flags, and the words."""

from __future__ import annotations

import pytest

from precision_doctor.errors import UserError
from precision_doctor.pipeline.heldout_policy import (
    GENERATED,
    NONE,
    SPLIT,
    VALIDATE_INPUTS,
    failure_rate_bound,
    held_out_sentence,
    plan_held_out,
    spread,
)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_few_files_are_not_validated_and_never_hold(n):
    plan = plan_held_out(n, generated=False)
    assert plan.source == NONE and plan.search == tuple(range(n)) and plan.n_held_out == 0
    assert not plan.from_user_data
    for failing in (None, []):
        words = held_out_sentence(plan, failing)
        assert words.startswith("not validated") and "holds" not in words and f"only {n}" in words


@pytest.mark.parametrize("n, held", [(4, (1, 3)), (5, (1, 3)), (8, (2, 6)), (12, (2, 6, 10)), (16, (2, 6, 10, 14))])
def test_many_files_hold_a_quarter_out_spread_over_the_list(n, held):
    plan = plan_held_out(n, generated=False)
    assert plan.source == SPLIT and plan.held_out == held and plan.from_user_data
    assert sorted(plan.search + plan.held_out) == list(range(n)) and not set(plan.search) & set(held)
    labels = [f"s{i}.npz" for i in range(n)]
    words = held_out_sentence(plan, [], labels)
    assert words.startswith(f"holds on the {len(held)} held-out --inputs sample(s)")
    assert all(labels[i] in words for i in held) and "rule out only failure rates above" in words
    bad = held_out_sentence(plan, [labels[held[0]]], labels)
    assert bad.startswith("FAILED on 1 of the") and "holds" not in bad


def test_generated_search_samples_get_generated_held_out_ones():
    plan = plan_held_out(4, generated=True)
    assert plan.source == GENERATED and plan.generate == 2 and plan.search == (0, 1, 2, 3) and not plan.from_user_data
    words = held_out_sentence(plan, [])
    assert words.startswith("passes on 2 generated") and "nothing about your data" in words and "holds" not in words
    assert plan_held_out(3, generated=True, split=0.34).generate == 1
    assert plan_held_out(4, generated=True, split=0).source == NONE


def test_user_files_never_get_generated_held_out_samples():
    for n in range(1, 20):
        assert plan_held_out(n, generated=False).generate == 0


def test_validate_inputs_win():
    plan = plan_held_out(2, generated=False, n_validate=5)
    assert plan.source == VALIDATE_INPUTS and plan.search == (0, 1) and plan.n_held_out == 5 and plan.from_user_data
    assert held_out_sentence(plan, []).startswith("holds on the 5 --validate-inputs sample(s)")
    assert plan_held_out(3, generated=True, n_validate=1).source == VALIDATE_INPUTS


def test_explicit_split():
    plan = plan_held_out(2, generated=False, split=0.5)  # asked for: one searches, one confirms
    assert plan.source == SPLIT and plan.search == (0,) and plan.held_out == (1,)
    assert plan_held_out(8, generated=False, split=0.5).held_out == (1, 3, 5, 7)
    assert plan_held_out(8, generated=False, split=0).source == NONE
    assert plan_held_out(3, generated=False, split=0.1).source == NONE  # rounds to none
    assert len(plan_held_out(3, generated=False, split=0.9).search) == 1  # at least one sample searches
    with pytest.raises(UserError, match="--validation-split"):
        plan_held_out(4, generated=False, split=1.0)
    with pytest.raises(UserError, match="no input samples"):
        plan_held_out(0, generated=False)


def test_spread_and_bound():
    assert spread(10, 1) == (5,) and spread(3, 3) == (0, 1, 2)
    assert failure_rate_bound(0) == 1.0
    assert failure_rate_bound(1) == pytest.approx(0.95)
    assert failure_rate_bound(3) == pytest.approx(1 - 0.05 ** (1 / 3))
    assert failure_rate_bound(30) < 0.1 < failure_rate_bound(20)
