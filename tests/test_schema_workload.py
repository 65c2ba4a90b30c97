import json

import pytest

from querysmasher.errors import InputError
from querysmasher.schema import BUILTIN_SCHEMAS, parse_schema
from querysmasher.workload import parse_workload


def test_builtin_schemas_have_the_papers_sizes():
    assert parse_schema("cps").sizes == (50, 100, 7, 4, 2)
    adult = parse_schema("adult")
    assert adult.sizes == (100, 100, 100, 99, 85, 42, 16, 15, 9, 7, 6, 5, 2, 2)
    assert adult.kinds.count("numeric") == 5
    assert parse_schema("loans").sizes == (101, 101, 101, 101, 51, 36, 15, 8, 6, 5, 4, 3)
    assert set(parse_schema("adult", all_numeric=True).kinds) == {"numeric"}


def test_adult_schema_names_are_the_csv_columns(adult_data):
    header = (adult_data / "adult.csv").read_text().splitlines()[0].split(",")
    assert sorted(header) == sorted(BUILTIN_SCHEMAS["adult"].names)
    domain = json.loads((adult_data / "adult-domain.json").read_text())
    from_file = parse_schema(str(adult_data / "adult-domain.json"))
    assert dict(zip(from_file.names, from_file.sizes)) == domain
    assert {n: s for n, s in zip(BUILTIN_SCHEMAS["adult"].names, BUILTIN_SCHEMAS["adult"].sizes)} == domain


def test_schema_file_with_kinds(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("a: {size: 3, kind: categorical}\nb: 5\nc: {categories: [x, y]}\n")
    s = parse_schema(str(p))
    assert s.sizes == (3, 5, 2) and s.kinds == ("categorical", "numeric", "categorical")


@pytest.mark.parametrize(
    "spec, bad",
    [("synthetic:n=x,d=3", "synthetic"), ("nope", "not a built-in"), ("synthetic:n=0,d=3", "n and d")],
)
def test_bad_schema_names_the_value(spec, bad):
    with pytest.raises(InputError, match=bad):
        parse_schema(spec)


@pytest.mark.parametrize(
    "spec, n, count",
    [
        ("marginal:1,2", 10, 78_400),
        ("marginal:1,2", 20, 312_800),
        ("prefix:1,2", 10, 78_400),
        ("prefix:1,2", 20, 312_800),
        ("range:1,2", 10, 2_361_700),
        ("range:1,2", 20, 34_406_400),
        ("circular:1,2", 10, 7_804_000),
        ("circular:1,2", 20, 124_816_000),
        ("prefix:1+affine:2", 10, 15_220),
        ("prefix:1+affine:2", 20, 31_220),
        ("prefix:1+abs:2", 10, 8_200),
        ("prefix:1+abs:2", 20, 16_400),
        ("random:1,2", 10, 235_200),
        ("random:1,2", 20, 938_400),
    ],
)
def test_query_counts_match_the_paper(spec, n, count):
    w = parse_workload(spec, parse_schema(f"synthetic:n={n},d=40"))
    assert w.query_count() == count


def test_hybrid_count_on_cps_and_view_counts():
    w = parse_workload("hybrid:1,2,3", parse_schema("cps"))
    assert w.query_count() == 79_719
    assert len(parse_workload("range:1+affine:2+prefix:3", parse_schema("synthetic:n=40,d=40")).views) == 10_700


def test_weights_count_as_multiplicities():
    w = parse_workload("prefix:1@2.5+marginal:1", parse_schema("synthetic:n=10,d=3"))
    assert w.query_count() == 60 and w.query_count(weighted=True) == 30 * 2.5 + 30
    assert w.spec == "prefix:1@2.5+marginal:1"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("pre:1", "unknown family 'pre'"),
        ("prefix:7", "K = 7"),
        ("prefix:0", "K = 0"),
        ("affine:1", "two-way"),
        ("prefix:1@-1", "positive"),
        ("prefix", "FAMILY:K1,K2"),
        ("", "empty"),
        ("prefix[seed=1]:1", "not allowed"),
    ],
)
def test_bad_workloads_name_the_problem(tiny_schema, spec, message):
    with pytest.raises(InputError, match=message.replace("[", r"\[")):
        parse_workload(spec, tiny_schema)


def test_random_is_reproducible_from_its_seed():
    from querysmasher.decompose import view_query_matrix

    s = parse_schema("synthetic:n=3,d=3")
    w1, w2, w3 = (parse_workload(f"random[seed={k}]:2", s) for k in (7, 7, 8))
    q1, q2, q3 = (view_query_matrix(w, w.views[0]) for w in (w1, w2, w3))
    assert (q1 == q2).all() and not (q1 == q3).all()
    assert q1.shape == (27, 9)


def test_custom_queries_from_a_file(tmp_path):
    p = tmp_path / "q.json"
    p.write_text(json.dumps({"attributes": ["a0", "a2"], "queries": [[1, 0, 0, 1], [0, 1, 1, 0], [1, 1, 1, 1]]}))
    w = parse_workload(f"custom:{p}@2", parse_schema("synthetic:n=2,d=3"))
    assert w.views[0].attrs == (0, 2) and w.query_count() == 3 and w.query_count(weighted=True) == 6
    p.write_text(json.dumps({"attributes": ["a0"], "queries": [[1, 0, 0]]}))
    with pytest.raises(InputError, match="3 columns"):
        parse_workload(f"custom:{p}", parse_schema("synthetic:n=2,d=3"))
