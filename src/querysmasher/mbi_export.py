"""Export a release's measurements to Private-PGM (``mbi``): its domain, measurements and total.

Private-PGM fits a graphical model to noisy linear measurements of marginals by minimising
sum_k ||Q_k mu_k - y_k||^2 / sigma_k^2 (mu_k the model's marginal on measurement k's clique), then
answers any marginal and samples synthetic records. Each of our measurements
y = A x_attrs + N(0, sigma^2 I) is given to it as the same likelihood in fewer rows: with the thin
SVD A = U S V^T, ||A x - y||^2 = ||S V^T x - U^T y||^2 + a term free of x, and U^T y is again
S V^T x plus N(0, sigma^2 I) noise, so ``LinearMeasurement(U^T y, clique, sigma, query=S V^T)``
loses nothing. Where the plan's kind gives the operator as per-attribute factors
(:attr:`querysmasher.measurement.LinearMeasurement.factors`: a residual plan's Kronecker
mechanisms) the SVD and the query are factor-wise (any view size); otherwise the operator is made
explicit from the function measure applies, up to ``max_dense_cells`` cells. A measurement of no
attribute (the total) is given on the first attribute's marginal (its sum). The known total is our
unbiased estimate of it (Private-PGM's own estimate counts only plain marginal measurements): the
plan's where its kind estimates it, else the inverse-variance mean of the measurements that
estimate it alone (an HDMM plan's one measurement of the whole domain).

This is post-processing of the noisy measurements only: nothing here reads a record. ``mbi`` (and
jax) is an optional extra: ``pip install 'querysmasher[mbi]'``. Gaussian noise only.

Private-PGM's own defaults apply: jax computes in float32 unless ``jax_enable_x64`` is set, which
its authors advise for more than 10^5 records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .errors import InputError
from .linalg import kron_apply
from .measure import measurements_of
from .reconstruct import reconstruct, variances_of

__all__ = ["MbiExport", "to_mbi", "KroneckerQuery", "MAX_DENSE_CELLS"]

MAX_DENSE_CELLS = 4096  # an operator without factors is made explicit (rows x cells) up to this many cells
_RANK_RTOL = 1e-12  # singular values below this, relative to the largest, carry no measurement


@dataclass(frozen=True, eq=False)
class KroneckerQuery:
    """Private-PGM query: (Q_1 ⊗ ... ⊗ Q_k) applied to a factor's values, row-major over the
    clique's cells; one factor per attribute, or one over every cell (an explicit operator)."""

    factors: tuple[np.ndarray, ...]
    norm_sq: float = field(default=1.0)

    def __call__(self, f):
        import jax.numpy as jnp  # jax only where the export is used

        x = f.datavector().reshape(tuple(q.shape[1] for q in self.factors))
        for axis, q in enumerate(self.factors):
            x = jnp.moveaxis(jnp.tensordot(jnp.asarray(q), x, axes=([1], [axis])), 0, axis)
        return x.reshape(-1)

    def op_norm_sq(self) -> float:
        """||Q||_2^2: Private-PGM's step size uses it."""
        return self.norm_sq

    # identity hash and equality, as Private-PGM's own array-holding queries: jax treats queries as static
    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


@dataclass(frozen=True)
class MbiExport:
    """What Private-PGM needs: ``domain`` (an ``mbi.Domain`` of every attribute), ``measurements``
    (``mbi.LinearMeasurement``, one per measurement of the release) and ``total`` (our unbiased
    estimate of the record count, Private-PGM's ``known_total``)."""

    domain: object
    measurements: list
    total: float


def _thin(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(U, S V^T) of a's thin SVD, without the directions of (relatively) zero singular value."""
    u, s, vt = np.linalg.svd(np.asarray(a, dtype=float), full_matrices=False)
    keep = s > (s[0] if len(s) else 0.0) * _RANK_RTOL
    return u[:, keep], s[keep, None] * vt[keep]


def _operator_factors(m, sizes, max_dense_cells: int) -> tuple[tuple[int, ...], tuple[np.ndarray, ...]]:
    """(clique, factors): the measurement's operator as one matrix per attribute of the clique
    whose Kronecker product it is, or one explicit matrix over all the clique's cells when the kind
    gives no factors. A measurement of no attribute (the total) is lifted to the first attribute's
    marginal: A applied to its sum."""
    if not m.attrs:
        a = np.asarray(m.apply(np.ones((1, 1))), dtype=float).reshape(m.rows, 1)
        return (0,), (a @ np.ones((1, sizes[0])),)
    if m.factors is not None:
        return m.attrs, tuple(np.asarray(f, dtype=float) for f in m.factors)
    cells = math.prod(sizes[a] for a in m.attrs)
    if cells > max_dense_cells:
        raise InputError(
            "measurement",
            m.index,
            f"on attributes {m.attrs} has {cells} cells > {max_dense_cells} and no Kronecker factors: "
            "its operator is not made explicit for Private-PGM (raise max_dense_cells)",
        )
    return m.attrs, (np.asarray(m.apply(np.eye(cells)), dtype=float).reshape(m.rows, cells),)


def _query(factors, y: np.ndarray):
    """(query, U^T y) of one measurement: the factors' thin SVDs (the Kronecker product's)."""
    thin = [_thin(f) for f in factors]
    y_kept = kron_apply([u.T for u, _ in thin], y, tuple(f.shape[0] for f in factors))
    norm_sq = math.prod(float(np.linalg.norm(q, 2) ** 2) for _, q in thin)
    return KroneckerQuery(tuple(q for _, q in thin), norm_sq), y_kept


def _measured_total(query: KroneckerQuery, y_kept: np.ndarray, variance: float) -> tuple[float, float] | None:
    """(estimate, variance) of the clique's sum from one measurement alone, d^T y' with d the least
    solution of Q^T d = 1 (factor by factor), where the sum is in the query's row space; else None."""
    ds = []
    for q in query.factors:
        d = np.linalg.lstsq(q.T, np.ones(q.shape[1]), rcond=None)[0]
        if not np.allclose(q.T @ d, 1.0, rtol=0, atol=1e-9):
            return None
        ds.append(d)
    estimate = float(kron_apply([d[None, :] for d in ds], y_kept, tuple(len(d) for d in ds))[0])
    return estimate, variance * math.prod(float(d @ d) for d in ds)


def _total(plan, measurements, measured: list) -> float:
    """The record count's unbiased estimate: the plan's own where its kind estimates it, else the
    inverse-variance mean of the measurements that estimate it alone (:func:`_measured_total`)."""
    if variances_of(plan).cells(())[0] is not None:
        return float(np.asarray(reconstruct(plan, measurements).table(()))[0])
    found = [t for t in measured if t is not None]
    if not found:
        raise InputError("plan", plan.method, "estimates no total, which Private-PGM needs as known_total")
    weights = np.array([1.0 / var for _, var in found])
    return float(np.dot(weights, [e for e, _ in found]) / weights.sum())


def to_mbi(plan, measurements, *, max_dense_cells: int = MAX_DENSE_CELLS) -> MbiExport:
    """The release ``measurements`` of ``plan`` (any kind; Gaussian noise) for Private-PGM; an
    InputError when ``mbi`` is not installed, for Laplace noise, or for an operator without factors
    over more than ``max_dense_cells`` cells. Then, for example (the README runs it)::

        from mbi.estimation import MirrorDescent
        out = to_mbi(plan, release)
        model = MirrorDescent().estimate(out.domain, out.measurements, known_total=out.total)
        marginal = model.project(("age", "sex")).datavector()
    """
    try:
        import mbi
    except ImportError:
        raise InputError(
            "mbi", "not installed", "Private-PGM is an optional extra: pip install 'querysmasher[mbi]'"
        ) from None
    names, sizes = plan.schema.names, plan.schema.sizes
    ms = {m.index: m for m in measurements_of(plan)}
    out, totals = [], []
    for index, y in zip(measurements.index, measurements.y):
        m = ms[int(index)]
        if m.noise != "gaussian":
            raise InputError("plan noise", m.noise, "Private-PGM's export takes Gaussian measurements only")
        clique, factors = _operator_factors(m, sizes, max_dense_cells)
        query, y_kept = _query(factors, np.asarray(y, dtype=float).reshape(m.rows))
        names_ = tuple(names[a] for a in clique)
        out.append(mbi.LinearMeasurement(np.asarray(y_kept), names_, math.sqrt(m.scale), query))
        totals.append(_measured_total(query, y_kept, m.scale))
    return MbiExport(mbi.Domain(names, sizes), out, max(_total(plan, measurements, totals), 1.0))
