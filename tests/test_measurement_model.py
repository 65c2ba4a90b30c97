"""The one measurement model (issue 41): for every built-in plan kind, the privacy cost of what
``measure`` releases, by brute force over every neighbouring pair of a small domain, is within the
budget; the measurements file round-trips any kind; mixed noise kinds and an edited cost are refused
before any record is read."""

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from bruteforce import full_workload

import querysmasher as qs
from querysmasher.data import validate_records
from querysmasher.errors import InputError
from querysmasher.measure import (
    check_plan,
    load_measurements,
    measure,
    measure_iter,
    measurements_of,
    save_measurements,
)
from querysmasher.measurement import LinearMeasurement
from querysmasher.noise import NoiseSource
from querysmasher.reconstruct import reconstruct
from querysmasher.schema import Attribute, Schema

SCHEMA = "synthetic:n=3,d=3"
CASES = [  # (method, workload, make_plan keywords)
    ("qs", "prefix:1+marginal:2", {}),
    ("rp", "marginal:2", {}),
    ("mm", "marginal:2", {}),
    ("qsplus", "prefix:1+affine:2", {"options": {"target_gap": 1e-3}}),
    ("hdmm", "marginal:2", {}),
    ("hdmm", "prefix:1,2", {"noise": "laplace", "epsilon": 1.0}),
    ("qs", "marginal:2", {"neighbours": "replace"}),
    # 1-attribute views: qsplus's mechanisms on whole 1-way marginals (total and residual together)
    ("qsplus", "prefix:1", {"schema": Schema("uneven", (Attribute("a", 3, "numeric"), Attribute("b", 4, "numeric")))}),
    # an attribute of size 1 (constant): qsplus's views are over the others
    (
        "qsplus",
        "abs:2",
        {
            "schema": Schema(
                "one", (Attribute("a", 3, "numeric"), Attribute("b", 1, "numeric"), Attribute("c", 4, "numeric"))
            )
        },
    ),
]


class _NoNoise:
    """A numpy-like generator that draws zeros: measure then releases the clean operator output."""

    def standard_normal(self, shape):
        return np.zeros(shape)

    def laplace(self, loc, scale, shape):
        return np.zeros(shape)


def _released(plan, cell) -> list[np.ndarray]:
    """What measure releases, without noise, for one record in ``cell`` (the operator applied)."""
    records = validate_records(pd.DataFrame([cell], columns=plan.schema.names), plan.schema)
    return [np.asarray(y, dtype=float) for _, y in measure_iter(plan, records, NoiseSource("numpy", True, _NoNoise()))]


def _id(method, workload, kw) -> str:
    return "-".join([method, workload] + [v.name if isinstance(v, Schema) else str(v) for v in kw.values()])


@pytest.fixture(scope="module", params=CASES, ids=[_id(*c) for c in CASES])
def plan(request):
    method, workload, kw = request.param
    kw = dict(kw)
    return qs.make_plan(kw.pop("schema", SCHEMA), workload, method=method, **kw)


def test_the_applied_operators_cost_at_most_the_budget_by_brute_force(plan):
    """Every cell of the domain: the released vectors of one record there, each over its noise
    scale (squared L2 for Gaussian noise, L1 for Laplace), summed over measurements; add-remove
    compares with no record (every operator is linear), replace with the record in any other cell."""
    ms = measurements_of(plan)
    cells = list(itertools.product(*(range(n) for n in plan.schema.sizes)))
    out = {c: _released(plan, c) for c in cells}
    laplace = ms[0].noise == "laplace"

    def cost(ys):
        return sum((np.abs(y).sum() if laplace else float(y @ y)) / m.scale for m, y in zip(ms, ys))

    if plan.budget.neighbours == "replace":
        worst = max(cost([a - b for a, b in zip(out[c], out[d])]) for c in cells for d in cells)
    else:
        worst = max(cost(ys) for ys in out.values())
    limit = plan.budget.epsilon if laplace else plan.budget.beta
    declared = check_plan(plan)
    assert worst <= declared * (1 + 1e-9) and declared <= limit
    assert worst >= 0.5 * limit  # the budget is spent, not wasted (the check is not vacuous)


def _records(plan, rng, n: int = 50):
    frame = pd.DataFrame({a.name: rng.integers(0, a.size, n) for a in plan.schema.attributes})
    return validate_records(frame, plan.schema)


def test_noise_free_measurements_reconstruct_every_answer_exactly(plan):
    """The estimators are unbiased: without noise every workload answer is the true one (the
    workload's queries over the full domain, built independently of the library)."""
    records = _records(plan, np.random.default_rng(2))
    meas = measure(plan, records, NoiseSource("numpy", True, _NoNoise()), seeded=True)
    est = reconstruct(plan, meas)
    x = np.zeros(math.prod(plan.schema.sizes))
    np.add.at(x, np.ravel_multi_index(records.codes.T, plan.schema.sizes), 1.0)
    truth, _ = full_workload(plan.workload)
    got = np.concatenate([np.asarray(est.view_answers(v), dtype=float).ravel() for v in plan.workload.views])
    assert np.allclose(got, truth @ x, rtol=1e-8, atol=1e-7)


def test_the_measurements_file_round_trips_every_kind(plan, tmp_path):
    rng = np.random.default_rng(1)
    records = _records(plan, rng)
    meas = measure(plan, records, rng, seeded=True)
    path = tmp_path / "m.h5"
    save_measurements(path, plan, zip(meas.index, meas.y), seeded=True, plan_sha256="d", sampler="numpy")
    with load_measurements(path, "d", plan) as back:
        assert np.array_equal(back.index, meas.index) and back.seeded and back.sampler == "numpy"
        for a, b in zip(back.y, meas.y):
            assert np.array_equal(np.asarray(a), b)
        est, again = reconstruct(plan, meas), reconstruct(plan, back)
        for v in plan.workload.views:
            assert np.array_equal(est.view_answers(v), again.view_answers(v))


def test_an_understated_cost_or_mixed_noise_is_refused_before_records(monkeypatch):
    plan = qs.make_plan(SCHEMA, "marginal:2", method="rp")
    ms = measurements_of(plan)
    halved = [LinearMeasurement(m.attrs, m.rows, m.apply, m.noise, m.scale / 2, m.cost, m.index) for m in ms]
    mixed = ms[:-1] + [LinearMeasurement(ms[-1].attrs, ms[-1].rows, ms[-1].apply, "laplace", 1e6, 1.0, ms[-1].index)]
    for edited, needle in ((halved, "exceeds its budget"), (mixed, "mix noise kinds")):
        monkeypatch.setattr("querysmasher.residualkind.residual_measurements", lambda p, e=edited: e)
        with pytest.raises(InputError, match=needle):
            check_plan(plan)
        with pytest.raises(InputError, match=needle):  # measuring re-checks on what it applies
            next(measure_iter(plan, object(), np.random.default_rng(0)))


def test_an_hdmm_strategy_that_misses_its_views_is_refused_before_records():
    """A valid strategy record (unit diagonal, privacy cost 1) of rank 1 on the first attribute
    cannot answer a marginal on it: the kind's check refuses it (before, only the noise scales were
    checked and the answers were silently biased)."""
    import dataclasses

    from querysmasher.hdmm.implicit import KronStrategy

    plan = qs.make_plan(SCHEMA, "marginal:1", method="hdmm")
    check_plan(plan)
    g = plan.groups[0]
    blind = KronStrategy.single((np.ones((3, 3)), np.eye(3), np.eye(3)))
    edited = dataclasses.replace(plan, groups=(dataclasses.replace(g, strategy=blind),) + tuple(plan.groups[1:]))
    with pytest.raises(InputError, match="does not reach its views' queries"):
        check_plan(edited)


def test_a_full_domain_mechanism_that_misses_the_workload_is_refused_before_records():
    """An mm plan whose one mechanism is replaced by a rank-deficient one (the total only, cost
    1): refused by the residual kind's check, where full-domain plans were left unchecked."""
    import dataclasses

    from querysmasher.mechanisms import ViewMechanism

    plan = qs.make_plan(SCHEMA, "marginal:1", method="mm")
    check_plan(plan)
    key = plan.keys[0]
    total = ViewMechanism("dense", (3, 3, 3), (np.ones((27, 27)),))
    sol = dataclasses.replace(plan.solutions[key], mechanism=total)
    edited = dataclasses.replace(plan, solutions={**plan.solutions, key: sol})
    with pytest.raises(InputError, match="does not reach the workload's queries"):
        check_plan(edited)
