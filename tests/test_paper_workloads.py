"""The workload files of the paper's Table 3 (config/paper/table3_workloads.py)."""

import importlib.util
import itertools
from pathlib import Path

import pytest

from querysmasher.schema import parse_schema
from querysmasher.workload import parse_workload

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("table3_workloads", REPO / "config" / "paper" / "table3_workloads.py")
table3 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(table3)

# The paper's Table 3 #Queries column (affine / abs_diff).
PAPER_QUERIES = {
    ("cps", "affine"): 805,
    ("cps", "abs"): 731,
    ("adult", "affine"): 99_830,
    ("adult", "abs"): 99_200,
    ("loans", "affine"): 66_318,
    ("loans", "abs"): 65_682,
}


@pytest.mark.parametrize("schema, family", sorted(PAPER_QUERIES))
def test_table3_as_run_has_the_papers_query_count(schema, family):
    path = table3.table3_path(schema, family, "asrun")
    w = parse_workload(str(path), parse_schema(schema))
    assert w.query_count() == PAPER_QUERIES[(schema, family)]


@pytest.mark.parametrize("schema, family", sorted(PAPER_QUERIES))
def test_table3_versions_cover_every_pair_once(schema, family):
    s = parse_schema(schema)
    pairs = set(itertools.combinations(range(len(s)), 2))
    asrun = parse_workload(str(table3.table3_path(schema, family, "asrun")), s)
    described = parse_workload(str(table3.table3_path(schema, family, "described")), s)
    for w in (asrun, described):
        assert sorted(v.attrs for v in w.views if len(v.attrs) == 1) == [(i,) for i in range(len(s))]
        assert sorted(v.attrs for v in w.views if len(v.attrs) == 2) == sorted(pairs)
    big = {(i, j) for i, j in pairs if (s.sizes[i] - 1) * (s.sizes[j] - 1) > table3.PAIR_CELL_LIMIT}
    assert {v.attrs for v in asrun.views if v.family == "hybrid" and len(v.attrs) == 2} == big
    assert {v.attrs for v in described.views if v.family == family} == pairs
    if not big:  # CPS: every pair is small, so both versions are the same workload
        assert asrun.query_count() == described.query_count()


@pytest.mark.parametrize("schema, family, version", itertools.product(table3.SCHEMAS, table3.FAMILIES, table3.VERSIONS))
def test_table3_files_are_up_to_date(schema, family, version):
    assert table3.table3_path(schema, family, version).read_text() == table3.render(schema, family, version)
