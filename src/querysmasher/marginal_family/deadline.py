"""The qsplus planner's time limit: one deadline (a ``time.perf_counter()`` time) that every phase checks.

A phase checks it between its steps (:func:`check_deadline`, :func:`past`) and inside every solver
round (:class:`Timed` wraps the objective): once it has passed, the phase stops with the best
certified point it has and the planner returns the best of those (the folded ``qs`` start at
worst), with the gap reached.

>>> import time
>>> past(time.perf_counter() - 1.0), past(None)
(True, False)
"""

from __future__ import annotations

import math
import time

import numpy as np

__all__ = ["TimeLimit", "check_deadline", "past", "Timed"]


class TimeLimit(TimeoutError):
    """The planner's time limit (``max_seconds``) passed: the phase that raises it stops."""


def past(deadline: float | None) -> bool:
    """Whether ``deadline`` (None: no limit) has passed."""
    return deadline is not None and time.perf_counter() > deadline


def check_deadline(deadline: float | None) -> None:
    """Raise :class:`TimeLimit` once ``deadline`` has passed."""
    if past(deadline):
        raise TimeLimit


class Timed:
    """An objective (value, gradient) under a deadline: every evaluation first checks it and raises
    :class:`TimeLimit` once it has passed (one L-BFGS or trust-region round can run for many
    minutes on a large problem, so a limit checked only between rounds is not a limit); the lowest
    point evaluated so far is kept, for the caller to continue from or stop at."""

    def __init__(self, fun, deadline: float | None):
        self.fun, self.deadline = fun, deadline
        self.best_value, self.best_x = math.inf, None

    def __call__(self, x, *args):
        check_deadline(self.deadline)
        value, grad = self.fun(x, *args)
        if value < self.best_value:
            self.best_value, self.best_x = value, np.array(x, copy=True)
        return value, grad
