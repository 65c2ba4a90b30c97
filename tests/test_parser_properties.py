"""Parsers of untrusted numbers (issue 40, parts 6, 7 and 9): budgets, query weights, method options,
--threads, domains, custom query files and qsplus plan files.

Every bad value is one line naming the field and the value, exit code 2 and nothing written: never a
traceback, a hang or a silently different value. Hypothesis checks that random input parses to a
valid value or is refused with an InputError, and that no budget reports a smaller delta than the one
it has, recomputed independently with 60-digit arithmetic."""

import inspect
import io
import json
import math
import tempfile
import zipfile
from pathlib import Path

import h5py
import mpmath
import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from querysmasher import threads
from querysmasher.accounting import MIN_BETA, MIN_DELTA, Budget, make_budget, parse_budget
from querysmasher.cli import main
from querysmasher.documents import parse_yaml
from querysmasher.errors import InputError
from querysmasher.methods import get_method
from querysmasher.planfiles import load_any_plan
from querysmasher.release import parse_release_spec, release_workload
from querysmasher.schema import parse_schema
from querysmasher.workload import MAX_WEIGHT, MIN_WEIGHT, check_weight, format_weight, parse_workload

ROOT = Path(__file__).resolve().parents[1]
TINY = "synthetic:n=4,d=3"
TINY_SCHEMA = parse_schema(TINY)
OPTION_METHODS = ("qs", "rpplus", "mm", "hdmm", "qsplus")  # the built-ins that declare options (rp, wff take none)


def exact_delta(beta: float, eps: float) -> mpmath.mpf:
    """delta(beta, eps) of the Gaussian mechanism by its definition, independent of accounting.py, with
    60 digits to spare after every cancellation: its two terms (each at most 1) cancel up to 300 digits
    for a delta >= 1e-300, and e^eps Phi(...) cancels the digits of eps and beta (at 60 digits in all,
    beta 7e163 came out 6e-16 for a true 0.5, and beta 6e-112 1.0000036e-56 for 9.9999999e-57)."""
    with mpmath.workdps(360 + int(math.log10(max(eps, 1.0))) + int(math.log10(max(beta, 1.0)))):
        s, e = mpmath.sqrt(mpmath.mpf(beta)), mpmath.mpf(eps)
        return mpmath.ncdf(s / 2 - e / s) - mpmath.exp(e) * mpmath.ncdf(-s / 2 - e / s)


def run(capsys, argv) -> tuple[int, list[str]]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    return code, capsys.readouterr().err.strip().splitlines()


# --- regression cases: one line, exit 2, nothing written ------------------------------------------

PLAN = ["plan", "--schema", TINY, "--workload", "prefix:1", "--method", "rp"]
QSPLUS = ["plan", "--schema", TINY, "--workload", "marginal:2", "--method", "qsplus"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("parsers")
    data = d / "data.csv"
    pd.DataFrame(np.random.default_rng(0).integers(0, 4, (40, 3)), columns=["a0", "a1", "a2"]).to_csv(data, index=False)
    (d / "uneven.yaml").write_text("a: 2\nb: 3\nc: 4\n")
    qsplus = d / "qsplus.h5"
    assert main([*QSPLUS, "--out", str(qsplus), "-q"]) == 0
    shares = d / "shares.h5"
    shares.write_bytes(qsplus.read_bytes())
    with h5py.File(shares, "r+") as f:
        f["shares"][...] = 1e-308
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (10**7, 10**7)})
    attrs = io.BytesIO()
    np.save(attrs, np.array(["a0"]))
    with zipfile.ZipFile(d / "huge.npz", "w") as z:  # a header claiming 800 TB, and 64 bytes of data
        z.writestr("attributes.npy", attrs.getvalue())
        z.writestr("queries.npy", buf.getvalue() + b"\0" * 64)
    for name, text in DOMAINS.items():
        (d / f"{name}.json").write_text(text)
    return d


DOMAINS = {
    "bins5": '{"a": {"bins": 5}}',
    "cats5": '{"a": {"categories": 5}}',
    "catsnull": '{"a": {"categories": null}}',
    "binstrue": '{"a": {"bins": true}}',
    "binslisttrue": '{"a": {"bins": [true, 2, 3]}}',
}


def _release_spec(d: Path, weight) -> Path:
    rng = np.random.default_rng(1)
    pd.DataFrame({"age": rng.integers(0, 4, 30), "sex": rng.choice(["f", "m"], 30)}).to_csv(d / "r.csv", index=False)
    (d / "r-domain.yaml").write_text("age: 4\nsex: {categories: [f, m]}\n")
    spec = {
        "data": "r.csv",
        "domain": "r-domain.yaml",
        "tables": [{"marginal": ["age", "sex"], "weight": weight}],
        "budget": {"rho": 0.5},
    }
    p = d / "spec.yaml"
    p.write_text(yaml.safe_dump(spec))
    return p


def _plan_with(workload: str, method: str = "rp") -> list:
    return ["plan", "--schema", TINY, "--workload", workload, "--method", method]


DOMAIN_NEEDLES = [
    "bins of 'a' 5",
    "categories of 'a' 5",
    "categories of 'a' None",
    "bins of 'a' True",
    "bins of 'a' True",
]
CASES = [  # (case, argv from the files folder, what the one line must say)
    ("delta 5e-324", lambda d: [*PLAN, "--epsilon", "1", "--delta", "5e-324"], "--delta 5e-324"),
    ("weight 5e-324", lambda d: _plan_with("prefix:1@5e-324"), "weight '5e-324'"),
    ("release weight 5e-324", lambda d: ["release", _release_spec(d, 5e-324)], "tables[0].weight 5e-324"),
    (
        "hdmm restarts=1e9",
        lambda d: [*_plan_with("prefix:1", "hdmm"), "--option", "restarts=1e9"],
        "restarts must be an integer in [1, 100]",
    ),
    (
        "qsplus tie=true, no tie applies",
        lambda d: [
            "plan",
            "--schema",
            d / "uneven.yaml",
            "--workload",
            "marginal:2",
            "--method",
            "qsplus",
            "--option",
            "tie=true",
        ],
        "qsplus tie True",
    ),
    (
        "qsplus max_view_cells=1e400",
        lambda d: [*QSPLUS, "--option", "max_view_cells=1e400"],
        "max_view_cells must be an integer",
    ),
    (
        "qsplus max_view_size=.inf",
        lambda d: [*QSPLUS, "--option", "max_view_size=.inf"],
        "max_view_size must be an integer",
    ),
    (
        "qsplus shares 1e-308",
        lambda d: ["measure", "--plan", d / "shares.h5", "--data", d / "data.csv", "--seed", "1"],
        "'shares' 1e-308",
    ),
    (
        "custom npz claiming 1e7 x 1e7",
        lambda d: _plan_with(f"custom:{d / 'huge.npz'}"),
        "claims shape (10000000, 10000000)",
    ),
    *[
        (f"domain {text}", lambda d, n=name: ["plan", "--schema", d / f"{n}.json", "--workload", "marginal:1"], needle)
        for (name, text), needle in zip(DOMAINS.items(), DOMAIN_NEEDLES)
    ],
]


@pytest.mark.parametrize("case, argv, needle", CASES, ids=[c[0] for c in CASES])
def test_bad_value_is_one_line_naming_it_exit_2_and_nothing_written(capsys, files, tmp_path, case, argv, needle):
    out = tmp_path / "out"
    code, lines = run(capsys, [*argv(files), "--out", out])
    assert code == 2 and len(lines) == 1 and needle in lines[0], lines
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_threads_above_the_cores_are_capped_with_a_note(capsys, monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    code, lines = run(capsys, [*PLAN[:4], "prefix:1,2", "--method", "qs", "--threads", "1000000000"])
    assert code == 0 and lines == ["querysmasher: warning: --threads 1000000000 capped to 2, the cores available"]
    assert threads.cap_to_cores(2) == 2 and threads.budget() == 1


@pytest.mark.parametrize("weight", ["1000000", "1.23456789", "1e100", "1e-100"])
def test_a_weight_survives_a_plan_file_exactly(capsys, files, tmp_path, weight):
    """The plan file re-parses its workload from the spec: 1e6 was written 1e+06 (then read as the
    term '...@1e' and '06'), 1.23456789 as 1.23457."""
    plan, meas = tmp_path / "p.h5", tmp_path / "m.h5"
    assert run(capsys, [*PLAN[:4], f"prefix:1@{weight}+marginal:1", *PLAN[5:], "--out", plan, "-q"])[0] == 0
    assert load_any_plan(str(plan)).workload.views[0].weight == float(weight)
    assert run(capsys, ["measure", "--plan", plan, "--data", files / "data.csv", "--out", meas, "--seed", "1"])[0] == 0


@pytest.mark.parametrize("weight", [1000000, 1.23456789, 1e-7, 3])
def test_a_release_table_keeps_its_weight_exactly(weight):
    tables = [{"marginal": ["a0", "a1"], "weight": weight}]
    spec = parse_release_spec({"data": "d.csv", "domain": "x.yaml", "tables": tables, "budget": {"rho": 0.5}})
    workload = release_workload(spec.tables, TINY_SCHEMA)
    assert workload.views[0].weight == weight and parse_workload(workload.spec, TINY_SCHEMA).views == workload.views


@pytest.mark.parametrize("delta", [MIN_DELTA, 3e-300, 1e-250, 1e-100, 1e-6, 0.5])
@pytest.mark.parametrize("eps", [1e-3, 0.01, 1.0, 20.0])
def test_a_budget_down_to_the_delta_floor_has_at_most_its_delta(eps, delta):
    b = make_budget(epsilon=eps, delta=delta)
    exact = exact_delta(b.beta, eps)
    assert exact <= delta and exact >= delta * (1 - 1e-6)  # never more; and not needlessly less
    assert exact_delta(b.beta, b.epsilon) <= delta  # the epsilon it reports at its delta holds too


@pytest.mark.parametrize("beta", [1e5, 1e16, 1e20, 1e100, 1e300])
def test_a_large_budget_reports_an_epsilon_it_has(beta):
    """eps + log Phi(-t) cancelled two numbers of about beta/2: beta 1e20 reported epsilon 5e19 at
    delta 1e-6 where the true delta was 1."""
    b = Budget.from_beta(beta)
    assert exact_delta(beta, b.epsilon) <= b.delta


@pytest.mark.parametrize("delta", [5e-324, 1e-318, 1e-301, 0.0, 1.0, math.nan])
def test_a_delta_outside_the_floor_is_refused(delta):
    with pytest.raises(InputError, match=r"^--delta .*must be in \[1e-300, 1\)"):
        make_budget(epsilon=1.0, delta=delta, prefix="--")
    with pytest.raises(InputError, match=r"^--delta "):
        make_budget(rho=1.0, delta=delta, prefix="--")


def test_docs_list_every_builtin_option_with_its_range():
    doc = (ROOT / "docs" / "solvers.md").read_text()
    for method in OPTION_METHODS:
        for o in get_method(method).declared("option_specs"):
            assert f"| {method} | `{o.name}` | {o.accepts()} | {o.doc} |" in doc, (method, o.name)


def test_declared_options_are_the_planners_keywords():
    from querysmasher.hdmm.plan import plan_hdmm
    from querysmasher.marginal_family.planner import plan

    def keywords(fn):
        return {p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY}

    assert {o.name for o in get_method("hdmm").declared("option_specs")} == keywords(plan_hdmm) - {"all_numeric"}
    assert {o.name for o in get_method("qsplus").declared("option_specs")} <= keywords(plan)


# --- properties: random input parses to a valid value or is one InputError ------------------------

NUMBER_TEXT = st.one_of(
    st.floats().map(repr),
    st.integers(-(10**3), 10**400).map(str),
    st.text(alphabet="0123456789.eE+-", max_size=12),
    st.sampled_from(["5e-324", "1e-320", "1e-300", "1e-301", "0", "-0", ".5", "1e400", "nan", "inf"]),
    st.floats(-320, 2).map(lambda x: repr(10.0**x)),
)
BUDGETS = st.one_of(
    st.floats(),
    st.integers(-(10**3), 10**400),
    st.booleans(),
    st.none(),
    st.text(max_size=30),
    st.builds(lambda form, v: f"{form}={v}", st.sampled_from(["beta", "rho", "mu"]), NUMBER_TEXT),
    st.builds(lambda e, d: f"eps={e},delta={d}", NUMBER_TEXT, NUMBER_TEXT),
)


@settings(max_examples=150, deadline=None)
@given(BUDGETS, st.one_of(st.none(), st.floats(), st.floats(-320, 0).map(lambda x: 10.0**x)))
def test_the_budget_parser_parses_or_refuses_and_never_under_reports(value, report_delta):
    try:
        b = parse_budget(value, report_delta)
    except InputError:
        return
    assert isinstance(b, Budget) and MIN_BETA <= b.beta < math.inf and MIN_DELTA <= b.delta < 1
    if b.source == "epsilon-delta":
        assert exact_delta(b.beta, float(value.split(",")[0].split("=")[1])) <= b.delta
    assert exact_delta(b.beta, b.epsilon) <= b.delta  # what it reports, (epsilon, delta), holds
    assert parse_budget(f"beta={b.beta!r}").beta == b.beta and parse_budget(f"rho={b.rho!r}").beta == b.beta


@settings(max_examples=60, deadline=None)
@given(st.floats(1e-4, 50), st.floats(-300, -0.3))
def test_a_chosen_budget_never_has_more_delta_than_asked(eps, log10_delta):
    delta = max(10.0**log10_delta, MIN_DELTA)
    try:
        b = make_budget(epsilon=eps, delta=delta)
    except InputError as exc:  # only when even the smallest budget cannot meet it
        assert "cannot be met" in str(exc)
        return
    exact = exact_delta(b.beta, eps)
    assert exact <= delta and exact >= delta * (1 - 1e-6)


WEIGHTS = st.one_of(
    st.floats(),
    st.floats(MIN_WEIGHT, MAX_WEIGHT),
    st.integers(-(10**3), 10**400),
    st.booleans(),
    st.none(),
    st.text(max_size=20),
    NUMBER_TEXT,
)


@settings(max_examples=150, deadline=None)
@given(WEIGHTS)
def test_the_weight_parser_parses_exactly_or_refuses(value):
    try:
        w = check_weight(value, lambda reason: InputError("weight", value, reason))
    except InputError:
        return
    assert type(w) is float and MIN_WEIGHT <= w <= MAX_WEIGHT
    text = format_weight(w)
    assert "+" not in text and float(text) == w
    workload = parse_workload(f"prefix:1@{text}+marginal:2", TINY_SCHEMA)
    assert workload.views[0].weight == w and parse_workload(workload.spec, TINY_SCHEMA).views == workload.views


LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**3), 10**400),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=4),
)
JSONISH = st.recursive(
    LEAVES,
    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
    max_leaves=10,
)
ATTRIBUTES = st.one_of(
    JSONISH,
    st.fixed_dictionaries(
        {},
        optional={
            "size": st.one_of(st.integers(-2, 8), JSONISH),
            "kind": st.one_of(st.sampled_from(["numeric", "categorical"]), JSONISH),
            "categories": st.one_of(
                JSONISH,
                st.lists(st.one_of(st.text(max_size=3), st.integers(-3, 3), st.booleans(), st.floats()), max_size=6),
            ),
            "bins": st.one_of(
                JSONISH, st.lists(st.one_of(st.integers(-100, 100), st.floats(), st.booleans()), max_size=6)
            ),
        },
    ),
)


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=6), ATTRIBUTES, min_size=1, max_size=3))
def test_the_domain_parser_parses_or_refuses(scratch, domain):
    path = scratch / "domain.json"
    path.write_text(json.dumps(domain))
    try:
        schema = parse_schema(str(path))
    except InputError:
        return
    for a, spec in zip(schema.attributes, domain.values()):
        if not isinstance(spec, dict):
            assert spec == a.size
        elif "categories" in spec:
            assert a.size == len(spec["categories"]) == len({str(c) for c in spec["categories"]})
        elif "bins" in spec:
            edges = spec["bins"]
            assert a.size == len(edges) - 1 and not any(isinstance(e, bool) for e in edges)
            assert all(math.isfinite(x) and x < y for x, y in zip(edges, edges[1:]))


OPTION_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**3), 10**400),
    st.floats(),
    st.floats(0, 1),
    st.text(max_size=8),
    st.lists(
        st.one_of(st.sampled_from(["kron", "plus-view", "marginal", "explicit", "opt0"]), st.integers()), max_size=4
    ),
    st.text(alphabet="0123456789.eE+-[],infa", max_size=10).map(lambda t: ("yaml", t)),
)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(OPTION_METHODS), st.data())
def test_the_option_parsers_parse_or_refuse(method, data):
    """As the CLI reads --option KEY=VALUE (a YAML scalar) or the API takes a value: either the
    method's declared range accepts it and the method builds with it, or one InputError."""
    m = get_method(method)
    names = [o.name for o in m.declared("option_specs")]
    name = data.draw(st.one_of(st.sampled_from(names), st.text(min_size=1, max_size=6)))
    value = data.draw(OPTION_VALUES)
    try:
        if isinstance(value, tuple):
            value = parse_yaml(value[1], f"--option {name}")
        checked = m.check_options({name: value})
    except InputError:
        return
    assert name in names
    m.build(**checked)  # what the check accepts, the method takes
