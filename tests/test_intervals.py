"""Confidence intervals (querysmasher.intervals): the multipliers against scipy, bad levels refused,
and by Monte Carlo on the applied release path that estimate +- z std_error covers the true table
cells with the stated probability (each cell, and every cell of a table at once)."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

import querysmasher as qs
from querysmasher.errors import InputError
from querysmasher.intervals import check_confidence, multiplier


@pytest.mark.parametrize("c", [0.5, 0.9, 0.95, 0.99, 0.999])
def test_multipliers_are_the_normal_quantiles_chebyshev_and_bonferroni(c):
    assert multiplier(c) == pytest.approx(scipy.stats.norm.ppf(1 - (1 - c) / 2), rel=1e-12)
    assert multiplier(c, cells=20) == pytest.approx(scipy.stats.norm.ppf(1 - (1 - c) / 40), rel=1e-12)
    assert multiplier(c, gaussian=False) == pytest.approx(1 / math.sqrt(1 - c), rel=1e-12)
    # Chebyshev's bound is valid for Laplace noise: P(|X| > z sd) <= 1 / z^2 = 1 - c, and the exact
    # Laplace tail exp(-sqrt(2) z) lies below it
    z = multiplier(c, gaussian=False)
    assert math.exp(-math.sqrt(2) * z) <= 1 - c


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1, float("nan"), "high", None, True])
def test_a_confidence_outside_0_1_is_refused_naming_the_field(bad):
    with pytest.raises(InputError) as err:
        check_confidence(bad, "release spec: confidence")
    assert "release spec: confidence" in str(err.value)


def test_intervals_cover_the_true_cells_at_the_stated_level(tmp_path):
    """4,000 releases of one plan on fixed records (seeded draws of the applied measurements: an
    experiment): every cell's interval at 0.9 covers its true count in 0.9 of them (binomial: 0.005
    standard error); the API's and the published files' intervals are estimate +- z std_error, and a
    table's simultaneous multiplier (querysmasher.simultaneous, tested there) lies between z and
    Bonferroni's."""
    from querysmasher.data import marginal, validate_records
    from querysmasher.measure import measure
    from querysmasher.reconstruct import reconstruct as estimates
    from querysmasher.reconstruct import variances_of, write_csv_tables

    plan = qs.make_plan("synthetic:n=3,d=2", "prefix:1,2", method="qs", beta=0.5)
    rng = np.random.default_rng(0)
    records = pd.DataFrame({a.name: rng.integers(0, a.size, 200) for a in plan.schema.attributes})
    truth = marginal(validate_records(records, plan.schema), (0, 1), plan.schema.sizes)
    c, reps = 0.9, 4000
    z = multiplier(c)
    many = estimates(plan, measure(plan, validate_records(records, plan.schema), rng, seeded=True, draws=reps))
    se = np.sqrt(variances_of(plan).cells((0, 1))[0])
    coverage = np.mean(np.abs(many.table((0, 1)) - truth[:, None]) <= z * se[:, None], axis=1)
    assert np.all(np.abs(coverage - c) <= 4 * math.sqrt(c * (1 - c) / reps)), coverage
    # the API's table: the same estimator, estimate -+ z std_error
    t = plan.measure(records, seed=1).reconstruct().table(("a0", "a1"), confidence=c)
    assert np.allclose(np.sqrt(t["variance"]), se)
    assert np.allclose(t["upper"] - t["estimate"], z * se) and np.allclose(t["estimate"] - t["lower"], z * se)
    # the published files carry the same intervals: estimate +- z std_error, z and the simultaneous z in tables.json
    write_csv_tables(tmp_path / "tables", estimates(plan, plan.measure(records, seed=1)), confidence=c)
    index = json.loads((tmp_path / "tables" / "tables.json").read_text())
    (pair,) = [t for t in index["tables"] if t["view"] == ["a0", "a1"]]
    frame = pd.read_csv(tmp_path / "tables" / pair["file"])
    assert index["confidence"] == c and index["z"] == pytest.approx(multiplier(c)) and "exact" in index["interval"]
    assert z < pair["simultaneous_z"] < multiplier(c, cells=len(truth)) and pair["simultaneous"]
    assert np.allclose(frame["upper"] - frame["estimate"], index["z"] * frame["std_error"])
    assert np.allclose(frame["estimate"] - frame["lower"], index["z"] * frame["std_error"])


def test_the_release_spec_takes_a_confidence_and_refuses_a_bad_one():
    from querysmasher.release import parse_release_spec

    base = {"data": "d.csv", "domain": "dom.yaml", "tables": [{"marginal": ["a"]}], "budget": {"rho": 0.5}}
    assert parse_release_spec(base).confidence == 0.95
    assert parse_release_spec({**base, "confidence": 0.99}).confidence == 0.99
    with pytest.raises(InputError, match="release spec: confidence"):
        parse_release_spec({**base, "confidence": 95})


def test_the_answers_file_carries_every_answers_interval(tmp_path):
    import h5py

    plan = qs.make_plan("synthetic:n=3,d=2", "prefix:1,2", method="qs", beta=0.5)
    records = pd.DataFrame({"a0": [0, 1, 2, 2], "a1": [1, 1, 0, 2]})
    plan.measure(records, seed=3).reconstruct().save(tmp_path / "answers.h5")
    with h5py.File(tmp_path / "answers.h5") as f:
        g = f["views"]
        z = f.attrs["z"]
        assert f.attrs["confidence"] == 0.95 and z == pytest.approx(multiplier(0.95))
        se = np.sqrt(g["variances"][:])
        assert np.allclose(g["lower"][:], g["answers"][:] - z * se) and np.allclose(
            g["upper"][:], g["answers"][:] + z * se
        )
