"""Per-view solvers behind one interface (:class:`ViewSolver`), and their registry.

>>> sorted(SOLVERS)[:2]
['qs', 'rp']
"""

from __future__ import annotations

from .base import ViewMechanism, ViewSolution, ViewSolver, mechanism_loss
from .closed_form import RPSolver, WFFSolver

__all__ = ["ViewMechanism", "ViewSolution", "ViewSolver", "mechanism_loss", "SOLVERS", "get_solver"]


def _qs(**options):
    from .qs import QSSolver  # the optimal solver pulls in the SDP code; import on demand

    return QSSolver(**options)


def _rpplus(**options):
    from .rpplus import RPPlusSolver  # optimises 1-D strategies with the SDP code; import on demand

    return RPPlusSolver(**options)


SOLVERS = {"rp": lambda **o: RPSolver(), "wff": lambda **o: WFFSolver(), "qs": _qs, "rpplus": _rpplus}


def get_solver(name: str, **options) -> ViewSolver:
    """A per-view solver by method name; unknown names raise a KeyError listing the known ones."""
    try:
        return SOLVERS[name](**options)
    except KeyError:
        raise KeyError(f"unknown method {name!r} (known: {', '.join(sorted(SOLVERS))})") from None
