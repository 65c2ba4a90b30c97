"""The marginal-family problem: its structure (views, shared lower residuals) and its objective with gradient.

Every *marginal view* g (a workload view of 1..``max_view_size`` attributes, not inside another one)
gets a Gaussian mechanism with Gram X_g on its whole marginal (n_g cells). In the residual basis
(:mod:`.basis`) the full-domain Gram is X = N sum_g (1/n_g) embed(Y_g), Y_g = U_g^T X_g U_g, and the
workload Gram G = N sum_v (1/n_v) embed(W_v); N cancels in tr(G X^+). Coordinates split into

* the *top* of each marginal view (its own interaction residual: only X_g touches it),
* the *lower* residuals (proper subsets of marginal views, shared: for all pairs 1 + sum (n_i - 1)),
* *residual-only* subsets (in no marginal view, e.g. the 3-way residuals of Table 5): measured by
  the ``qs`` residual mechanisms, whose shapes are kept and whose budget share tau is optimised.

Eliminating each top (A_g = top block, B_g = top x lower, K_g = A_g^-1 B_g) leaves the lower system
S = sum_g (C_g - B_g^T K_g). With E = blockdiag(A^-1) and R = [-K; I] (lower -> all coordinates),
X^-1 = E + R S^-1 R^T, so

    f = sum_g tr(G_tt,g A_g^-1) + tr(S^-1 R^T G R) + L_res / tau,

where L_res = (sum_T sqrt(c_T L_T))^2 over the residual-only subsets (qs losses L_T, costs c_T).
The gradient w.r.t. Y_g is -(1/n_g) Z_g, Z = X^-1 G X^-1 on g's coordinates, assembled from the
same blocks (no full-domain object is ever formed). When the schema is uniform and the workload
symmetric under attribute permutations every marginal view shares one Y (``tied``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from ..decompose import view_query_matrix
from ..errors import InputError
from ..families import gram_1d
from ..workload import Workload
from .basis import attribute_basis, from_residual, subset_dim, to_residual, view_coords

__all__ = [
    "MarginalView",
    "WorkloadBlock",
    "MarginalProblem",
    "Evaluation",
    "build_problem",
    "informative_attrs",
    "marginal_view_attrs",
    "workload_residual_gram",
]


def workload_residual_gram(workload: Workload, attrs: tuple[int, ...]) -> np.ndarray:
    """sum over the workload views on exactly ``attrs`` of w_v U^T Q_v^T Q_v U (residual coordinates)."""
    sizes = tuple(workload.schema.sizes[a] for a in attrs)
    c = math.prod(sizes)
    out = np.zeros((c, c))
    for v in workload.views:
        if v.attrs != attrs:
            continue
        if v.factors:
            m = np.ones((1, 1))
            for f, n in zip(v.factors, sizes):
                u = attribute_basis(n)
                m = np.kron(m, u.T @ gram_1d(f, n) @ u)
            out += v.weight * m
        else:
            qu = to_residual(view_query_matrix(workload, v), sizes)
            out += v.weight * (qu.T @ qu)
    return (out + out.T) / 2


@dataclass
class MarginalView:
    """One marginal view: its coordinates split into ``top`` and ``low`` positions (``low_glob``:
    the lower-system index of each low position)."""

    attrs: tuple[int, ...]
    sizes: tuple[int, ...]
    top: np.ndarray
    low: np.ndarray
    low_glob: np.ndarray
    gtt: np.ndarray = None  # G's top block (sum over the workload views containing the top), 1/n_v scaled
    jcols: np.ndarray = None  # lower-system columns of (G R)[top, :]
    basis: np.ndarray | None = (
        None  # cells x dim: the cell-basis columns of the coordinates (None: all residual coordinates)
    )

    @property
    def cells(self) -> int:
        return math.prod(self.sizes)

    @property
    def dim(self) -> int:
        """The number of coordinates of the view's Gram (``cells`` unless its top is restricted)."""
        return len(self.top) + len(self.low)


@dataclass
class WorkloadBlock:
    """One workload attribute set with a top of a marginal view inside: its Gram (1/n_v scaled) on
    the kept coordinates (tops and lower; residual-only ones dropped)."""

    attrs: tuple[int, ...]
    w: np.ndarray
    low_pos: np.ndarray  # rows of w that are lower coordinates
    low_glob: np.ndarray  # their lower-system indices
    tops: list[tuple[int, np.ndarray]]  # (marginal view index, rows of w of its top in top order)


@dataclass
class Evaluation:
    """f and its gradient at one point: ``grads`` per marginal view (or one, summed, when tied)
    w.r.t. Y_g in residual coordinates; ``dtau`` the derivative in tau."""

    f: float
    grads: list[np.ndarray]
    dtau: float
    parts: dict = field(default_factory=dict)


@dataclass
class MarginalProblem:
    """The structure of one (schema, workload) in the marginal family (see the module docstring)."""

    workload: Workload
    views: list[MarginalView]
    lower: dict[tuple[int, ...], int]  # lower subset -> offset in the lower system
    lower_dim: int
    blocks: list[WorkloadBlock]
    m0: np.ndarray  # the lower system's constant part of R^T G R (workload sets with lower coordinates only)
    residual_only: list[tuple[int, ...]]
    residual_roots: np.ndarray  # sqrt(c_T L_T) per residual-only subset (qs, cost 1)
    tied: bool
    local: bool  # every block is one marginal view's own (then (G R)[top, :] lives on its lower columns)

    @property
    def residual_loss(self) -> float:
        return float(self.residual_roots.sum() ** 2)

    @property
    def queries(self) -> float:
        return self.workload.query_count(weighted=True)

    # ---- the objective -------------------------------------------------------------------------
    def evaluate(self, ys: list[np.ndarray], tau: float = 0.0, *, want_grad: bool = True) -> Evaluation:
        """f and its gradient for per-view residual-coordinate Grams ``ys`` (one when tied), budget
        share ``tau`` of the residual-only mechanisms (the views' costs are their max diagonals)."""
        nv = len(self.views)
        elim = []
        for k in range(1 if self.tied else nv):
            v = self.views[k]
            y = ys[k] / v.cells
            a = y[np.ix_(v.top, v.top)]
            b = y[np.ix_(v.top, v.low)]
            c = y[np.ix_(v.low, v.low)]
            ch = scipy.linalg.cho_factor(a, lower=False)
            ainv = scipy.linalg.cho_solve(ch, np.eye(len(v.top)))
            kk = ainv @ b
            elim.append((ainv, kk, c - b.T @ kk))
        el = (lambda k: elim[0]) if self.tied else (lambda k: elim[k])
        s = self._scatter([e[2] for e in elim])
        mm = self.m0.copy()
        js: list[np.ndarray] = [None] * nv  # (G R)[top_g, jcols_g]
        f = 0.0
        if self.tied:  # every view has the same top Gram and the same A^-1
            f += nv * float(np.sum(self.views[0].gtt * elim[0][0]))
        else:
            for k, v in enumerate(self.views):
                f += float(np.sum(v.gtt * el(k)[0]))
        if self.local and self.tied:
            b0 = self.blocks[0]
            ainv, kk, _ = elim[0]
            r = self._r_local(kk, b0, 0)
            wr = b0.w @ r
            ml = r.T @ wr
            j0 = wr[b0.tops[0][1]]
            mm += self._scatter([ml])
            js = [j0] * nv
        else:
            jacc = [np.zeros((len(v.top), len(v.jcols))) for v in self.views]
            # tied (symmetric workloads): blocks of one arity are the same matrices in the same
            # local layout, so R^T W R and W R are computed once per arity
            cache: dict = {}
            for b in self.blocks:
                key = (len(b.attrs), b.w.shape, len(b.tops)) if self.tied else None
                if key is not None and key in cache:
                    wr, ml = cache[key]
                    cols = np.unique(b.low_glob)
                else:
                    r, cols = self._r_general(b, el)
                    wr = b.w @ r
                    ml = r.T @ wr
                    if key is not None:
                        cache[key] = (wr, ml)
                mm[np.ix_(cols, cols)] += ml
                for o, rows in b.tops:
                    pos = np.searchsorted(self.views[o].jcols, cols)
                    jacc[o][:, pos] += wr[rows]
            js = jacc
        mm = (mm + mm.T) / 2
        try:
            chs = scipy.linalg.cho_factor(s, lower=False)
        except np.linalg.LinAlgError:
            return Evaluation(math.inf, [], 0.0)
        q = scipy.linalg.cho_solve(chs, np.eye(self.lower_dim))
        f += float(np.sum(q * mm))
        lres = self.residual_loss
        if lres > 0:
            f += lres / tau if tau > 0 else math.inf
        dtau = -lres / tau**2 if lres > 0 and tau > 0 else 0.0
        if not want_grad:
            return Evaluation(f, [], dtau)
        p = q @ mm @ q
        grads = []
        if self.tied:
            ainv, kk, _ = elim[0]
            v0 = self.views[0]
            if self.local:
                k0 = len(v0.low_glob)
                flat, _ = self._flat()
                qsum = q.ravel()[flat].reshape(nv, k0, k0).sum(axis=0)
                psum = p.ravel()[flat].reshape(nv, k0, k0).sum(axis=0)
                z = self._z(ainv, kk, v0.gtt * nv, js[0], qsum, psum, v0)
            else:
                z = sum(
                    self._z(
                        ainv, kk, v.gtt, js[k], q[np.ix_(v.jcols, v.low_glob)], p[np.ix_(v.low_glob, v.low_glob)], v
                    )
                    for k, v in enumerate(self.views)
                )
            grads.append(-z / v0.cells)
        else:
            for k, v in enumerate(self.views):
                ainv, kk, _ = elim[k]
                z = self._z(
                    ainv, kk, v.gtt, js[k], q[np.ix_(v.jcols, v.low_glob)], p[np.ix_(v.low_glob, v.low_glob)], v
                )
                grads.append(-z / v.cells)
        return Evaluation(f, grads, dtau, {"q": q, "p": p, "m": mm})

    def _flat(self) -> tuple[np.ndarray, np.ndarray]:
        """(flat indices of every view's low x low block in the lower system, offsets per view)."""
        if getattr(self, "_flat_cache", None) is None:
            parts = [(v.low_glob[:, None] * self.lower_dim + v.low_glob[None, :]).ravel() for v in self.views]
            offs = np.concatenate([[0], np.cumsum([len(x) for x in parts])])
            self._flat_cache = (np.concatenate(parts), offs)
        return self._flat_cache

    def _scatter(self, blocks: list[np.ndarray]) -> np.ndarray:
        """sum_g embed(block_g) over the lower system (one block shared by every view when only one is given)."""
        flat, _ = self._flat()
        vals = (
            np.tile(blocks[0].ravel(), len(self.views))
            if len(blocks) == 1
            else np.concatenate([b.ravel() for b in blocks])
        )
        nl = self.lower_dim
        return np.bincount(flat, weights=vals, minlength=nl * nl).reshape(nl, nl)

    @staticmethod
    def _z(ainv, kk, gtt, j, qc, pg, v: MarginalView) -> np.ndarray:
        """Z = X^-1 G X^-1 on a marginal view's coordinates (top and low positions)."""
        ajq = ainv @ j @ qc  # top x low
        # Z_tt = A^-1 G_tt A^-1 - A^-1 J Q K^T - K Q J^T A^-1 + K P K^T
        ztt = ainv @ gtt @ ainv - ajq @ kk.T - kk @ ajq.T + kk @ pg @ kk.T
        ztl = ajq - kk @ pg
        z = np.zeros((v.dim, v.dim))
        z[np.ix_(v.top, v.top)] = (ztt + ztt.T) / 2
        z[np.ix_(v.top, v.low)] = ztl
        z[np.ix_(v.low, v.top)] = ztl.T
        z[np.ix_(v.low, v.low)] = (pg + pg.T) / 2
        return z

    def _r_local(self, kk: np.ndarray, b: WorkloadBlock, o: int) -> np.ndarray:
        """R restricted to a marginal view's own block (rows of b.w; columns: the view's low positions)."""
        v = self.views[o]
        r = np.zeros((b.w.shape[0], len(v.low)))
        rows = b.tops[0][1]
        r[rows] = -kk
        # b.low_glob is v.low_glob in the same order (the block is the view itself)
        r[b.low_pos, np.arange(len(v.low))] = 1.0
        return r

    def _r_general(self, b: WorkloadBlock, el) -> tuple[np.ndarray, np.ndarray]:
        """R restricted to a workload block: rows of b.w, columns its lower-system indices (sorted)."""
        cols = np.unique(b.low_glob)
        r = np.zeros((b.w.shape[0], len(cols)))
        r[b.low_pos, np.searchsorted(cols, b.low_glob)] = 1.0
        for o, rows in b.tops:
            v = self.views[o]
            r[np.ix_(rows, np.searchsorted(cols, v.low_glob))] = -el(o)[1]
        return r, cols

    # ---- helpers ---------------------------------------------------------------------------------
    def cell_gram(self, k: int, y: np.ndarray) -> np.ndarray:
        """X_g = U Y U^T in the cell basis of marginal view k (U: its ``basis`` when restricted)."""
        v = self.views[k]
        if v.basis is not None:
            return v.basis @ y @ v.basis.T
        return from_residual(from_residual(y, v.sizes).T, v.sizes).T

    def residual_gram(self, k: int, x: np.ndarray) -> np.ndarray:
        """Y_g = U^T X U of a cell-basis Gram of marginal view k (U: its ``basis`` when restricted)."""
        v = self.views[k]
        if v.basis is not None:
            return v.basis.T @ x @ v.basis
        return to_residual(to_residual(x, v.sizes).T, v.sizes).T


def _symmetric(schema_sizes, grams: dict[tuple[int, ...], np.ndarray]) -> bool:
    """True when the workload is invariant under every permutation of the attributes it uses:
    uniform sizes, for each arity every subset present with one Gram, each Gram invariant under
    permuting its attributes."""
    used = sorted({a for s in grams for a in s})
    if len({schema_sizes[a] for a in used}) > 1:
        return False
    by_k: dict[int, list] = {}
    for s, w in grams.items():
        by_k.setdefault(len(s), []).append((s, w))
    for k, items in by_k.items():
        if len(items) != math.comb(len(used), k):
            return False
        w0 = items[0][1]
        scale = max(1.0, float(np.abs(w0).max()))
        if any(
            w is not w0 and (w.shape != w0.shape or not np.allclose(w, w0, rtol=1e-10, atol=1e-12 * scale))
            for _, w in items
        ):
            return False
        n = schema_sizes[used[0]]
        t = w0.reshape((n,) * (2 * k))
        for i in range(k - 1):
            perm = list(range(2 * k))
            perm[i], perm[i + 1] = perm[i + 1], perm[i]
            perm[k + i], perm[k + i + 1] = perm[k + i + 1], perm[k + i]
            if not np.allclose(t.transpose(perm), t, rtol=1e-10, atol=1e-12 * scale):
                return False
    return True


def informative_attrs(sizes: tuple[int, ...], attrs: tuple[int, ...]) -> tuple[int, ...]:
    """The attributes of ``attrs`` of size above 1 (the others hold one value: a marginal over them
    is the marginal over the rest)."""
    return tuple(a for a in attrs if sizes[a] > 1)


def marginal_view_attrs(
    workload: Workload, max_view_size: int = 2, max_view_cells: int | None = None
) -> list[tuple[int, ...]]:
    """The attribute sets that get marginal mechanisms: the workload's sets of 1..``max_view_size``
    attributes of size above 1 (:func:`informative_attrs`) and at most ``max_view_cells`` cells
    (None: any) not inside another such set. A 1-attribute view gains too: its mechanism on the
    attribute's whole marginal correlates the total with the attribute's residual, which the
    residual family measures apart.

    >>> from querysmasher.schema import parse_schema
    >>> from querysmasher.workload import parse_workload
    >>> marginal_view_attrs(parse_workload("affine:2", parse_schema("synthetic:n=3,d=3")))
    [(0, 1), (0, 2), (1, 2)]
    """
    sizes = workload.schema.sizes
    # an attribute of size 1 is constant: a view's marginal is its other attributes' (no residual
    # coordinate involves it), so the family's view is over those
    attr_sets = sorted({informative_attrs(sizes, v.attrs) for v in workload.views}, key=lambda a: (len(a), a))
    cand = [
        a
        for a in attr_sets
        if 1 <= len(a) <= max_view_size and (max_view_cells is None or math.prod(sizes[i] for i in a) <= max_view_cells)
    ]
    return [a for a in cand if not any(set(a) < set(b) for b in cand)]


def build_problem(
    workload: Workload,
    residual_plan=None,
    *,
    max_view_size: int = 2,
    max_view_cells: int | None = None,
    tie: bool | None = None,
) -> MarginalProblem:
    """The marginal-family problem of ``workload``: marginal views are the workload's attribute sets
    of 1..``max_view_size`` attributes not inside another such set; ``residual_plan`` (a ``qs``
    :class:`~querysmasher.plan.Plan` at beta = 1) gives the residual-only subsets' losses and costs.
    ``max_view_cells``: larger views keep their residual mechanisms too (their lower residuals are
    shared with the marginal views that contain them, or stay residual-only). ``tie``: share one
    mechanism across views (None: when the workload is symmetric; true on any other workload is an
    InputError)."""
    sizes_all = workload.schema.sizes
    attr_sets = sorted({v.attrs for v in workload.views}, key=lambda a: (len(a), a))
    mviews_attrs = marginal_view_attrs(workload, max_view_size, max_view_cells)
    mindex = {a: i for i, a in enumerate(mviews_attrs)}
    lower_sets = sorted(
        {s for g in mviews_attrs for k in range(len(g)) for s in itertools.combinations(g, k)},
        key=lambda a: (len(a), a),
    )
    lower_sets = [s for s in lower_sets if subset_dim(sizes_all, s) > 0]
    lower, off = {}, 0
    for s in lower_sets:
        lower[s] = off
        off += subset_dim(sizes_all, s)
    lower_dim = off

    def glob(c, pos):
        return np.array([lower[c.subsets[c.subset_of[p]]] + c.local[p] for p in pos], dtype=np.int64)

    views = []
    for g in mviews_attrs:
        sz = tuple(sizes_all[a] for a in g)
        c = view_coords(g, sz)
        top = c.positions(g)
        low = np.array([p for s in c.subsets if s != g for p in c.positions(s)], dtype=np.int64)
        views.append(MarginalView(g, sz, top, low, glob(c, low)))

    # views with the same queries share one Gram array (thousands of identical 3-way views)
    by_sig: dict = {}
    grams = {}
    sigs = {}
    for a in attr_sets:
        sig = (tuple(sizes_all[i] for i in a),) + tuple(
            sorted(
                (v.family, v.factors, v.weight, v.term, (v.seed, v.attrs) if v.family in ("random", "custom") else None)
                for v in workload.views
                if v.attrs == a
            )
        )
        if sig not in by_sig:
            by_sig[sig] = workload_residual_gram(workload, a)
        grams[a], sigs[a] = by_sig[sig], sig
    # one kept Gram per (queries, kept positions) and one top Gram per distinct list of contributions:
    # a tied problem over [30]^40 holds 2 of each instead of 780 (8.8 GB before)
    kept_cache: dict = {}
    blocks: list[WorkloadBlock] = []
    m0 = np.zeros((lower_dim, lower_dim))
    gtt_parts: list[list] = [[] for _ in views]
    jcols: list[set] = [set() for _ in views]
    for a in attr_sets:
        sz = tuple(sizes_all[i] for i in a)
        c = view_coords(a, sz)
        tops = [(mindex[s], c.positions(s)) for s in c.subsets if s in mindex]
        low_pos = np.array([p for s in c.subsets if s in lower for p in c.positions(s)], dtype=np.int64)
        if not tops:
            if len(low_pos):
                gl = glob(c, low_pos)
                m0[np.ix_(gl, gl)] += grams[a][np.ix_(low_pos, low_pos)] / math.prod(sz)
            continue
        keep = np.concatenate([low_pos] + [p for _, p in tops])
        remap = {int(p): i for i, p in enumerate(keep)}
        ck = (sigs[a], keep.tobytes())
        if ck not in kept_cache:
            kept_cache[ck] = grams[a][np.ix_(keep, keep)] / math.prod(sz)
        wk = kept_cache[ck]
        lp = np.array([remap[int(p)] for p in low_pos], dtype=np.int64)
        tk = [(o, np.array([remap[int(p)] for p in pos], dtype=np.int64)) for o, pos in tops]
        gl = glob(c, low_pos)
        blocks.append(WorkloadBlock(a, wk, lp, gl, tk))
        for o, rows in tk:
            gtt_parts[o].append((ck, rows))
            jcols[o].update(gl.tolist())
    gtt_cache: dict = {}
    for k, v in enumerate(views):
        key = tuple((ck, rows.tobytes()) for ck, rows in gtt_parts[k])
        if key not in gtt_cache:
            acc = np.zeros((len(v.top), len(v.top)))
            for ck, rows in gtt_parts[k]:
                acc += kept_cache[ck][np.ix_(rows, rows)]
            gtt_cache[key] = (acc + acc.T) / 2
        v.gtt = gtt_cache[key]
        v.jcols = np.array(sorted(jcols[k] | set(v.low_glob.tolist())), dtype=np.int64)
    local = all(len(b.tops) == 1 and b.attrs == views[b.tops[0][0]].attrs for b in blocks) and len(blocks) == len(views)
    if local:  # order blocks as the views, and each block's lower rows as its view's low positions
        blocks.sort(key=lambda b: b.tops[0][0])
        for b, v in zip(blocks, views):
            order = {int(gi): i for i, gi in enumerate(b.low_glob)}
            perm = np.array([order[int(gi)] for gi in v.low_glob], dtype=np.int64)
            b.low_pos, b.low_glob = b.low_pos[perm], b.low_glob[perm]

    # residual-only subsets: measured by the qs plan's own mechanisms
    res_only, roots = [], []
    if residual_plan is not None:
        costs = residual_plan.allocation.costs
        for i, s in enumerate(residual_plan.views):
            if s in lower or s in mindex:
                continue
            lv = float(residual_plan.losses[i])
            if lv > 0:
                res_only.append(s)
                roots.append(math.sqrt(lv * (1.0 if costs is None else float(costs[i]))))
    # The tied objective counts one view's top Gram and blocks once per view, exact only for a
    # symmetric workload: tie=true elsewhere would report a wrong error (or fail on uneven views).
    symmetric = len(views) > 1 and _symmetric(sizes_all, grams)
    if tie and not symmetric:
        raise InputError(
            "qsplus tie",
            tie,
            "applies only to a workload of 2+ marginal views symmetric under "
            "attribute permutations (uniform sizes, the same queries on every "
            "subset); leave it unset or false",
        )
    if tie is None:
        tie = symmetric
    return MarginalProblem(
        workload, views, lower, lower_dim, blocks, m0, res_only, np.array(roots), bool(tie) and len(views) > 0, local
    )
