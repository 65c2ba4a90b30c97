"""qsplus on degenerate cases: attributes of size 1, a single pair, a workload of 1-way views only,
a workload the family cannot improve, a schema of size-1 attributes only. Each plans (no
traceback), is certified within its target gap and is never above qs."""

import json

import pytest

import querysmasher as qs
from querysmasher.errors import InputError

GAP = 1e-4


def _schema(tmp_path, sizes: dict) -> str:
    path = tmp_path / "domain.json"
    path.write_text(json.dumps(sizes))
    return str(path)


def _not_above_qs(plan):
    """qs's plan of the same workload, after checking that ``plan`` is not above it."""
    qs_plan = qs.make_plan(plan.schema, plan.workload.spec, method="qs", beta=1.0)
    assert plan.rmse <= qs_plan.rmse * (1 + 1e-9)
    return qs_plan


@pytest.mark.parametrize("workload", ["abs:2", "prefix:1+affine:2"])
def test_an_attribute_of_size_1_plans_certified_and_not_above_qs(tmp_path, workload):
    plan = qs.make_plan(_schema(tmp_path, {"a": 1, "b": 3, "c": 2}), workload, method="qsplus", beta=1.0)
    _not_above_qs(plan)
    assert plan.gap <= GAP


def test_one_pair_is_the_exact_matrix_mechanism(tmp_path):
    """One pair view is the whole domain: the family contains every Gaussian matrix mechanism, so
    qsplus reaches mm's certified optimum (both within their gaps)."""
    schema = _schema(tmp_path, {"a": 3, "b": 4})
    plan = qs.make_plan(schema, "affine:2", method="qsplus", beta=1.0)
    mm = qs.make_plan(schema, "affine:2", method="mm", beta=1.0)
    qs_plan = _not_above_qs(plan)
    assert plan.gap <= GAP and plan.rmse < 0.9 * qs_plan.rmse
    assert plan.rmse == pytest.approx(mm.rmse, rel=2 * GAP)


@pytest.mark.parametrize("workload", ["marginal:2", "marginal:1"])
def test_a_workload_the_family_cannot_improve_keeps_qs(tmp_path, workload):
    """Marginals: the residual mechanisms are optimal among all matrix mechanisms, so qsplus gives
    qs's error (and a workload of 1-way views only plans, with its views in the family)."""
    plan = qs.make_plan(_schema(tmp_path, {"a": 3, "b": 4}), workload, method="qsplus", beta=1.0)
    qs_plan = _not_above_qs(plan)
    assert plan.gap <= GAP and plan.rmse == pytest.approx(qs_plan.rmse, rel=GAP)


def test_a_schema_of_size_1_attributes_is_one_clear_error(tmp_path):
    with pytest.raises(InputError, match="no attribute of size above 1"):
        qs.make_plan(_schema(tmp_path, {"a": 1, "b": 1}), "abs:2", method="qsplus", beta=1.0)
