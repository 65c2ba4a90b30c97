"""Per-query variances known from the plan alone (no data): sum over measured residual views of
sigma^2 q_{=>A'} X_A'^+ q_{=>A'}^T, for explicit query rows and for whole workload views.

Reconstruction uses them beside its answers; planning uses them for the largest query variance
(:mod:`querysmasher.maxvar`) without depending on how answers are reconstructed.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .decompose import subquery_matrix, view_query_matrix
from .families import query_matrix_1d
from .fulldomain import is_full_domain_plan, plan_query_variances, plan_view_variances
from .linalg import kron_apply
from .measure import pinv_sqrt_apply
from .plan import Plan
from .workload import WorkloadView

__all__ = ["query_variances", "view_variances", "ViewVarianceMemo"]


def _measured(plan: Plan) -> dict[tuple[int, ...], int]:
    return {a: i for i, a in enumerate(plan.views) if np.isfinite(plan.allocation.sigma2[i])}


def query_variances(plan: Plan, attrs: tuple[int, ...], queries: np.ndarray) -> np.ndarray:
    """Variance of the answer to each explicit query row over the cells of ``attrs`` (no data)."""
    if is_full_domain_plan(plan):
        return plan_query_variances(plan, attrs, queries)
    q = np.atleast_2d(np.asarray(queries, dtype=float))
    sizes = tuple(plan.schema.sizes[a] for a in attrs)
    measured = _measured(plan)
    out = np.zeros(q.shape[0])
    for keep in itertools.product((False, True), repeat=len(attrs)):
        sub = tuple(a for a, k in zip(attrs, keep) if k)
        if sub not in measured:
            continue
        i = measured[sub]
        s = subquery_matrix(q, sizes, keep)
        mech = plan.solutions[plan.keys[i]].mechanism
        out += plan.allocation.sigma2[i] * _rows_pinv_quadratic(mech, s)
    return out


def _rows_pinv_quadratic(mech, s: np.ndarray) -> np.ndarray:
    """s X^+ s^T for every row of s (queries over the mechanism's cells)."""
    if mech.kind in ("lowrank", "dense"):
        # X^+ = E E^T: E (cells x rank) needs no c x c product (the dense root costs a c^3 one)
        z = mech.pinv_factor().T @ s.T
        return np.sum(z * z, axis=0)
    if mech.kind == "fourier":  # one FFT per query, not the root's FFT and inverse
        f = np.fft.fftn(s.reshape((s.shape[0],) + tuple(mech.sizes)), axes=tuple(range(1, len(mech.sizes) + 1)))
        return (f.real ** 2 + f.imag ** 2).reshape(s.shape[0], -1) @ _fourier_variance_weights(mech.mats[0]).ravel() / mech.cells**2
    z = pinv_sqrt_apply(mech, s.T)
    return np.sum(z * z, axis=0)


def _fourier_variance_weights(w: np.ndarray) -> np.ndarray:
    """a^2 with |Re(X^(+1/2)) q|^2 = sum_f a^2(f) |F q|^2(f) / c^2 for X = F^H diag(w) F: reconstruct
    applies the real part of the root, F^H diag(a) F / c with a = (r(f) + r(-f)) / 2 and
    r = (w^+)^(1/2) (a = r when w is symmetric under f -> -f, as WFF's weights are)."""
    r = np.where(w > 0, 1.0 / np.sqrt(np.where(w > 0, w, 1.0)), 0.0)
    mirrored = r
    for axis, n in enumerate(r.shape):
        mirrored = np.take(mirrored, (-np.arange(n)) % n, axis=axis)
    return ((r + mirrored) / 2) ** 2


_CHUNK_BYTES = 64 << 20  # per-query variances are accumulated over blocks of at most this size


def _kron_rows_pinv_quadratic(mech, kept_q: list[np.ndarray]) -> np.ndarray:
    """q X^+ q^T for every Kronecker row q = ⊗ kept_q[j][a_j] (a table over the row indices), without
    forming the rows: factor-wise for kron, by per-attribute FFTs for fourier, and through a factor
    X^+ = E E^T, applied to the queries by mode products a block of E's columns at a time, for dense
    and lowrank mechanisms."""
    shape = [q.shape[0] for q in kept_q]
    sizes = mech.sizes
    if mech.kind == "kron":
        part = np.ones(())
        for qc, pinv in zip(kept_q, mech.powers(-1)):  # pseudo-inverses: once per distinct factor
            part = np.multiply.outer(part, np.einsum("ij,jk,ik->i", qc, pinv, qc))
        return part
    if mech.kind == "fourier":
        # the Kronecker row's |F q|^2 is prod_j |F_j q_j|^2(f_j): a mode product of the variance
        # weights (w^+ for symmetric w) by the |FFT|^2 of each attribute
        power = [np.abs(np.fft.fft(qc, axis=1)) ** 2 for qc in kept_q]
        return kron_apply(power, _fourier_variance_weights(mech.mats[0]).reshape(-1), sizes).reshape(shape) / mech.cells**2
    e = mech.pinv_factor()
    rows = math.prod(shape)
    out = np.zeros(rows)
    step = max(1, _CHUNK_BYTES // (8 * max(rows, mech.cells)))
    for lo in range(0, e.shape[1], step):
        t = kron_apply(kept_q, e[:, lo:lo + step], sizes)
        out += np.einsum("ij,ij->i", t, t)
    return out.reshape(shape)


def view_variances(plan: Plan, v: WorkloadView) -> np.ndarray:
    """Variances of every query of a workload view. For product families the Kronecker query rows
    are never formed (see :func:`_kron_rows_pinv_quadratic`); other families use their explicit rows."""
    sizes_all = plan.schema.sizes
    if is_full_domain_plan(plan):
        return plan_view_variances(plan, v)
    if not v.factors:
        return query_variances(plan, v.attrs, view_query_matrix(plan.workload, v))
    qs = [query_matrix_1d(f, sizes_all[a]) for f, a in zip(v.factors, v.attrs)]
    measured = _measured(plan)
    out = np.zeros(math.prod(q.shape[0] for q in qs))
    for keep in itertools.product((False, True), repeat=len(v.attrs)):
        sub = tuple(a for a, k in zip(v.attrs, keep) if k)
        if sub not in measured:
            continue
        i = measured[sub]
        mech = plan.solutions[plan.keys[i]].mechanism
        dropped = np.ones(())
        for q, k in zip(qs, keep):
            if not k:
                dropped = np.multiply.outer(dropped, q.mean(axis=1) ** 2)
        kept_q = [q - q.mean(axis=1, keepdims=True) for q, k in zip(qs, keep) if k]
        part = _kron_rows_pinv_quadratic(mech, kept_q)
        # Put the kept and dropped per-attribute factors back in attribute order.
        kept_axes = [p for p, k in enumerate(keep) if k]
        dropped_axes = [p for p, k in enumerate(keep) if not k]
        full = np.multiply.outer(part, dropped)
        full = np.moveaxis(full, list(range(len(keep))), kept_axes + dropped_axes)
        out += plan.allocation.sigma2[i] * full.reshape(-1)
    return out


def _query_identity(plan: Plan, v: WorkloadView):
    """What fixes a view's query rows, given its attribute sizes: the 1-D factors, the pair family,
    or (random, custom) the view itself."""
    sizes = tuple(plan.schema.sizes[a] for a in v.attrs)
    if v.factors:
        return ("product", v.factors, sizes)
    if v.family in ("affine", "abs"):
        return (v.family, sizes)
    return (v.family, v.attrs, v.seed, v.term)


class ViewVarianceMemo:
    """:func:`view_variances` for many views of one plan, computed once per distinct signature:
    the same query rows and, for every subset of the view's attributes, the same measured
    mechanism (solution key) and noise scale. Equal-size views of one family then share one
    computation (an evaluation of 9,880 prefix:3 views on [40]^40 does one, not 9,880). Exact:
    views with equal signatures have equal variances by construction, whatever the allocation.
    At most ``max_bytes`` of results are kept (least recently used dropped first).

    >>> import querysmasher as qs
    >>> plan = qs.make_plan("synthetic:n=8,d=4", "prefix:2", method="rp", beta=1.0)
    >>> memo = ViewVarianceMemo(plan)
    >>> all(np.array_equal(memo(v), view_variances(plan, v)) for v in plan.workload.views)
    True
    >>> memo.misses, memo.hits  # six pairs of equal-size attributes: one computation
    (1, 5)
    """

    def __init__(self, plan: Plan, max_bytes: int = 256 << 20):
        from collections import OrderedDict

        self.plan = plan
        self.max_bytes = int(max_bytes)
        self._measured = _measured(plan)
        self._cache: OrderedDict = OrderedDict()
        self._bytes = 0
        self.hits = self.misses = 0

    def signature(self, v: WorkloadView):
        plan = self.plan
        subs = []
        for keep in itertools.product((False, True), repeat=len(v.attrs)):
            sub = tuple(a for a, k in zip(v.attrs, keep) if k)
            i = self._measured.get(sub)
            if i is not None:
                subs.append((keep, plan.keys[i], float(plan.allocation.sigma2[i])))
        return (_query_identity(plan, v), tuple(subs))

    def __call__(self, v: WorkloadView) -> np.ndarray:
        if is_full_domain_plan(self.plan):  # one mechanism over the whole domain: no shared structure
            return view_variances(self.plan, v)
        sig = self.signature(v)
        hit = self._cache.get(sig)
        if hit is not None:
            self._cache.move_to_end(sig)
            self.hits += 1
            return hit
        self.misses += 1
        var = view_variances(self.plan, v)
        var.setflags(write=False)  # shared between views: callers must not change it in place
        if var.nbytes <= self.max_bytes:
            self._cache[sig] = var
            self._bytes += var.nbytes
            while self._bytes > self.max_bytes:
                _, old = self._cache.popitem(last=False)
                self._bytes -= old.nbytes
        return var
