"""The plugin passes querysmasher's solver contract kit."""

import pytest
from qs_plugin_example import ScaledIdentitySolver

from querysmasher.testing import check_solver


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_contract(scale):
    assert "checked" in check_solver(lambda: ScaledIdentitySolver(scale), draws=500)


def test_registered_by_name():
    assert check_solver("scaledid", workloads=("prefix:1,2",), draws=0).startswith("scaledid:")
