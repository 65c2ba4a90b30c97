"""Simultaneous intervals (querysmasher.simultaneous): the order-statistic rank against the binomial
law, Šidák's bound, the simulated multiplier against the exact coverage of the max of correlated
Gaussians (the covariance from the plan's own variance formula, integrated by scipy), coverage by
Monte Carlo on the applied release path, every plan kind with tables, and the fallbacks."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

import querysmasher as qs
from querysmasher.data import marginal, validate_records
from querysmasher.decompose import view_answers
from querysmasher.intervals import multiplier
from querysmasher.measure import measure
from querysmasher.reconstruct import reconstruct, release_tables, variances_of
from querysmasher.simultaneous import (
    SIMULTANEOUS,
    SimultaneousSettings,
    bound,
    is_simulated,
    order_statistic_rank,
    sidak,
    simulated,
)
from querysmasher.tablefiles import write_table_files
from querysmasher.variances import query_variances


@pytest.mark.parametrize("draws,c,risk", [(20_000, 0.95, 1e-6), (500, 0.9, 1e-3), (100, 0.5, 0.01)])
def test_the_rank_is_the_least_with_binomial_tail_at_most_the_risk(draws, c, risk):
    k = order_statistic_rank(draws, c, risk)
    assert scipy.stats.binom.sf(k - 1, draws, c) <= risk < scipy.stats.binom.sf(k - 2, draws, c)
    assert order_statistic_rank(10, 0.95, 1e-6) == 11  # no rank of 10 draws is enough


@pytest.mark.parametrize("c", [0.5, 0.9, 0.95, 0.999])
def test_sidak_is_between_the_per_cell_z_and_bonferroni(c):
    assert sidak(c, 1) == pytest.approx(multiplier(c), rel=1e-12)
    for m in (2, 9, 10_000, 10**9):
        z = sidak(c, m)
        # each cell at level c^(1/m) (1 - c^(1/m) taken without cancellation for large m)
        assert z == pytest.approx(scipy.stats.norm.isf(-math.expm1(math.log(c) / m) / 2), rel=1e-9)
        assert multiplier(c) < z < multiplier(c, cells=m)
        # independent cells: Šidák is exact
        assert math.exp(m * math.log1p(-2 * scipy.stats.norm.sf(z))) == pytest.approx(c, rel=1e-7)


def _residual_plan(workload="prefix:1", n=8, d=2):
    return qs.make_plan(f"synthetic:n={n},d={d}", workload, method="qs", beta=0.5)


def _covariance(plan, attrs, queries):
    """The exact covariance of the answers to ``queries`` from the plan's variance formula alone:
    cov(i, j) = (var(q_i + q_j) - var(q_i) - var(q_j)) / 2."""
    var = query_variances(plan, attrs, queries)
    m = len(queries)
    pairs = np.array([queries[i] + queries[j] for i in range(m) for j in range(m)])
    both = query_variances(plan, attrs, pairs).reshape(m, m)
    return (both - var[:, None] - var[None, :]) / 2


@pytest.mark.parametrize("c", [0.9, 0.95])
def test_the_simulated_z_covers_the_max_of_the_correlated_errors_exactly(c):
    """8 prefix queries on one attribute (strongly correlated answers): the simulated z's coverage,
    integrated under the exact covariance by scipy, is at least c and above it only by the rank's
    margin; Šidák's z (what a table gets without the simulation) over-covers."""
    plan = _residual_plan()
    v = plan.workload.views[0]
    queries = np.tril(np.ones((8, 8)))
    cov = _covariance(plan, v.attrs, queries)
    se = np.sqrt(np.diag(cov))
    assert np.allclose(se**2, variances_of(plan).view(v))  # the queries are the view's prefix queries
    assert np.min(cov / np.outer(se, se)) > 0.1  # the errors are all positively correlated
    ((z, how),) = simulated(plan, [("prefix", se**2, lambda est: est.view_answers(v))], c).values()
    assert "simulated" in how and z < sidak(c, 8)

    def coverage(z):
        law = scipy.stats.multivariate_normal(cov=cov, seed=0, abseps=1e-5, releps=0)
        return law.cdf(z * se, lower_limit=-z * se)

    margin = order_statistic_rank(SIMULTANEOUS.draws, c, SIMULTANEOUS.risk) / SIMULTANEOUS.draws - c
    assert c - 1e-5 <= coverage(z) <= c + margin + 4 * math.sqrt(c * (1 - c) / SIMULTANEOUS.draws)
    assert coverage(sidak(c, 8)) > coverage(z) + 1e-4


def test_simultaneous_intervals_cover_at_the_stated_level_on_the_release_path():
    """4,000 releases (seeded draws of the applied measurements, one reconstruction): a table's
    simultaneous interval covers all 9 cells at once, and each answer view's all its prefix answers
    at once, in c of them within the binomial band and the rank's margin."""
    plan = qs.make_plan("synthetic:n=3,d=2", "prefix:1,2", method="qs", beta=0.5)
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({a.name: rng.integers(0, a.size, 200) for a in plan.schema.attributes})
    records = validate_records(frame, plan.schema)
    c, draws = 0.9, 4000
    est = reconstruct(plan, measure(plan, records, rng, seeded=True, draws=draws))
    var, sizes = variances_of(plan), plan.schema.sizes
    sets = [((0, 1), var.cells((0, 1))[0], lambda e: e.table((0, 1)), marginal(records, (0, 1), sizes))]
    for v in plan.workload.views:
        truth = view_answers(plan.workload, v, marginal(records, v.attrs, sizes))
        sets.append((v, var.view(v), lambda e, v=v: e.view_answers(v), truth))
    z = simulated(plan, [s[:3] for s in sets], c)
    margin = order_statistic_rank(SIMULTANEOUS.draws, c, SIMULTANEOUS.risk) / SIMULTANEOUS.draws - c
    band = 4 * math.sqrt(c * (1 - c) / draws)
    for key, variances, errors, truth in sets:
        got = np.asarray(errors(est)).reshape(len(variances), draws)
        hits = np.all(np.abs(got - truth[:, None]) <= z[key][0] * np.sqrt(variances)[:, None], axis=0)
        assert c - band <= hits.mean() <= c + margin + band, (key, hits.mean(), z[key])


@pytest.mark.parametrize(
    "method,workload",
    [("qs", "marginal:1,2"), ("rp", "prefix:2"), ("mm", "marginal:2"), ("qsplus", "prefix:2"), ("wff", "prefix:1,2")],
)
def test_every_plan_kind_with_tables_gets_a_simulated_z_at_most_sidaks(tmp_path, method, workload):
    plan = qs.make_plan("synthetic:n=3,d=3", workload, method=method, beta=0.5)
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({a.name: rng.integers(0, a.size, 50) for a in plan.schema.attributes})
    noise = qs.noise.make_noise(7, "numpy")
    tables, view_answers, total, _ = release_tables(plan, validate_records(frame, plan.schema), noise)
    small = SimultaneousSettings(draws=2000, risk=1e-3)
    index = write_table_files(tmp_path, plan, tables, view_answers, total=total, confidence=0.9)
    assert index == json.loads((tmp_path / "tables.json").read_text())
    written = [t for t in index["tables"] if t["file"]] + index["answers"]
    assert written
    for entry in written:
        n = len(pd.read_csv(tmp_path / entry["file"]))
        assert entry["simultaneous_z"] <= sidak(0.9, n) + 1e-12 and entry["simultaneous_z"] > multiplier(0.9)
        assert entry["simultaneous"]
    v = plan.workload.views[0]
    var = variances_of(plan).view(v)
    ((z, _),) = simulated(plan, [(0, var, lambda e: e.view_answers(v))], 0.9, small).values()
    assert multiplier(0.9) < z <= sidak(0.9, len(var))


def test_laplace_plans_take_bonferroni_and_large_plans_sidak():
    pure = qs.make_plan("synthetic:n=3,d=2", "marginal:1", method="hdmm", noise="laplace", epsilon=1.0)
    z, how = bound(pure, 0.95, 3)
    assert z == pytest.approx(multiplier(0.95, gaussian=False, cells=3)) and "Bonferroni" in how
    assert not is_simulated(pure, 3)
    plan = _residual_plan()
    assert is_simulated(plan, 8)
    assert not is_simulated(plan, 8, SimultaneousSettings(max_values=1000))
    z, how = bound(plan, 0.95, 8)
    assert z == sidak(0.95, 8) and "Sidak" in how
    # too few draws for any rank at this risk: the bound stands
    v = plan.workload.views[0]
    few = SimultaneousSettings(draws=10)
    assert simulated(plan, [(0, variances_of(plan).view(v), lambda e: e.view_answers(v))], 0.95, few)[0] == (z, how)
