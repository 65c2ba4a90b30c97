"""Consistent non-negative tables (querysmasher.consistent): non-negative, equal on every shared
margin, no worse a fit to the noisy measurements than the true tables (which are feasible), equal
to the unbiased tables where those are already consistent and far from zero; and a release spec's
``postprocess: consistent`` writes them, labelled."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml

import querysmasher as qs
from querysmasher.cli import main
from querysmasher.consistent import consistent_tables
from querysmasher.fulldomain import marginalise
from querysmasher.measure import measurements_of
from querysmasher.reconstruct import reconstruct

TABLES = [(0,), (1,), (2,), (0, 1), (1, 2)]


def _setup(beta, n=60, seed=0):
    plan = qs.make_plan("synthetic:n=3,d=3", "marginal:(a0,a1)+prefix:(a1,a2)+marginal:1", method="qs", beta=beta)
    rng = np.random.default_rng(seed)
    records = pd.DataFrame({a.name: rng.integers(0, a.size, n) for a in plan.schema.attributes})
    full = np.zeros(27)
    np.add.at(full, np.ravel_multi_index(records.to_numpy().T, (3, 3, 3)), 1.0)
    return plan, records, full


def _loss(plan, release, tables):
    """sum_k ||Q_k M_k T - y_k||^2 / sigma_k^2 over the measurements inside a table (the objective)."""
    sizes = plan.schema.sizes
    ys = {int(i): np.asarray(y).reshape(-1) for i, y in zip(release.index, release.y)}
    total = 0.0
    for m in measurements_of(plan):
        home = next(t for t in TABLES if set(m.attrs) <= set(t))
        local = tuple(sizes[a] for a in home)
        sub = marginalise(tables[home], local, tuple(i for i, a in enumerate(home) if a in m.attrs))
        total += float(np.sum((np.asarray(m.apply(sub)).reshape(-1) - ys[m.index]) ** 2)) / m.scale
    return total


def test_consistent_tables_are_non_negative_agree_and_fit_no_worse_than_the_truth():
    plan, records, full = _setup(beta=0.05)
    release = plan.measure(records, seed=1)
    est = reconstruct(plan, release)
    assert min(float(np.min(est.table(t))) for t in TABLES) < 0  # the unbiased tables are not
    agreed = consistent_tables(plan, release, TABLES)
    sizes = plan.schema.sizes
    assert all(float(v.min()) >= 0 for v in agreed.values())
    for i, a in enumerate(TABLES):
        for b in TABLES[i + 1 :]:
            shared = tuple(x for x in a if x in b)
            ma = marginalise(agreed[a], tuple(sizes[x] for x in a), tuple(a.index(x) for x in shared))
            mb = marginalise(agreed[b], tuple(sizes[x] for x in b), tuple(b.index(x) for x in shared))
            assert np.allclose(ma, mb, atol=1e-6 * max(1.0, float(ma.sum()))), (a, b)
    truth = {t: marginalise(full, sizes, t) for t in TABLES}
    assert _loss(plan, release, agreed) <= _loss(plan, release, truth) * (1 + 1e-6)


def test_where_the_unbiased_tables_are_already_consistent_and_positive_they_are_kept():
    plan, records, full = _setup(beta=1e4, n=3000)
    release = plan.measure(records, seed=2)
    est = reconstruct(plan, release)
    agreed = consistent_tables(plan, release, TABLES)
    for t in TABLES:
        unbiased = np.asarray(est.table(t))
        assert unbiased.min() > 0
        assert np.allclose(agreed[t], unbiased, rtol=1e-4, atol=1e-3), t


def test_a_release_spec_writes_consistent_tables_labelled(tmp_path):
    rng = np.random.default_rng(0)
    pd.DataFrame({"age": rng.integers(0, 4, 80), "sex": rng.integers(0, 2, 80)}).to_csv(tmp_path / "d.csv", index=False)
    (tmp_path / "domain.yaml").write_text("age: 4\nsex: 2\n")
    raw = {
        "data": "d.csv",
        "domain": "domain.yaml",
        "tables": [{"marginal": ["age", "sex"]}, {"prefix": ["age"]}],
        "budget": {"rho": 0.01},
        "postprocess": "consistent",
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(raw))
    out = tmp_path / "release"
    assert main(["release", str(tmp_path / "spec.yaml"), "--out", str(out)]) == 0
    index = json.loads((out / "tables.json").read_text())
    assert "biased" in index["consistent_note"]
    files = {tuple(t["view"]): t.get("consistent") for t in index["tables"]}
    pair, age = pd.read_csv(out / files[("age", "sex")]), pd.read_csv(out / files[("age",)])
    assert (pair["estimate"] >= 0).all() and (age["estimate"] >= 0).all()
    assert np.allclose(pair.groupby("age")["estimate"].sum().to_numpy(), age["estimate"].to_numpy(), atol=1e-5)
    assert math.isclose(pair["estimate"].sum(), age["estimate"].sum(), rel_tol=1e-6, abs_tol=1e-5)


def test_postprocess_takes_true_false_or_consistent():
    from querysmasher.errors import InputError
    from querysmasher.release import parse_release_spec

    base = {"data": "d.csv", "domain": "dom.yaml", "tables": [{"marginal": ["a"]}], "budget": {"rho": 0.5}}
    assert parse_release_spec({**base, "postprocess": "consistent"}).consistent
    assert parse_release_spec({**base, "postprocess": True}).postprocess
    with pytest.raises(InputError, match="release spec: postprocess"):
        parse_release_spec({**base, "postprocess": "yes"})
