"""The workflow config's ``objective`` key: folder names, validation, and the allocate step's max plan."""

import json

import pytest

from querysmasher.accounting import Budget
from querysmasher.errors import InputError
from querysmasher.pipeline.config import check_config, expand_grid
from querysmasher.pipeline.steps import allocate_to_files, write_workload_file
from querysmasher.planfile import load_plan
from querysmasher.planning import make_plan


def _grid(objective=None, methods=("qs",)):
    g = {"schemas": ["synthetic:n=4,d=3"], "workloads": ["prefix:1+abs:2"], "methods": list(methods)}
    if objective:
        g["objective"] = objective
    return {"grid": [g], "release": False}


def test_default_objective_is_sum_and_names_are_unchanged():
    (e,) = expand_grid(_grid()).values()
    assert e.objective == "sum" and not e.name.endswith("__max")
    (m,) = expand_grid(_grid("max")).values()
    assert m.objective == "max" and m.name == e.name + "__max" and m.as_dict()["objective"] == "max"


def test_max_objective_is_refused_for_methods_without_it():
    with pytest.raises(InputError, match="objective"):
        check_config(_grid("max", ("rpplus",)))
    assert len(check_config(_grid("max", ("qs", "wff", "rp")))) == 3


def test_allocate_step_writes_the_max_plan(tmp_path):
    write_workload_file(tmp_path / "w.h5", "synthetic:n=4,d=3", "prefix:1+abs:2")
    s = allocate_to_files(
        tmp_path / "w.h5",
        None,
        [],
        tmp_path / "plan.h5",
        tmp_path / "plan.json",
        method="qs",
        objective="max",
        budget="rho=0.5",
        experiment={"experiment": "x"},
    )
    plan = load_plan(tmp_path / "plan.h5")
    assert plan.objective == "max" and json.loads((tmp_path / "plan.json").read_text())[
        "max_variance"
    ] == pytest.approx(s["max_variance"])
    direct = make_plan("synthetic:n=4,d=3", "prefix:1+abs:2", "qs", Budget.from_rho(0.5), objective="max")
    assert plan.max_variance[0] == pytest.approx(direct.max_variance[0], rel=1e-9)


def test_budgets_seeds_and_objectives_of_one_problem_share_its_folder():
    """The workload and decompose jobs belong to (schema, workload, method): a new budget, seed or
    objective re-runs allocation onwards only; two workloads that slug alike are refused."""
    g = {
        "schemas": ["synthetic:n=4,d=3"],
        "workloads": ["prefix:1+abs:2"],
        "methods": ["qs", "rp"],
        "budgets": [1.0, "rho=0.25"],
        "seeds": [0, 1],
    }
    grid = expand_grid({"grid": [g, {**g, "objective": "max", "methods": ["qs"]}], "release": False})
    assert len(grid) == 12 and {e.problem for e in grid.values()} == {
        "synthetic-n4-d3__prefix-1_abs-2__qs",
        "synthetic-n4-d3__prefix-1_abs-2__rp",
    }
    clash = {
        "grid": [{**g, "budgets": [1.0]}, {**g, "workloads": ["prefix:1 + abs:2"], "budgets": [0.5]}],
        "release": False,
    }
    with pytest.raises(InputError, match="two problems share this folder name"):
        expand_grid(clash)


def test_a_max_plan_with_factored_views_round_trips(tmp_path):
    """A max plan's keys are its weighted decomposition's: its lowrank mechanisms are stored as they
    are (V, s and their rotation), never as query factors the plan's workload does not have."""
    import numpy as np

    from querysmasher.planfile import save_plan

    plan = make_plan(
        "synthetic:n=8,d=2", "abs:2", "qs", Budget.from_rho(0.5), objective="max", solver_options={"lowrank": "always"}
    )
    low = [s for s in plan.solutions.values() if s.mechanism.kind == "lowrank"]
    assert low and all(s.query_factor is None for s in plan.solutions.values())
    save_plan(plan, tmp_path / "max.h5")
    back = load_plan(tmp_path / "max.h5")
    x = np.random.default_rng(1).standard_normal(low[0].mechanism.cells)
    for k, s in plan.solutions.items():
        if s.mechanism.kind == "lowrank":
            b = back.solutions[k].mechanism
            assert np.array_equal(b.sqrt_apply(x), s.mechanism.sqrt_apply(x))  # the same operator, rotation included
    assert back.max_variance[0] == pytest.approx(plan.max_variance[0], rel=1e-12)
