"""Workload terms that name their attribute subsets, and workload files (YAML/JSON)."""

import numpy as np
import pytest
from bruteforce import pair_matrix

from querysmasher.decompose import view_query_matrix
from querysmasher.errors import InputError
from querysmasher.families import pair_count
from querysmasher.schema import parse_schema
from querysmasher.workload import is_workload_file, parse_workload, workload_file_spec, workload_input_files

CPS = parse_schema("cps")


@pytest.mark.parametrize(
    "spec, views, count",
    [
        ("affine:(income,age)", [(0, 1)], 149),
        ("abs:(age,income)", [(0, 1)], 100),
        ("hybrid:(income,marital)", [(0, 2)], 50 * 7),
        ("marginal:(age,sex)@2", [(1, 4)], 200),
        ("prefix:(race)", [(3,)], 4),
        ("range:(sex,income,race)", [(0, 3, 4)], 1275 * 10 * 3),
        ("affine:(income,age),(race,sex)", [(0, 1), (3, 4)], 149 + 5),
        ("random[seed=2]:(marital,race)", [(2, 3)], 3 * 28),
    ],
)
def test_named_subsets_are_the_views(spec, views, count):
    w = parse_workload(spec, CPS)
    assert [v.attrs for v in w.views] == views
    assert w.query_count() == count


def test_named_subset_is_the_same_view_as_the_k_term(tiny_schema):
    """affine:(a,b) on every pair is affine:2: same views, same queries, same counts."""
    s = tiny_schema
    named = parse_workload("affine:(a0,a1),(a0,a2),(a1,a2)+hybrid:(a2)", s)
    k_term = parse_workload("affine:2+hybrid:1", s)
    assert [v.attrs for v in named.views] == [v.attrs for v in k_term.views if v.family == "affine"] + [(2,)]
    for a, b in zip(named.views[:3], k_term.views[:3]):
        assert np.array_equal(view_query_matrix(named, a), view_query_matrix(k_term, b))
        assert np.array_equal(view_query_matrix(named, a), pair_matrix("affine", 4, 4))  # A_i + A_j <= c, c = 0..6


def test_hybrid_on_a_named_pair_is_prefix_times_identity():
    w = parse_workload("hybrid:(age,sex)", CPS)
    assert w.views[0].factors == ("prefix", "marginal")
    assert w.query_count() == 100 * 2


def test_spec_is_canonical_and_round_trips():
    w = parse_workload("hybrid:1 + affine:( age , income )@0.5+abs:(sex,marital)", CPS)
    assert w.spec == "hybrid:1+affine:(income,age)@0.5+abs:(marital,sex)"
    again = parse_workload(w.spec, CPS)
    assert again.spec == w.spec and again.views == w.views


@pytest.mark.parametrize("weight", ["0.5", "2", "0.1234567", "1e-07", "3.0000001"])
def test_spec_keeps_weights_exactly(weight):
    """A plan file re-parses its workload from the spec: a weight must come back bit for bit
    (``:g`` alone keeps six digits: 0.1234567 came back as 0.123457)."""
    w = parse_workload(f"prefix:1@{weight}+abs:2", CPS)
    again = parse_workload(w.spec, CPS)
    assert again.views == w.views and again.views[0].weight == float(weight)
    assert w.spec.startswith(f"prefix:1@{float(weight):g}") or float(f"{float(weight):g}") != float(weight)


def test_pair_count_symmetric_on_named_pairs():
    w = parse_workload("affine:(income,sex)+abs:(income,sex)", CPS)
    assert w.query_count() == pair_count("affine", 50, 2) + pair_count("abs", 50, 2) == 51 + 50


@pytest.mark.parametrize(
    "spec, message",
    [
        ("affine:(income,agee)", "unknown attribute 'agee'"),
        ("marginal:(age,sex)+prefix:(weight)", "unknown attribute 'weight'"),
        ("affine:(income,age,sex)", "two-way family: name two attributes"),
        ("affine:(income)", "two-way family"),
        ("marginal:(age,age)", "names an attribute twice"),
        ("marginal:(age),(age)", "appears twice"),
        ("marginal:(age,)", "empty attribute name"),
        ("marginal:(age)x", "not a list of attribute subsets"),
        ("marginal:()", "empty attribute name"),
        ("marginal:(age)@0", "positive"),
        ("prefix[seed=1]:(age)", "not allowed"),
    ],
)
def test_bad_named_terms_fail_in_one_line(spec, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")) as exc:
        parse_workload(spec, CPS)
    assert "\n" not in str(exc.value)


def test_unknown_attribute_error_names_the_schema_attributes():
    with pytest.raises(InputError) as exc:
        parse_workload("affine:(income,agee)", CPS)
    assert str(exc.value) == (
        "workload 'affine:(income,agee)': unknown attribute 'agee' (schema 'cps' has: income, age, marital, race, sex)"
    )


def test_long_spec_errors_name_the_term():
    spec = "+".join(f"marginal:({a})@{w}" for a in CPS.names for w in (1, 2, 3)) + "+affine:(income,nope)"
    with pytest.raises(InputError, match=r"^workload term 'affine:\(income,nope\)': unknown attribute 'nope'"):
        parse_workload(spec, CPS)


def test_adult_names_with_punctuation():
    adult = parse_schema("adult")
    w = parse_workload("abs:(capital-gain,hours-per-week)+marginal:(income>50K,sex)", adult)
    assert [v.attrs for v in w.views] == [(1, 3), (12, 13)]


# ----------------------------------------------------------------------------- workload files


def _write(tmp_path, text, name="w.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_workload_file_is_the_same_workload_as_its_spec(tmp_path):
    path = _write(
        tmp_path,
        """
# Table-3 style: 1-way hybrid plus named pairs
- family: hybrid
  k: 1
- family: affine
  attributes: [age, income]
  weight: 2
- family: hybrid
  attributes: [[income, marital], [age, race]]
- family: random
  k: [1, 2]
  options: {seed: 3}
""",
    )
    w = parse_workload(path, CPS)
    spec = "hybrid:1+affine:(income,age)@2+hybrid:(income,marital),(age,race)+random[seed=3]:1,2"
    assert w.spec == spec and w.source == path
    assert w.views == parse_workload(spec, CPS).views
    assert parse_workload(w.spec, CPS).query_count() == w.query_count()


def test_workload_file_mapping_form_and_json(tmp_path):
    y = _write(
        tmp_path,
        "description: two terms\nterms:\n  - {family: prefix, K: 1}\n  - {family: abs, attributes: [income, age]}\n",
    )
    j = _write(tmp_path, '[{"family": "prefix", "k": 1}, {"family": "abs", "attributes": ["income", "age"]}]', "w.json")
    assert parse_workload(y, CPS).spec == parse_workload(j, CPS).spec == "prefix:1+abs:(income,age)"


def test_workload_file_custom_path_is_relative_to_the_file(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "q.json").write_text('{"attributes": ["race"], "queries": [[1, 1, 0, 0]]}')
    path = _write(tmp_path / "sub", "- {family: custom, path: q.json, weight: 3}\n")
    w = parse_workload(path, CPS)
    assert w.query_count() == 1 and w.views[0].weight == 3
    assert workload_input_files(path) == [path, str(tmp_path / "sub" / "q.json")]


@pytest.mark.parametrize(
    "text, message",
    [
        ("- {family: affine, attributes: [income, agee]}\n", "term 1.*unknown attribute 'agee'"),
        ("- {family: prefix, k: 1}\n- {family: pre, k: 1}\n", "term 2.*family 'pre' is not one of"),
        ("- {family: prefix, k: 1, attributes: [age]}\n", "exactly one of 'k'"),
        ("- {family: prefix}\n", "exactly one of 'k'"),
        ("- {family: prefix, k: 1, wieght: 2}\n", "unknown key 'wieght'"),
        ("- {family: prefix, k: 1, weight: -1}\n", "positive"),
        ("- {family: prefix, k: 1, options: {seed: 1}}\n", "option 'seed' is not allowed for prefix"),
        ("- {family: random, k: 1, options: {seed: x}}\n", "seed 'x' must be an integer"),
        ("- {family: prefix, k: [1, 9]}\n", "K = 9"),
        ("- {family: marginal, attributes: ['a+b']}\n", "without any of"),
        ("- prefix:1\n", "must be a mapping"),
        ("[]\n", "non-empty list"),
        ("- {family: prefix, k: 1\n", "is not valid YAML"),
    ],
)
def test_bad_workload_files_name_the_file_and_entry(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(InputError, match=message) as exc:
        parse_workload(path, CPS)
    assert "w.yaml" in str(exc.value) and "\n" not in str(exc.value)


def test_missing_workload_file(tmp_path):
    assert is_workload_file(str(tmp_path / "nope.yaml")) and not is_workload_file("custom:q.json")
    with pytest.raises(InputError, match="does not exist"):
        parse_workload(str(tmp_path / "nope.yaml"), CPS)


def test_workload_file_spec_without_schema(tmp_path):
    path = _write(tmp_path, "- {family: marginal, k: 2, weight: 0.5}\n")
    assert workload_file_spec(path) == "marginal:2@0.5"


def test_cli_plans_a_workload_file_and_names_unknown_attributes(tmp_path, cli):
    good = _write(tmp_path, "- {family: marginal, attributes: [race, sex]}\n")
    bad = _write(tmp_path, "- {family: marginal, attributes: [race, sx]}\n", "bad.yaml")

    def run(w):
        return cli("plan", "--schema", "cps", "--workload", w, "--method", "wff", "--json")

    ok = run(good)
    assert ok.returncode == 0, ok.stderr
    assert '"marginal:(race,sex)"' in ok.stdout
    err = run(bad)
    assert err.returncode == 2
    lines = err.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown attribute 'sx'" in lines[0] and "bad.yaml" in lines[0]


def test_workflow_grid_accepts_a_workload_file(tmp_path):
    from querysmasher.pipeline.config import check_config
    from querysmasher.pipeline.steps import read_workload_file, write_workload_file

    good = _write(tmp_path, "- {family: hybrid, k: 1}\n- {family: affine, attributes: [income, age]}\n")
    bad = _write(tmp_path, "- {family: abs, attributes: [income, agee]}\n", "bad.yaml")
    cfg = {"grid": [{"schemas": ["cps"], "workloads": [good], "methods": ["rp"]}], "release": False}
    (e,) = check_config(cfg).values()
    assert e.workload == good
    out = write_workload_file(tmp_path / "workload.h5", "cps", good)
    assert out["workload"] == "hybrid:1+affine:(income,age)" and out["queries"] == 163 + 149
    assert read_workload_file(tmp_path / "workload.h5").spec == out["workload"]
    cfg["grid"][0]["workloads"] = [bad]
    with pytest.raises(InputError, match="bad.yaml term 1.*unknown attribute 'agee'"):
        check_config(cfg)
