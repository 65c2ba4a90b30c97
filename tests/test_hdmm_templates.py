"""HDMM's template search: the paper's Table 2 and Table 4 HDMM columns, the options, the record of
every candidate (plan, summary, plan file), Gaussian and Laplace alike.

The paper's figures are reference data (config/paper/paper_figures.csv); every value compared with
them is computed here.
"""

import math
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pytest

from querysmasher.accounting import Budget
from querysmasher.errors import InputError
from querysmasher.hdmm import TEMPLATES, PureBudget, optimize, plan_hdmm
from querysmasher.hdmm.files import load_hdmm_plan, save_hdmm_plan
from querysmasher.hdmm.implicit import ImplicitWorkload
from querysmasher.paper import load_paper_figures
from querysmasher.schema import parse_schema
from querysmasher.workload import parse_workload

BETA1 = Budget.from_beta(1.0)
FIGURES = load_paper_figures()


def _digits(printed: str) -> int:
    return len(printed.rstrip("*").split(".")[1])


def _paper(table: int, **keys):
    fig = FIGURES.get(table, "HDMM", **keys)
    return fig.value, _digits(fig.printed)


# --- Table 2: hybrid workloads on CPS, Adult, Loans (HDMM = the better of OPT_⊗ and OPT_+ by view) --

TABLE2_WORKLOADS = {"hybrid:1": "1-way", "hybrid:2": "2-way", "hybrid:3": "3-way", "hybrid:1,2,3": "<=3-way"}
# The paper printed 5.648 for Adult 1-way; the official HDMM code's OPT_+ by view gives 5.64748835
# there (run on 2026-12-02, Gaussian OPT_0 per view), as ours does, and 5.6475 -> 5.648 is that value
# rounded to four digits and then, half up, to three. Every other cell is its value rounded once.
DOUBLE_ROUNDED = {("adult", "1-way")}
TABLE2 = [
    pytest.param(ds, spec, marks=() if ds == "cps" else pytest.mark.slow, id=f"{ds}-{spec}")
    for ds in ("cps", "adult", "loans")
    for spec in TABLE2_WORKLOADS
]


@pytest.mark.parametrize("dataset, spec", TABLE2)
def test_table_2_hdmm_cell_is_the_papers_figure(dataset, spec):
    label = TABLE2_WORKLOADS[spec]
    paper, digits = _paper(2, dataset=dataset, workload=label)
    p = plan_hdmm(dataset, spec, BETA1)
    if (dataset, label) in DOUBLE_ROUNDED:
        assert round(p.rmse, digits) != paper  # rounded once it is the next figure down
        twice = Decimal(repr(round(p.rmse, digits + 1))).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
        assert float(twice) == paper
    else:
        assert round(p.rmse, digits) == paper
    # the paper's HDMM took the better of OPT_⊗ and OPT_+ by view; no other template applies here
    assert set(p.candidates) <= {"kron", "plus-view"} and p.template == min(
        p.candidates, key=lambda k: p.candidates[k].total_variance
    )


# --- Table 4: 1-way + 2-way workloads on [n]^40 ------------------------------------------------------

TABLE4_WORKLOADS = ("marginal:1,2", "prefix:1,2", "range:1,2")
# By default one cell of the full search (9 s) and the n = 10 row pinned (3-4 s a cell): the search is
# the best of its candidates (test_every_applicable_template_runs_and_the_best_wins), so the pinned
# row equal to the paper's bounds every searched cell; the rest of the grid runs with the slow tests.
TABLE4 = [
    pytest.param(n, spec, marks=() if (n, spec) == (10, "range:1,2") else pytest.mark.slow, id=f"n{n}-{spec}")
    for n in (10, 20, 30, 40, 50)
    for spec in TABLE4_WORKLOADS
]
TABLE4_PINNED = [
    pytest.param(n, spec, marks=() if n == 10 else pytest.mark.slow, id=f"n{n}-{spec}")
    for n in (10, 20, 30, 40, 50)
    for spec in TABLE4_WORKLOADS
]


@pytest.mark.parametrize("n, spec", TABLE4)
def test_table_4_hdmm_cell_is_at_or_below_the_papers_figure(n, spec):
    paper, digits = _paper(4, n=n, workload=spec.split(":")[0])
    p = plan_hdmm(f"synthetic:n={n},d=40", spec, BETA1)
    assert round(p.rmse, digits) <= paper


@pytest.mark.parametrize("n, spec", TABLE4_PINNED)
def test_table_4_pinned_to_kron_and_marginal_is_the_papers_column(n, spec):
    """The paper's Table 4 HDMM column is OPT_⊗ for prefix and range and OPT_M for marginals: pinning
    the templates to those reproduces it to its printed digits; OPT_⊗ alone is far above on marginals."""
    paper, digits = _paper(4, n=n, workload=spec.split(":")[0])
    pinned = plan_hdmm(f"synthetic:n={n},d=40", spec, BETA1, templates=["kron", "marginal"])
    assert round(pinned.rmse, digits) == paper
    kron = plan_hdmm(f"synthetic:n={n},d=40", spec, BETA1, templates=["kron"])
    if spec.startswith("marginal"):
        assert pinned.template == "marginal" and kron.rmse > 1.5 * paper
    else:
        assert pinned.template == "kron" and kron.total_variance == pinned.total_variance


# --- the search: every applicable template, each on its own generator, the best kept ---------------


SEARCHES = [
    ("range:1+prefix:2", {"kron", "plus-view", "plus-term", "explicit"}),
    ("marginal:1,2", {"kron", "plus-view", "marginal", "explicit"}),
    ("hybrid:1,2", {"kron", "plus-view", "explicit"}),
]


@pytest.mark.parametrize("budget", [BETA1, PureBudget(0.7)], ids=["gaussian", "laplace"])
@pytest.mark.parametrize("spec, applicable", SEARCHES)
def test_every_applicable_template_runs_and_the_best_wins(small_schema, spec, applicable, budget):
    """Each candidate is what its template gives alone (same seed), so the search is the best of them."""
    p = plan_hdmm(small_schema, spec, budget, restarts=2, seed=4)
    assert set(p.candidates) == applicable
    assert len(p.notes) == len(TEMPLATES) - len(applicable)
    for name, c in p.candidates.items():
        alone = plan_hdmm(small_schema, spec, budget, templates=[name], restarts=2, seed=4)
        assert alone.template == name and alone.total_variance == c.total_variance
    assert p.template == min(p.candidates, key=lambda k: p.candidates[k].total_variance)
    assert p.total_variance == p.candidates[p.template].total_variance


def test_laplace_picks_a_different_template_than_its_worst(small_schema):
    """The search matters under Laplace noise too: the candidates differ and the lowest is kept."""
    p = plan_hdmm(small_schema, "range:1+prefix:2", PureBudget(1.0), restarts=2)
    worst = max(c.total_variance for c in p.candidates.values())
    assert p.total_variance < 0.99 * worst


def test_restarts_can_only_lower_kron(small_schema):
    one = plan_hdmm(small_schema, "prefix:1,2", BETA1, templates=["kron"], restarts=1)
    more = plan_hdmm(small_schema, "prefix:1,2", BETA1, templates=["kron"], restarts=4)
    assert more.total_variance <= one.total_variance


def test_a_one_view_group_needs_no_restarts(monkeypatch):
    """A one-view Kronecker problem is a product of independent convex OPT_0 problems: the single run
    kept by opt_kron is not beaten by alternating runs from random starts."""
    w = ImplicitWorkload.from_workload(parse_workload("prefix:2", parse_schema("synthetic:n=9,d=2")))
    assert optimize.separable(w)
    once = optimize.opt_kron(w, rng=np.random.default_rng(0), restarts=5).term_variances(w).sum()
    monkeypatch.setattr(optimize, "separable", lambda _: False)
    searched = optimize.opt_kron(w, rng=np.random.default_rng(0), restarts=5).term_variances(w).sum()
    assert once <= searched * (1 + 1e-6)


def test_summary_reports_the_winner_and_every_candidate(small_schema):
    p = plan_hdmm(small_schema, "range:1+prefix:2", BETA1, restarts=1)
    s = p.summary()
    assert s["template"] == p.template and s["templates"] == list(TEMPLATES)
    assert set(s["candidates"]) == set(p.candidates)
    for name, c in s["candidates"].items():
        assert c["total_variance"] == p.candidates[name].total_variance
        assert c["rmse"] == pytest.approx(math.sqrt(c["total_variance"] / p.queries), rel=1e-12)
        assert c["seconds"] >= 0
    assert s["rmse"] == s["candidates"][p.template]["rmse"]


@pytest.mark.parametrize(
    "options, field",
    [
        ({"templates": "kron"}, "hdmm templates"),
        ({"templates": []}, "hdmm templates"),
        ({"templates": ["kron", "opt0"]}, "hdmm templates 'opt0'"),
        ({"restarts": 0}, "hdmm restarts 0"),
        ({"restarts": 2.5}, "hdmm restarts 2.5"),
        ({"restarts": True}, "hdmm restarts True"),
        ({"seed": -1}, "hdmm seed -1"),
        ({"explicit_cells": -5}, "hdmm explicit_cells -5"),
    ],
)
def test_bad_options_are_one_input_error(small_schema, options, field):
    with pytest.raises(InputError) as e:
        plan_hdmm(small_schema, "prefix:1", BETA1, **options)
    assert str(e.value).startswith(field) and "\n" not in str(e.value)


def test_no_applicable_template_is_an_input_error(small_schema):
    with pytest.raises(InputError, match="none applies to this workload") as e:
        plan_hdmm(small_schema, "prefix:1", BETA1, templates=["marginal", "plus-term"])
    assert "marginal skipped: the workload has non-marginal factors" in str(e.value)


# --- plan files record the search -------------------------------------------------------------------


@pytest.mark.parametrize("budget", [BETA1, PureBudget(0.5)], ids=["gaussian", "laplace"])
def test_a_loaded_plan_reports_the_same_winner_and_candidates(small_schema, tmp_path, budget):
    plan = plan_hdmm(small_schema, "range:1+prefix:2", budget, restarts=2, seed=3)
    path = tmp_path / "plan.h5"
    save_hdmm_plan(plan, path)
    loaded = load_hdmm_plan(path)
    assert loaded.template == plan.template and loaded.templates == plan.templates
    assert loaded.candidates == plan.candidates and loaded.notes == plan.notes
    assert loaded.summary()["candidates"] == plan.summary()["candidates"]


def _tamper(path, edit):
    import h5py

    with h5py.File(path, "r+") as f:
        edit(f)


def _set_candidates(f, change):
    from querysmasher.io import get_json, put_json

    c = get_json(f, "candidates")
    change(c)
    put_json(f, "candidates", c)


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda f, won, lost: f.attrs.__setitem__("template", lost), "is recorded with total variance"),
        (
            lambda f, won, lost: f.attrs.__setitem__("template", "plus-diagonal"),
            "its template 'plus-diagonal' is not among its candidates",
        ),
        (
            lambda f, won, lost: _set_candidates(f, lambda c: c[lost].__setitem__("total_variance", 1.0)),
            "is not the best candidate",
        ),
        (
            lambda f, won, lost: _set_candidates(
                f, lambda c: c.__setitem__("marginal", {"total_variance": 1e9, "seconds": 0.0})
            ),
            "candidate 'marginal' that is not among",
        ),
        (
            lambda f, won, lost: _set_candidates(
                f, lambda c: c[won].__setitem__("total_variance", 2 * c[won]["total_variance"])
            ),
            "is recorded with total variance",
        ),
    ],
)
def test_a_plan_file_with_a_wrong_search_record_is_refused(small_schema, tmp_path, edit, needle):
    path = tmp_path / "plan.h5"
    plan = plan_hdmm(small_schema, "range:1+prefix:2", BETA1, templates=["kron", "plus-term"], restarts=1)
    (lost,) = set(plan.candidates) - {plan.template}
    save_hdmm_plan(plan, path)
    _tamper(path, lambda f: edit(f, plan.template, lost))
    with pytest.raises(InputError, match="hdmm plan file") as e:
        load_hdmm_plan(path)
    assert needle in str(e.value) and "\n" not in str(e.value)
