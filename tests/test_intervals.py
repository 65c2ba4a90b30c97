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
    """600 releases of one plan on fixed records (seeded noise: an experiment): every cell's
    interval at 0.9 covers its true count in 0.9 of them (binomial: 0.012 standard error), and the
    table's simultaneous interval covers all 9 cells at once in at least 0.9."""
    plan = qs.make_plan("synthetic:n=3,d=2", "prefix:1,2", method="qs", beta=0.5)
    rng = np.random.default_rng(0)
    records = pd.DataFrame({a.name: rng.integers(0, a.size, 200) for a in plan.schema.attributes})
    truth = records.groupby(["a0", "a1"]).size().reindex(pd.MultiIndex.from_product([range(3), range(3)]), fill_value=0)
    truth = truth.to_numpy(dtype=float)
    c, reps = 0.9, 600
    z_all = multiplier(c, cells=len(truth))
    cell_hits = np.zeros(len(truth))
    all_hits = 0
    for seed in range(reps):
        t = plan.measure(records, seed=seed).reconstruct().table(("a0", "a1"), confidence=c)
        se = np.sqrt(t["variance"].to_numpy())
        cell_hits += (t["lower"].to_numpy() <= truth) & (truth <= t["upper"].to_numpy())
        all_hits += bool(np.all(np.abs(t["estimate"].to_numpy() - truth) <= z_all * se))
    coverage = cell_hits / reps
    assert np.all(np.abs(coverage - c) <= 4 * math.sqrt(c * (1 - c) / reps)), coverage
    assert abs(coverage.mean() - c) <= 0.03
    assert all_hits / reps >= c - 4 * math.sqrt(c * (1 - c) / reps)
    # the published files carry the same intervals: estimate +- z std_error, z and the simultaneous z in tables.json
    release = plan.measure(records, seed=1)
    from querysmasher.reconstruct import reconstruct as estimates
    from querysmasher.reconstruct import write_csv_tables

    write_csv_tables(tmp_path / "tables", estimates(plan, release), confidence=c)
    index = json.loads((tmp_path / "tables" / "tables.json").read_text())
    (pair,) = [t for t in index["tables"] if t["view"] == ["a0", "a1"]]
    frame = pd.read_csv(tmp_path / "tables" / pair["file"])
    assert index["confidence"] == c and index["z"] == pytest.approx(multiplier(c)) and "exact" in index["interval"]
    assert pair["simultaneous_z"] == pytest.approx(z_all)
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
