"""The tolerance rule: polygraphy's elemwise check and its statistics."""

from __future__ import annotations

import numpy as np
import pytest

from precision_doctor.errors import UserError
from precision_doctor.measure.tolerance import Tolerance, check, merge


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


def test_tol_used_is_the_worst_elements_share_and_decides_the_check():
    tol = Tolerance(atol=1e-3, rtol=1e-2)
    ref = np.array([1.0, 0.1, 0.0])
    # element 0: abs 2e-3 (2x atol), rel 2e-3 (0.2x rtol) -> 0.2; element 1: 1e-4 abs, 1e-3 rel -> 0.1
    c = check(ref + np.array([2e-3, 1e-4, 0.0]), ref, tol)
    assert c.passed and c.tol_used == pytest.approx(0.2)
    c = check(ref + np.array([0.02, 0.0, 0.0]), ref, tol)
    assert not c.passed and c.tol_used == pytest.approx(2.0)
    for out in (ref + np.array([0, 0, np.nan]), np.ones(2)):  # NaN, wrong shape
        assert check(out, ref, tol).tol_used == np.inf
    assert check(ref, ref, Tolerance(0, 0)).tol_used == 0.0  # a zero tolerance allows only zero
    assert check(ref + 1e-6, ref, Tolerance(0, 0)).tol_used == np.inf
    assert check(ref + 2e-3, ref, Tolerance(1e-3, 1e-2, "max")).tol_used == pytest.approx(2.0)


def test_scaled_tolerance_is_the_margin_check():
    """A margin m passes exactly the outputs whose tol_used is at most 1 - m."""
    rng = np.random.default_rng(0)
    ref = rng.normal(size=1000)
    tol = Tolerance(1e-3, 1e-2)
    for k in range(20):
        out = ref + rng.normal(scale=10 ** rng.uniform(-5, -2), size=ref.size)
        used = check(out, ref, tol).tol_used
        assert check(out, ref, tol.scaled(0.8)).passed == (used <= 0.8 + 1e-12), k


def test_merge_keeps_the_worst_share():
    tol = Tolerance(1e-3, 1e-3)
    a = check(np.array([1.0005]), np.array([1.0]), tol)
    b = check(np.array([1.0009]), np.array([1.0]), tol)
    assert merge([a, b]).tol_used == pytest.approx(0.9, rel=1e-6)


# -- per-output tolerances (polygraphy's --atol NAME:V) ----------------------------------------------------


def test_an_output_gets_its_own_tolerance_and_the_others_the_plain_one():
    from precision_doctor.errors import SpecError
    from precision_doctor.measure.tolerance import check_all

    tol = Tolerance(atol=1e-3, rtol=1e-3, output_atol=("logits:0.1",), output_rtol=("logits:0.2", "box:0"))
    assert tol.for_output("logits") == Tolerance(atol=0.1, rtol=0.2)
    assert tol.for_output("box") == Tolerance(atol=1e-3, rtol=0.0) and tol.for_output("other").atol == 1e-3
    assert tol.outputs_named == ["logits", "box"]
    ref = {"logits": np.array([1.0]), "other": np.array([1.0])}
    out = {"logits": np.array([1.05]), "other": np.array([1.05])}  # 0.05 off: within logits' own atol only
    checks = check_all(out, ref, tol)
    assert checks["logits"].passed and not checks["other"].passed
    # a margin scales every value, the per-output ones too; the dict form leaves them out when none are given
    half = tol.scaled(0.5)
    assert half.for_output("logits").atol == pytest.approx(0.05) and half.atol == pytest.approx(5e-4)
    assert "output_atol" not in Tolerance().to_dict() and tol.to_dict()["output_atol"] == ["logits:0.1"]
    for bad in ("logits", "logits:x", ":1e-3", "logits:-1", "logits:nan"):
        with pytest.raises(SpecError, match="tolerance.output_atol.*NAME:VALUE"):
            Tolerance(output_atol=(bad,))


def test_cli_recipe_and_report_take_per_output_tolerances(run_cli, planted_file, tmp_path):
    import json

    from precision_doctor.batch.recipes import apply_recipe
    from precision_doctor.results.report import Report
    from precision_doctor.spec import RunSpec

    case, path, files = planted_file("three_defects")
    out = case.model.graph.output[0].name
    inputs = [a for f in files for a in ("--inputs", str(f))]
    code, _, err = run_cli("compare", path, *inputs, "--atol", "1e-2", "--atol", f"{out}:2e-2", "--rtol", "1e-2",
                           "--out", tmp_path / "c")
    assert code in (0, 1), err
    # an output the model does not have is one line naming the flag
    code, _, err = run_cli("compare", path, *inputs, "--atol", "nope:1e-2", "--out", tmp_path / "c2")
    assert code == 2 and "--atol nope: not an output of the model" in err and not (tmp_path / "c2").exists()
    code, _, err = run_cli("compare", path, *inputs, "--atol", "x", "--out", tmp_path / "c3")
    assert code == 2 and "--atol" in err and "expected a number" in err
    code, stdout, err = run_cli("diagnose", path, *inputs, "--atol", "1e-2", "--rtol", "1e-2", "--atol", f"{out}:2e-2",
                                "--out", tmp_path / "d")
    assert code == 0, err
    assert f"output {out}: atol 0.02, rtol 0.01" in stdout
    rep = Report.load(tmp_path / "d")
    assert rep.search.tolerance == Tolerance(atol=1e-2, rtol=1e-2, output_atol=(f"{out}:2e-2",))
    assert json.loads((tmp_path / "d" / "report.json").read_text())["search"]["tolerance"]["output_atol"] == [f"{out}:2e-2"]
    assert f"--atol 0.01 {out}:0.02" in rep.answer.commands["polygraphy"]  # polygraphy's own syntax
    assert "one --atol/--rtol for every output" in rep.answer.commands["trtexec_trt11_check"]
    spec = apply_recipe(RunSpec(model=str(path)), {"tolerance": {"atol": 1e-3, "output_atol": {out: 1e-2}}}, tmp_path, "r")
    assert spec.tolerance.for_output(out).atol == 1e-2 and spec.tolerance.atol == 1e-3


def test_the_rounding_floor_of_the_outputs_against_the_tolerance():
    """Rounding the FP32 reference to FP16 alone uses about 2**-11 / 1e-5 = 49x polygraphy's default tolerance: the
    floor is below it, and the suggested tolerance is the next power of ten with room for the computation."""
    from precision_doctor.graph.formats import BF16, FP16
    from precision_doctor.measure.floor import rounding_floor

    rng = np.random.default_rng(0)
    refs = [{"y": rng.normal(size=(4, 256)).astype(np.float32), "ids": np.arange(4)} for _ in range(2)]
    floor = rounding_floor(refs, FP16, Tolerance())
    assert floor.samples == 2 and set(floor.shares) == {"y"}  # integer outputs are never rounded
    assert 40 < floor.shares["y"] <= 2.0**-11 / 1e-5 + 1e-9 and floor.below
    assert floor.needs(Tolerance()).atol == pytest.approx(1e-5 * floor.shares["y"], rel=1e-2)
    assert (floor.realistic(Tolerance()).atol, floor.realistic(Tolerance()).rtol) == (1e-3, 1e-3)
    assert rounding_floor(refs, BF16, Tolerance()).realistic(Tolerance()).atol == 1e-2
    assert not rounding_floor(refs, FP16, Tolerance(1e-3, 1e-3)).below
    own = Tolerance(1e-5, 1e-5, output_atol=("y:2e-5",), output_rtol=("y:2e-5",))
    assert rounding_floor(refs, FP16, own).realistic(own).output_atol == ("y:0.002",)  # y's own, scaled alike
    huge = rounding_floor([{"y": np.array([1e5, 1.0], np.float32)}], FP16, Tolerance(1e-3, 1e-3))
    assert huge.below and huge.shares["y"] == np.inf and huge.realistic(Tolerance(1e-3, 1e-3)) is None
    fp32_inf = rounding_floor([{"y": np.array([np.inf, 1.0], np.float32)}], FP16, Tolerance(1e-3, 1e-3))
    assert not fp32_inf.below  # an inf of FP32 itself is no rounding's doing


def test_the_rounding_floor_against_the_search_margin_and_a_zero_tolerance_in_words():
    """The search asks for 1 - margin of the tolerance: a rounding that uses 0.95 of it is within the tolerance but
    above what the search allows, and the warning says so; a tolerance of 0 is said as such, not as an overflow."""
    from precision_doctor.graph.formats import FP16
    from precision_doctor.measure.floor import rounding_floor
    from precision_doctor.render.wording import floor_advice, floor_finding

    rng = np.random.default_rng(0)
    refs = [{"y": rng.normal(size=(4, 256)).astype(np.float32)}]
    share = rounding_floor(refs, FP16, Tolerance(1e-3, 1e-3)).shares["y"]
    tol = Tolerance(1e-3 * share / 0.95, 1e-3 * share / 0.95)  # the rounding uses 0.95 of it
    plain = rounding_floor(refs, FP16, tol)
    assert plain.shares["y"] == pytest.approx(0.95) and not plain.below and floor_finding(plain, tol) is None
    margin = rounding_floor(refs, FP16, tol, allowed=0.9)
    assert margin.below
    text = floor_finding(margin, tol)
    assert "under the search's margin" in text and "0.95x it, more than the 0.9x the search asks for (--margin 0.1)" in text
    assert margin.realistic(tol).atol > tol.atol and floor_advice(margin, tol) is not None
    zero = Tolerance(0.0, 0.0)
    floor = rounding_floor(refs, FP16, zero)
    assert floor.below and floor.realistic(zero) is None
    said = floor_finding(floor, zero)
    assert "allows no difference at all" in said and "beyond" not in said


@pytest.mark.parametrize("seed", range(6))
def test_the_bracketed_median_is_numpys(seed):
    """`_median` partitions only the elements a strided sample brackets around the middle, or every element where
    the bracket misses it: numpy's median either way, bit for bit, on arrays made to fool the sample."""
    from precision_doctor.measure.tolerance import MEDIAN_SAMPLE, _median

    rng = np.random.default_rng(seed)
    n = 16 * MEDIAN_SAMPLE + int(rng.integers(0, 1000))
    stride = n // MEDIAN_SAMPLE
    fooled = rng.random(n)
    fooled[::stride] = 1e9  # every sampled element far above the rest: the bracket misses the median
    arrays = [np.abs(rng.standard_normal(n)) ** 3, np.sort(rng.random(n))[::-1].copy(), fooled,
              np.repeat(rng.random(n // 7 + 1), 7)[:n], np.r_[np.zeros(n // 2), np.full(n - n // 2, np.inf)],
              rng.integers(0, 3, n).astype(np.float64), rng.random(101)]
    for a in arrays:
        assert _median(a) == np.median(a) or np.isinf(np.median(a)) and np.isinf(_median(a))


def test_the_share_used_is_the_nan_masked_minimum():
    """`_used` without NaN masks (both tolerances above 0) gives what the masked minimum gives, NaN and infinity
    included."""
    from precision_doctor.measure.tolerance import _share, _used

    rng = np.random.default_rng(3)
    for tol in (Tolerance(0.1, 1e-2), Tolerance(1e-3, 0.5), Tolerance(0.0, 1e-2), Tolerance(1e-2, 0.0)):
        for trial in range(6):
            a = np.abs(rng.standard_normal(5000)) * 10.0 ** rng.integers(-4, 2)
            r = a / np.abs(rng.standard_normal(5000))
            if trial >= 2:
                a[rng.integers(0, 5000, 20)] = np.nan
            if trial >= 3:
                r[rng.integers(0, 5000, 20)] = np.nan
                a[rng.integers(0, 5000, 5)] = np.inf
            if trial == 5:
                a[:] = np.nan
            want = float(np.max(np.minimum(_share(a, tol.atol), _share(r, tol.rtol))))
            assert _used(a, r, tol) == want
