"""Publishable tables: per-cell estimates only where estimable, every row with its standard error."""

import json

import numpy as np
import pandas as pd
import pytest

from bruteforce import full_privacy_gram, marginal_map, pinv
from querysmasher.accounting import Budget
from querysmasher.data import validate_records
from querysmasher.measure import make_rng, measure
from querysmasher.planning import make_plan
from querysmasher.reconstruct import reconstruct
from querysmasher.schema import parse_schema
from querysmasher.tables import cells_estimable, write_tables


@pytest.fixture(scope="module")
def schema(tmp_path_factory):
    p = tmp_path_factory.mktemp("s") / "small.yaml"
    p.write_text("A: 3\nB: {size: 4, kind: categorical}\nC: 2\nD: 3\n")
    return parse_schema(str(p))


def _rec(schema, spec, method):
    plan = make_plan(schema, spec, method, Budget.from_beta(1.0))
    codes = np.random.default_rng(1).integers(0, schema.sizes, (200, len(schema)))
    records = validate_records(pd.DataFrame(codes, columns=schema.names), schema)
    rng, seeded = make_rng(0)
    return plan, reconstruct(plan, measure(plan, records, rng, seeded=seeded))


@pytest.mark.parametrize("spec, method", [("prefix:1,2", "rp"), ("marginal:2", "qs"), ("range:1+affine:2", "wff"), ("hybrid:1,2", "rpplus")])
def test_published_std_errors_are_the_brute_force_ones(tmp_path, schema, spec, method):
    plan, rec = _rec(schema, spec, method)
    index = write_tables(tmp_path, rec, postprocessed=True)
    xp = pinv(full_privacy_gram(plan))
    written = [t for t in index["tables"] if t["file"]]
    assert written
    for t in written:
        attrs = tuple(schema.index(n) for n in t["view"])
        frame = pd.read_csv(tmp_path / t["file"])
        assert list(frame.columns) == list(t["view"]) + ["estimate", "std_error"]
        m = marginal_map(schema.sizes, attrs)
        want = np.sqrt(np.einsum("ij,jk,ik->i", m, xp, m))
        assert np.allclose(frame["std_error"], want, rtol=1e-6)
        assert np.allclose(frame["estimate"], rec.table(attrs))
    for f in index["answers"]:
        a = pd.read_csv(tmp_path / f["file"])
        assert {"answer", "std_error"} <= set(a.columns) and (a["std_error"] > 0).all()
    totals = {int(pd.read_csv(tmp_path / p)["count"].sum()) for p in index["postprocessed"]}
    assert len(totals) == 1  # the post-processed tables agree on the total
    for p in index["postprocessed"]:
        c = pd.read_csv(tmp_path / p)["count"]
        assert (c >= 0).all() and c.dtype.kind == "i"
    assert json.loads((tmp_path / "tables.json").read_text()) == index


def test_rank_deficient_views_get_no_per_cell_table(tmp_path, schema):
    plan, rec = _rec(schema, "abs:2", "qs")
    ok, why = cells_estimable(plan, (0, 1))
    assert not ok and "projection" in why
    index = write_tables(tmp_path, rec)
    two_way = [t for t in index["tables"] if len(t["view"]) == 2]
    omitted = [t for t in two_way if t["file"] is None]
    assert omitted and all("projection" in t["omitted"] for t in omitted)
    for t in two_way:  # a file exactly for the estimable ones
        attrs = tuple(schema.index(n) for n in t["view"])
        assert (t["file"] is not None) == cells_estimable(plan, attrs)[0]
        assert (tmp_path / ("__".join(t["view"]) + ".csv")).exists() == (t["file"] is not None)
    assert len(index["answers"]) == len(plan.workload.views)  # the workload answers are always there
