"""Method names come from the method table (issue 41): reserved names derived from it, the CLI's
help and the config schema's method list kept in step with it, options checked by one table."""

from pathlib import Path

import pytest
import yaml

from querysmasher.cli import build_parser
from querysmasher.errors import InputError
from querysmasher.methods import PLANNERS, builtin_method_names
from querysmasher.pipeline.config import check_config
from querysmasher.solvers import SOLVERS

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(PLANNERS.builtin_names))
def test_no_solver_takes_a_built_in_planners_name(name):
    with pytest.raises(KeyError):
        SOLVERS[name] = lambda **kw: None
    assert SOLVERS.origin(name) if name in SOLVERS else True  # nothing registered under it


@pytest.mark.parametrize("name", sorted(SOLVERS.builtin_names))
def test_no_planner_takes_a_built_in_solvers_name(name):
    with pytest.raises(KeyError):
        PLANNERS[name] = lambda **kw: None


def test_the_table_has_every_builtin_method():
    assert set(builtin_method_names()) == {"qs", "rp", "rpplus", "wff", "hdmm", "mm", "qsplus"}


def test_the_cli_help_lists_every_builtin_method():
    sub = build_parser()._subparsers._group_actions[0].choices["plan"]
    help_text = next(a.help for a in sub._actions if "--method" in a.option_strings)
    for name in builtin_method_names():
        assert f" {name} " in f" {help_text.replace('|', ' ')} ", name


def _method_item_description() -> str:
    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
    grid = schema["properties"]["grid"]["items"]["properties"]["methods"]["items"]
    return grid["description"]


def test_the_config_schema_lists_every_builtin_method():
    text = _method_item_description().replace(",", " ")
    for name in builtin_method_names():
        assert f" {name} " in f" {text} ", name


def _config(options):
    return {
        "grid": [
            {
                "schemas": ["synthetic:n=3,d=2"],
                "workloads": ["prefix:1"],
                "methods": ["qs"],
                "budgets": [1.0],
                "seeds": [0],
            }
        ],
        "release": False,
        "solve": {"options": options},
    }


@pytest.mark.parametrize(
    "options, needle",
    [
        ({"hdmm": {"restarts": 1000}}, "restarts"),
        ({"qs": {"target_gap": 2}}, "target_gap"),
        ({"qsplus": {"max_view_cells": 1e400}}, "max_view_cells"),
        ({"qsplus": {"bogus": 1}}, "bogus"),
        ({"nosuch": {}}, "nosuch"),
    ],
)
def test_config_solve_options_are_checked_by_the_methods_declared_ranges(options, needle):
    with pytest.raises(InputError, match=needle):
        check_config(_config(options))


def test_config_solve_options_in_range_pass():
    check_config(_config({"hdmm": {"restarts": 2}, "qsplus": {"max_view_cells": 400}, "qs": {"target_gap": 1e-6}}))
