"""Simultaneous confidence intervals: the multiplier z for which every cell of a table is covered at once.

A released table's cell errors e_i are a linear function of the Gaussian noise, so they are jointly
Gaussian with mean zero and known standard errors s_i, and correlated (cells share residual views
and measurements). ``estimate_i +- z s_i`` covers every cell at once exactly when
max_i |e_i| / s_i <= z, so the smallest such z at confidence c is the c-quantile of the maximum of
correlated standard Gaussians. It has no closed form; it is found by simulation, from the plan
alone: the plan's own measurements (:func:`querysmasher.measure.measurements_of`) are drawn as pure
noise -- no record, no count: the error of an unbiased linear estimate does not depend on the data
-- and reconstructed by the plan's own estimator, ``draws`` times, so the simulated errors are those
of the operators and the estimator a release applies, whatever the plan kind.

From D simulated maxima the multiplier is the k-th smallest, with k the least rank for which
P(Binomial(D, c) >= k) <= ``risk``: then P(z < the true quantile) <= ``risk``, i.e. the coverage is
at least c except with probability ``risk`` over the simulation (a fixed seed: the same plan gets
the same z). Šidák's bound z = Phi^-1((1 + c^(1/m)) / 2), valid for Gaussian errors under any
correlation (Šidák, 1967), caps it, and stands alone where the simulation is not run (Laplace
noise: Bonferroni; a table whose cells are not estimable; a plan too large to simulate, more than
:attr:`SimultaneousSettings.max_values` simulated values; a kind whose estimator fails on the
simulated draws). The multipliers need the plan only, so a release finds them before it reads a
record (:func:`multipliers`); a batch holds at most :attr:`SimultaneousSettings.batch_values`
values, the estimator's largest marginal included. Bonferroni's z is larger than Šidák's, which is
at least the exact one, and equal to it for independent cells (a marginal table's cells are
nearly so: docs/release.md measures what the simulation gains).

>>> round(sidak(0.95, 12), 4), round(multiplier(0.95, cells=12), 4)
(2.8578, 2.8653)
>>> order_statistic_rank(20_000, 0.95, 1e-6) / 20_000
0.9572
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from .intervals import is_gaussian, multiplier
from .measure import measurements_of
from .measurement import Measurements
from .plankinds import kind_of

log = logging.getLogger(__name__)

__all__ = [
    "SimultaneousSettings",
    "SIMULTANEOUS",
    "sidak",
    "order_statistic_rank",
    "bound",
    "is_simulated",
    "simulated",
    "multipliers",
]


@dataclass(frozen=True)
class SimultaneousSettings:
    """The simulation's tuning: ``draws`` simulated releases; ``risk``, the probability that the
    multiplier falls below the true quantile; ``max_values``, the most simulated values (measured
    values x draws) run before Šidák's bound is used instead; ``batch_values``, the values held at
    once; ``seed``, the simulation's (of the plan's error, never of data)."""

    draws: int = 20_000
    risk: float = 1e-6
    max_values: float = 1e9
    batch_values: int = 1 << 23
    seed: int = 20_260_612


SIMULTANEOUS = SimultaneousSettings()


def sidak(confidence: float, cells: int) -> float:
    """Šidák's simultaneous z over ``cells`` Gaussian estimates at ``confidence``: each at level
    c^(1/m); valid under any correlation (Šidák's inequality for two-sided Gaussian intervals)."""
    m = max(int(cells), 1)
    alpha = -math.expm1(math.log(float(confidence)) / m)  # 1 - c^(1/m), without cancellation for large m
    return -NormalDist().inv_cdf(alpha / 2.0)  # the lower tail: no 1 - alpha / 2 rounded to 1


def order_statistic_rank(draws: int, confidence: float, risk: float) -> int:
    """The least k with P(Binomial(draws, confidence) >= k) <= ``risk`` (``draws`` + 1 when no rank
    of ``draws`` is enough): the k-th smallest of ``draws`` samples lies below the
    ``confidence``-quantile with probability at most ``risk``."""
    from scipy.stats import binom  # scipy only where a simultaneous z is simulated

    return int(binom.isf(risk, draws, confidence)) + 1


class _SimulatedNoise(Sequence):
    """The plan's measurements drawn as pure noise, ``batch`` copies each, drawn when first read (a
    kind that reconstructs a table from a few measurements draws only those) from a generator
    seeded by (seed, batch number, measurement), so a measurement read twice reads the same draws."""

    def __init__(self, ms, batch: int, seed: tuple[int, int]):
        self._ms, self._batch, self._seed = ms, batch, seed

    def __len__(self) -> int:
        return len(self._ms)

    def __getitem__(self, k) -> np.ndarray:
        if not isinstance(k, (int, np.integer)):
            raise TypeError(f"simulated measurements are read one at a time, by position, not by {type(k).__name__}")
        k = int(k) + len(self._ms) if k < 0 else int(k)
        m = self._ms[k]  # an IndexError past either end, as for a list
        rng = np.random.default_rng((*self._seed, k))  # position k from either end: the same draws
        return math.sqrt(m.scale) * rng.standard_normal((m.rows, self._batch))


def _simulated_noise(ms, batch: int, seed: tuple[int, int]) -> Measurements:
    y = _SimulatedNoise(ms, batch, seed)
    return Measurements(np.array([m.index for m in ms], dtype=np.int64), y, seeded=True, sampler="simulation")


def _width(plan, ms, sets_values: int) -> int:
    """The values one simulated release holds at once: the measured values, the largest set's
    estimates, and the largest marginal a measurement acts on (the estimator reconstructs at least
    that many cells per draw before it answers a set)."""
    sizes = plan.schema.sizes
    cells = max((math.prod(sizes[a] for a in m.attrs) for m in ms), default=1)
    return sum(m.rows for m in ms) + sets_values + cells


def bound(plan, confidence: float, cells: int) -> tuple[float, str]:
    """(z, how) of the simultaneous interval over ``cells`` estimates of ``plan`` without simulation:
    Šidák's bound under Gaussian noise, Bonferroni's (with Chebyshev's bound) under Laplace noise."""
    if is_gaussian(plan):
        return sidak(confidence, cells), "Sidak's bound (each cell at level c^(1/cells))"
    how = "Bonferroni's bound (Laplace noise: each cell at level 1 - (1 - c) / cells, Chebyshev's bound)"
    return multiplier(confidence, gaussian=False, cells=cells), how


def is_simulated(plan, values: int, settings: SimultaneousSettings = SIMULTANEOUS, ms=None) -> bool:
    """Whether the simulation runs for sets of at most ``values`` estimates each of ``plan``:
    Gaussian noise, and (measured values + ``values`` + the largest marginal measured) x draws at
    most ``settings.max_values``; ``ms``: the plan's measurements, where the caller has them."""
    if not is_gaussian(plan) or values <= 0:
        return False
    ms = measurements_of(plan) if ms is None else ms
    return bool(ms) and _width(plan, ms, values) * settings.draws <= settings.max_values


def simulated(
    plan, sets: Sequence, confidence: float, settings: SimultaneousSettings = SIMULTANEOUS
) -> dict[object, tuple[float, str]]:
    """{key: (z, how)} for ``sets``, triples (key, variances of its estimates, errors) where
    ``errors(estimates)`` gives the set's estimates (cells first, the draws axis last) from an
    estimates object of the plan's kind: the simulated multiplier of every set (module docstring),
    capped by Šidák's bound, where :func:`is_simulated` holds for the sets' values in all; else, or
    where the kind's estimator fails on the simulated draws (it must take a trailing draws axis,
    :data:`querysmasher.plankinds.OPERATIONS`), the bound of :func:`bound`."""
    sets = [(key, np.asarray(var, dtype=float), errors) for key, var, errors in sets]
    out = {key: bound(plan, confidence, len(var)) for key, var, _ in sets}
    k = order_statistic_rank(settings.draws, confidence, settings.risk)
    if not sets or k > settings.draws or not is_gaussian(plan):
        return out
    ms = measurements_of(plan)
    if not is_simulated(plan, sum(len(var) for _, var, _ in sets), settings, ms):
        return out
    try:
        maxima = _maxima(plan, ms, sets, settings)
    except Exception as e:  # noqa: BLE001 -- the bound is valid whatever failed: never lose a release to it
        log.warning(
            "simultaneous intervals: the simulation failed on plans of kind %s (%s): Sidak's bound is used",
            plan.method,
            type(e).__name__,
        )
        return out
    how = (
        f"the {confidence:g}-quantile of the maximum of the correlated standardised errors, from "
        f"{settings.draws} simulated releases of the plan (coverage at least {confidence:g} except with probability "
        f"{settings.risk:g} over the simulation), capped by Sidak's bound"
    )
    for (key, _, _), m in zip(sets, maxima):
        z = float(np.partition(m, k - 1)[k - 1])
        sidak_z, sidak_how = out[key]
        if z < sidak_z:
            out[key] = (z, how)
        else:  # the cells' errors are all but independent: Šidák's bound is all but exact
            out[key] = (sidak_z, f"{sidak_how}; {settings.draws} simulated releases of the plan find no smaller z")
    return out


def _maxima(plan, ms, sets, settings: SimultaneousSettings) -> list[np.ndarray]:
    """Per set, the ``settings.draws`` simulated maxima of its standardised errors, in batches of at
    most ``settings.batch_values`` values held at once (:func:`_width`)."""
    scale = [np.where(var > 0, 1.0 / np.sqrt(np.where(var > 0, var, 1.0)), 0.0)[:, None] for _, var, _ in sets]
    maxima: list[list[np.ndarray]] = [[] for _ in sets]
    estimates = kind_of(plan).op("estimates")
    width = _width(plan, ms, max(len(var) for _, var, _ in sets))
    done, batch = 0, max(1, min(settings.draws, settings.batch_values // width))
    while done < settings.draws:
        b = min(batch, settings.draws - done)
        est = estimates(plan, _simulated_noise(ms, b, (settings.seed, done)))
        for j, (_, var, errors) in enumerate(sets):
            err = np.asarray(errors(est), dtype=float).reshape(len(var), b)
            maxima[j].append(np.max(np.abs(err) * scale[j], axis=0))
        done += b
    return [np.concatenate(m) for m in maxima]


def multipliers(
    plan, tables: Iterable, views: Iterable, confidence: float, settings: SimultaneousSettings = SIMULTANEOUS
) -> dict[tuple, tuple[float, str]]:
    """{("table", attrs): (z, how)} for the tables ``tables`` (attribute tuples) and {("answers",
    k): (z, how)} for the workload views ``views`` ((k, view) pairs) of ``plan`` whose estimates have
    variances (the kind's ``variances`` operation): from the plan alone, so a release finds them
    before any record is read. A set without variances has no entry."""
    variances = kind_of(plan).op("variances")(plan)
    sets = []
    for attrs in tables:
        var, _ = variances.cells(tuple(attrs))
        if var is not None:
            sets.append((("table", tuple(attrs)), var, lambda est, a=tuple(attrs): est.table(a)))
    for k, v in views:
        var = variances.view(v)
        if var is not None:
            sets.append((("answers", k), var, lambda est, v=v: est.view_answers(v)))
    return simulated(plan, sets, confidence, settings)
