"""Real data end to end: hybrid:1,2 on Adult with qs, measured and reconstructed from the CSV."""

import numpy as np
import pytest
from bruteforce import product_answers

from querysmasher.accounting import Budget
from querysmasher.data import load_records
from querysmasher.measure import measure
from querysmasher.planning import make_plan
from querysmasher.reconstruct import reconstruct
from querysmasher.schema import parse_schema


@pytest.mark.parametrize("seed", [0, 1])
def test_adult_hybrid_empirical_rmse_matches_prediction(adult_data, seed):
    schema = parse_schema("adult")
    records = load_records(adult_data / "adult.csv", schema, domain_file=adult_data / "adult-domain.json")
    assert len(records) == 48_842 and records.dropped == 0
    plan = make_plan(schema, "hybrid:1,2", "qs", Budget.from_beta(1.0))
    assert plan.summary()["gap"] <= 1e-4
    rec = reconstruct(plan, measure(plan, records, np.random.default_rng(seed)))
    sq, n = 0.0, 0
    for v in plan.workload.views:
        shape = tuple(schema.sizes[a] for a in v.attrs)  # the records' marginal, counted here
        table = np.bincount(
            np.ravel_multi_index(tuple(records.codes[:, list(v.attrs)].T), shape), minlength=int(np.prod(shape))
        )
        truth = product_answers(plan.workload, v, table.reshape(shape))
        sq += float(np.sum((rec.view_answers(v) - truth) ** 2))
        n += truth.size
    assert n == plan.queries == 148_725
    assert np.sqrt(sq / n) == pytest.approx(plan.rmse, rel=0.10)
