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
        assert "simulated releases" in entry["simultaneous"]  # the simulation ran for every file
        if entry in index["answers"] and workload.startswith("prefix"):
            # prefix answers are strongly correlated: the simulation beats Šidák
            assert entry["simultaneous_z"] < sidak(0.9, n) - 1e-3 and "quantile" in entry["simultaneous"]
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


def test_a_kind_whose_estimator_takes_no_draws_axis_gets_sidak_and_a_warning(caplog):
    """HDMM's estimator solves for one vector of measurements: on the simulated draws it fails, and
    the set keeps Šidák's bound (a release never fails on its simultaneous intervals)."""
    plan = qs.make_plan("synthetic:n=4,d=2", "prefix:1", method="hdmm", rho=1.0)
    v = plan.workload.views[0]
    var = np.ones(plan.workload.view_count(v))
    with caplog.at_level("WARNING", logger="querysmasher.simultaneous"):
        out = simulated(plan, [(0, var, lambda e: e.view_answers(v))], 0.9)
    assert out == {0: bound(plan, 0.9, len(var))} and "simulation failed" in caplog.text


def test_a_batch_holds_at_most_batch_values_with_the_estimators_largest_marginal(monkeypatch):
    """A view of 60 x 60 cells with 60 answers (|a1 - a2|): each simulated batch times the cells the
    estimator reconstructs per draw stays within ``batch_values`` (counting only measured values and
    answers let a batch of thousands of draws of every cell through)."""
    import querysmasher.simultaneous as sim

    plan = qs.make_plan("synthetic:n=60,d=2", "abs:2", method="qs", beta=0.5)
    v = plan.workload.views[0]
    batches = []
    draw = sim._simulated_noise
    monkeypatch.setattr(sim, "_simulated_noise", lambda ms, b, seed: batches.append(b) or draw(ms, b, seed))
    settings = SimultaneousSettings(draws=400, risk=1e-3, batch_values=1 << 17)
    sim.simulated(plan, [(0, variances_of(plan).view(v), lambda e: e.view_answers(v))], 0.9, settings)
    assert sum(batches) == 400 and max(batches) * 60 * 60 <= settings.batch_values


def test_simulated_noise_reads_by_position_from_either_end_and_refuses_slices():
    from querysmasher.simultaneous import _SimulatedNoise

    plan = _residual_plan()
    ms = qs.measure.measurements_of(plan)
    y = _SimulatedNoise(ms, 3, (1, 0))
    assert np.array_equal(y[-1], y[len(ms) - 1]) and y[0].shape == (ms[0].rows, 3)
    with pytest.raises(IndexError):
        y[len(ms)]
    with pytest.raises(TypeError, match="one at a time"):
        y[0:2]


def test_a_release_finds_its_multipliers_before_it_reads_a_record(monkeypatch, tmp_path):
    """The simulation needs the plan only: a release runs it before the records are read, so nothing
    it does can fail a release after its noise is drawn."""
    import querysmasher.data as record_data
    import querysmasher.tablefiles as tablefiles
    from querysmasher.release import load_release_spec, run_release

    order = []
    found = tablefiles.simultaneous_multipliers
    monkeypatch.setattr(tablefiles, "simultaneous_multipliers", lambda *a, **k: order.append("z") or found(*a, **k))
    load = record_data.load_records
    monkeypatch.setattr(record_data, "load_records", lambda *a, **k: order.append("records") or load(*a, **k))
    rng = np.random.default_rng(0)
    pd.DataFrame({"a": rng.integers(0, 4, 80), "b": rng.integers(0, 3, 80)}).to_csv(tmp_path / "d.csv", index=False)
    (tmp_path / "domain.yaml").write_text("a: 4\nb: 3\n")
    (tmp_path / "spec.yaml").write_text(
        "data: d.csv\ndomain: domain.yaml\ntables: [{prefix: [a, b]}]\nbudget: {rho: 1.0}\n"
    )
    run_release(load_release_spec(tmp_path / "spec.yaml"), tmp_path / "out")
    assert order == ["z", "records"]
    index = json.loads((tmp_path / "out" / "tables.json").read_text())
    assert all("simulated releases" in e["simultaneous"] for e in index["tables"] + index["answers"] if e["file"])
