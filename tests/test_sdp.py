"""Tests of the certified per-view SDP solver (querysmasher.solvers.sdp) and its cvxpy oracle."""

from __future__ import annotations

import numpy as np
import pytest

from querysmasher.solvers.reference import solve_reference
from querysmasher.solvers.sdp import (
    DenseSolveResult,
    dual_bound,
    dual_bound_factored,
    loss_of,
    solve_dense,
    solve_factored,
)

# ----------------------------------------------------------------------------- Grams


def centring(n: int) -> np.ndarray:
    return np.eye(n) - np.ones((n, n)) / n


def prefix_gram(n: int) -> np.ndarray:
    """Centred 1-D prefix Gram C P^T P C (query c = "A <= c" = ones at cells 0..c)."""
    p = np.tril(np.ones((n, n)))
    c = centring(n)
    return c @ p.T @ p @ c


def range_gram(n: int) -> np.ndarray:
    """Centred Gram of all n(n+1)/2 intervals."""
    q = np.array([[1.0 if a <= i <= b else 0.0 for i in range(n)] for a in range(n) for b in range(a, n)])
    q = q @ centring(n)
    return q.T @ q


def twoway_gram(n: int, kind: str) -> np.ndarray:
    """Two-way Gram over cells a1 * n + a2, each query centred along both attributes (C ⊗ C)."""
    a1, a2 = np.divmod(np.arange(n * n), n)
    if kind == "abs":  # |A1 - A2| <= c, c = 0..n-1
        q = np.array([np.abs(a1 - a2) <= c for c in range(n)], dtype=float)
    else:  # A1 + A2 <= c, c = 0..2n-2
        q = np.array([a1 + a2 <= c for c in range(2 * n - 1)], dtype=float)
    q = q @ np.kron(centring(n), centring(n))
    return q.T @ q


def random_gram(rng: np.random.Generator, c: int, rank: int, zero_cells: int = 0) -> np.ndarray:
    w = rng.standard_normal((rank, c)) * rng.uniform(0.2, 3.0, size=c)  # uneven cell scales
    w[:, rng.choice(c, size=zero_cells, replace=False)] = 0.0  # exact zero rows/columns of G
    return w.T @ w


# ----------------------------------------------------------------------------- invariants


def check_result(G: np.ndarray, r: DenseSolveResult, target_gap: float) -> None:
    """Everything a result promises, recomputed independently of the solver's own arithmetic."""
    c = G.shape[0]
    X = r.X
    assert X.shape == (c, c)
    assert np.array_equal(X, X.T)
    assert X.diagonal().max() <= 1 + 1e-12
    e = np.linalg.eigvalsh(X)
    assert e.min() >= -1e-12 * max(e.max(), 1.0)
    # range(X) ⊇ range(G) and the loss, with a plain pseudo-inverse
    xp = np.linalg.pinv(X, rcond=1e-10, hermitian=True)
    scale = max(np.abs(G).max(), 1e-300)
    assert np.abs(G - X @ xp @ G).max() <= 1e-7 * scale
    assert r.loss == pytest.approx(float(np.sum(G * xp)), rel=1e-7, abs=1e-12 * scale)
    # the certificate: p on the simplex, its dual value, weak duality, the gap
    p = r.dual_weights
    assert p.shape == (c,) and p.min() >= 0 and p.sum() == pytest.approx(1.0, abs=1e-12)
    assert dual_bound(G, p) == pytest.approx(r.lower_bound, rel=1e-12, abs=1e-300)
    assert r.lower_bound <= r.loss * (1 + 1e-12)
    expected_gap = (r.loss - r.lower_bound) / r.loss if r.loss > 0 else 0.0
    assert r.gap == pytest.approx(expected_gap, rel=1e-12, abs=1e-15)
    assert r.converged == (r.gap <= target_gap)
    assert r.factorizations >= 1 and r.seconds >= 0


def solve_checked(G: np.ndarray, **kw) -> DenseSolveResult:
    r = solve_dense(G, **kw)
    check_result(G, r, kw.get("target_gap", 1e-4))
    return r


# ----------------------------------------------------------------------------- known optima


def test_prefix10_optimum_and_default_gap():
    G = prefix_gram(10)
    r = solve_checked(G)
    assert r.converged and r.gap <= 1e-4
    tight = solve_checked(G, target_gap=1e-8)
    assert tight.loss == pytest.approx(9.965944, rel=1e-6)
    assert tight.lower_bound == pytest.approx(9.965944, rel=1e-6)
    assert r.loss >= tight.lower_bound  # no upper bound can beat a lower bound


def test_twoway_abs10_rank_deficient_boundary_optimum():
    G = twoway_gram(10, "abs")  # rank 9 over 100 cells: singular optimal X, dual optimum on the boundary
    r = solve_checked(G)
    assert r.converged
    assert r.loss == pytest.approx(9.915058, rel=1e-4)
    tight = solve_checked(G, target_gap=1e-8)
    assert tight.loss == pytest.approx(9.915058, rel=1e-6)


def test_twoway_affine10_beats_previous_best():
    G = twoway_gram(10, "affine")
    r = solve_checked(G)
    assert r.converged
    assert r.loss < 14.5094  # the best primal found before this solver
    assert r.lower_bound <= 14.4937 <= r.loss * (1 + 1e-4)  # the measured dual optimum is ≈ 14.4936
    tight = solve_checked(G, target_gap=1e-8)
    assert tight.loss == pytest.approx(14.4936, abs=1e-4)


def test_closed_forms():
    rng = np.random.default_rng(7)
    d = rng.uniform(0.5, 4.0, size=12)
    r = solve_checked(np.diag(d), target_gap=1e-9)  # diagonal G: X = I is optimal, L = tr G
    assert r.loss == pytest.approx(d.sum(), rel=1e-8)
    np.testing.assert_allclose(r.X, np.eye(12), atol=1e-4)
    w = rng.standard_normal(15)
    r = solve_checked(np.outer(w, w), target_gap=1e-9)  # rank one: L = max_i w_i^2
    assert r.loss == pytest.approx(np.max(w**2), rel=1e-8)
    r = solve_checked(np.array([[2.0, 1.0], [1.0, 2.0]]), target_gap=1e-10)  # 2 + sqrt 3 at X = I
    assert r.loss == pytest.approx(2 + np.sqrt(3), rel=1e-9)


# ----------------------------------------------------------------------------- edge cases


def test_single_cell():
    r = solve_checked(np.array([[2.5]]))
    assert (
        r.X.tolist() == [[1.0]] and r.loss == pytest.approx(2.5, rel=1e-14) and r.gap == pytest.approx(0.0, abs=1e-14)
    )
    r0 = solve_checked(np.zeros((1, 1)))
    assert r0.loss == 0.0 and r0.X.tolist() == [[1.0]]


def test_zero_gram():
    r = solve_checked(np.zeros((5, 5)))
    assert r.loss == 0.0 and r.lower_bound == 0.0 and r.gap == 0.0 and r.converged
    assert np.array_equal(r.X, np.eye(5))


def test_zero_cells_get_unit_diagonal_and_no_coupling():
    G = random_gram(np.random.default_rng(3), 9, 9, zero_cells=3)
    zero = np.flatnonzero(np.diag(G) == 0)
    r = solve_checked(G, target_gap=1e-8)
    for i in zero:
        expected = np.zeros(9)
        expected[i] = 1.0
        np.testing.assert_array_equal(r.X[i], expected)
        assert r.dual_weights[i] == 0.0
    # the same optimum as the problem restricted to the other cells
    keep = np.setdiff1d(np.arange(9), zero)
    assert r.loss == pytest.approx(solve_dense(G[np.ix_(keep, keep)], target_gap=1e-8).loss, rel=1e-7)


def test_scaling_and_symmetrisation():
    G = twoway_gram(4, "affine")
    r = solve_dense(G, target_gap=1e-7)
    for s in (1024.0, 1e-3, 37.5):
        rs = solve_checked(s * G, target_gap=1e-7)
        assert rs.loss == pytest.approx(s * r.loss, rel=1e-9)
        assert rs.lower_bound == pytest.approx(s * r.lower_bound, rel=1e-9)
        np.testing.assert_allclose(rs.X, r.X, atol=1e-8)
    noisy = G + 1e-13 * np.triu(np.ones_like(G), 1)  # asymmetric at rounding level: accepted, and
    assert solve_dense(noisy).loss == solve_dense((noisy + noisy.T) / 2).loss  # solved symmetrised


def test_deterministic():
    G = twoway_gram(5, "abs")
    a, b = solve_dense(G), solve_dense(G)
    assert np.array_equal(a.X, b.X) and np.array_equal(a.dual_weights, b.dual_weights)
    assert (a.loss, a.lower_bound, a.iterations, a.factorizations) == (
        b.loss,
        b.lower_bound,
        b.iterations,
        b.factorizations,
    )


def test_limits_still_return_valid_bounds():
    G = twoway_gram(10, "abs")
    r = solve_checked(G, max_iterations=1)
    assert r.iterations <= 1 and not r.converged and r.gap > 1e-4
    t = solve_checked(G, time_limit=0.0)
    assert not t.converged and t.iterations == 0
    assert t.lower_bound <= 9.915058 <= t.loss


@pytest.mark.parametrize(
    "bad",
    [
        np.ones((3, 4)),
        np.ones(3),
        np.array([[1.0, 0.5], [0.0, 1.0]]),  # not symmetric
        -np.eye(3),  # negative definite
        np.array([[1.0, 2.0], [2.0, 1.0]]),  # indefinite
        np.array([[1.0, np.nan], [np.nan, 1.0]]),
        np.array([[np.inf, 0.0], [0.0, 1.0]]),
    ],
    ids=["non-square", "vector", "non-symmetric", "negative-definite", "indefinite", "nan", "inf"],
)
def test_bad_gram_raises(bad):
    with pytest.raises(ValueError):
        solve_dense(bad)
    with pytest.raises(ValueError):
        dual_bound(bad, np.full(bad.shape[0], 1.0 / bad.shape[0]))


# ----------------------------------------------------------------------------- dual_bound and loss_of


def test_weak_duality_for_arbitrary_p():
    G = twoway_gram(6, "affine")
    opt = solve_dense(G, target_gap=1e-8).loss
    rng = np.random.default_rng(11)
    for _ in range(20):
        p = rng.dirichlet(np.full(36, 0.3))
        assert dual_bound(G, p) <= opt * (1 + 1e-10)
        # the dual value from its definition: (tr (P^1/2 G P^1/2)^1/2)^2, P = diag(p)
        e = np.linalg.eigvalsh(np.sqrt(p)[:, None] * G * np.sqrt(p)[None, :])
        assert dual_bound(G, p) == pytest.approx(float(np.sqrt(e[e > 1e-12 * e.max()]).sum()) ** 2, rel=1e-10)
    assert dual_bound(G, 5.0 * np.full(36, 1 / 36)) == pytest.approx(dual_bound(G, np.full(36, 1 / 36)), rel=1e-13)
    with pytest.raises(ValueError):
        dual_bound(G, -np.full(36, 1 / 36))
    with pytest.raises(ValueError):
        dual_bound(G, np.full(35, 1 / 35))


def test_loss_of():
    G = prefix_gram(6)  # range = 1^⊥
    assert loss_of(G, np.eye(6)) == pytest.approx(np.trace(G), rel=1e-12)
    assert loss_of(np.diag([1.0, 4.0]), np.diag([1.0, 0.5])) == pytest.approx(9.0, rel=1e-14)
    c = centring(6)  # singular, range exactly range(G): the pseudo-inverse is used
    assert loss_of(G, c) == pytest.approx(np.trace(G @ np.linalg.pinv(c)), rel=1e-10)
    with pytest.raises(ValueError, match="range"):
        loss_of(G, np.diag([1.0, 1, 1, 1, 1, 0]))  # misses e_5, which range(G) needs
    with pytest.raises(ValueError, match="semidefinite"):
        loss_of(G, np.diag([1.0, 1, 1, 1, 1, -0.5]))
    with pytest.raises(ValueError):
        loss_of(G, np.eye(5))


# ----------------------------------------------------------------------------- the cvxpy oracle


def agree_with_oracle(G: np.ndarray) -> None:
    pytest.importorskip("cvxpy")
    r = solve_checked(G, target_gap=1e-7)
    X_ref, L_ref = solve_reference(G)
    assert X_ref.diagonal().max() <= 1 + 1e-6
    assert r.loss == pytest.approx(L_ref, rel=1e-5)
    assert r.lower_bound <= L_ref * (1 + 1e-6)  # the certificate is below the oracle's optimum too


@pytest.mark.parametrize(
    "c, rank, zeros, seed",
    [
        (4, 4, 0, 0),
        (6, 2, 0, 1),
        (10, 10, 0, 2),
        (12, 3, 2, 3),
        (16, 16, 1, 4),
        (20, 2, 0, 5),
        (25, 6, 3, 6),
        (30, 30, 0, 7),
        (30, 2, 4, 8),
    ],
)
def test_random_grams_match_oracle(c, rank, zeros, seed):
    agree_with_oracle(random_gram(np.random.default_rng(seed), c, rank, zeros))


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_prefix_and_range_match_oracle(n):
    agree_with_oracle(prefix_gram(n))
    agree_with_oracle(range_gram(n))


@pytest.mark.parametrize("n, kind", [(3, "affine"), (4, "affine"), (5, "affine"), (4, "abs"), (5, "abs")])
def test_twoway_match_oracle(n, kind):
    agree_with_oracle(twoway_gram(n, kind))


def test_oracle_refuses_large_views():
    with pytest.raises(ValueError, match="max_cells"):
        solve_reference(np.eye(65))
    with pytest.raises(ValueError, match="max_cells"):
        solve_reference(np.eye(5), max_cells=4)


@pytest.mark.slow
@pytest.mark.parametrize("n", [6, 7, 8])
def test_twoway_affine_match_oracle_slow(n):
    agree_with_oracle(twoway_gram(n, "affine"))


@pytest.mark.slow
def test_twoway_abs10_matches_oracle_slow():
    G = twoway_gram(10, "abs")
    pytest.importorskip("cvxpy")
    r = solve_checked(G, target_gap=1e-7)
    _, L_ref = solve_reference(G, max_cells=100)
    assert r.loss == pytest.approx(L_ref, rel=1e-5)


@pytest.mark.slow
def test_twoway_affine20_certified():
    r = solve_checked(twoway_gram(20, "affine"))
    assert r.converged and r.seconds < 120


# ----------------------------------------------------------------------------- the factored solver


def twoway_factor(n: int, kind: str) -> np.ndarray:
    """The centred query rows of :func:`twoway_gram` (G = F^T F)."""
    a1, a2 = np.divmod(np.arange(n * n), n)
    if kind == "abs":
        q = np.array([np.abs(a1 - a2) <= c for c in range(n)], dtype=float)
    else:
        q = np.array([a1 + a2 <= c for c in range(2 * n - 1)], dtype=float)
    return q @ np.kron(centring(n), centring(n))


def check_factored(F: np.ndarray, r, target_gap: float) -> None:
    """What a factored result promises, recomputed from the explicit G and X (small views)."""
    G = F.T @ F
    c = G.shape[0]
    assert r.V.shape[0] == c and r.s.shape == (r.V.shape[1],) and r.s.min() > 0
    assert np.allclose(r.V.T @ r.V, np.eye(r.V.shape[1]), atol=1e-12)  # orthonormal columns
    X = r.X
    assert X.diagonal().max() <= 1 + 1e-12 and X.diagonal().max() >= 1 - 1e-12
    assert r.V.shape[1] == np.linalg.matrix_rank(G, hermitian=True)  # X has G's rank
    xp = np.linalg.pinv(X, rcond=1e-10, hermitian=True)
    assert np.abs(G - X @ xp @ G).max() <= 1e-7 * np.abs(G).max()
    assert r.loss == pytest.approx(float(np.sum(G * xp)), rel=1e-7)
    assert dual_bound(G, r.dual_weights) == pytest.approx(r.lower_bound, rel=1e-10)
    assert r.lower_bound <= r.loss * (1 + 1e-12)
    assert r.converged == (r.gap <= target_gap)


@pytest.mark.parametrize(
    "make, optimum",
    [
        (lambda: np.tril(np.ones((10, 10))) @ centring(10), 9.9659437),
        (lambda: twoway_factor(10, "abs"), 9.9150573),
        (lambda: twoway_factor(10, "affine"), 14.493637),
    ],
    ids=["prefix10", "abs10", "affine10"],
)
def test_factored_known_optima(make, optimum):
    F = make()
    r = solve_factored(F, target_gap=1e-7)
    check_factored(F, r, 1e-7)
    assert r.converged
    assert r.lower_bound <= optimum * (1 + 1e-7) and r.loss >= optimum * (1 - 1e-7)
    assert r.loss == pytest.approx(optimum, rel=2e-7)
    # the same optimum as the dense solver
    assert r.loss == pytest.approx(solve_dense(F.T @ F, target_gap=1e-7).loss, rel=2e-7)


@pytest.mark.parametrize("c, rank, seed", [(60, 5, 0), (200, 20, 1), (300, 150, 2)])
def test_factored_random_grams_certify(c, rank, seed):
    rng = np.random.default_rng(seed)
    F = rng.standard_normal((rank, c)) * rng.uniform(0.2, 3.0, size=c)
    F[:, :3] = 0.0  # zero cells
    r = solve_factored(F, target_gap=1e-4)
    check_factored(F, r, 1e-4)
    assert r.converged
    assert r.loss == pytest.approx(solve_dense(F.T @ F, target_gap=1e-6).loss, rel=2e-4)


def test_factored_wide_and_zero_inputs():
    r = solve_factored(np.zeros((2, 5)))
    assert r.loss == 0.0 and r.V.shape == (5, 0)
    tall = np.random.default_rng(3).standard_normal((12, 6))  # more rows than cells: full rank
    check_factored(tall, solve_factored(tall), 1e-4)
    assert dual_bound_factored(tall, np.full(6, 1 / 6)) == pytest.approx(
        dual_bound(tall.T @ tall, np.full(6, 1 / 6)), rel=1e-12
    )


def test_matrix_free_newton_matches_the_cholesky_one(monkeypatch, caplog):
    """solve_dense with the matrix-free phase 2 forced reaches the same certified optimum."""
    import logging

    import querysmasher.solvers.sdp.core as core  # solve_core reads the limit there

    G = twoway_gram(10, "abs")
    monkeypatch.setattr(core, "_MAX_HESSIAN_FLOPS", 0.0)
    with caplog.at_level(logging.DEBUG, logger="querysmasher.solvers.sdp"):
        r = solve_checked(G, target_gap=1e-7)
    assert r.converged and r.loss == pytest.approx(9.9150573, rel=2e-7)
    # phase 2 ran matrix-free: its Newton systems were solved by Hessian products (none with Cholesky)
    phase2 = [rec.args for rec in caplog.records if rec.getMessage().startswith("phase 2:")]
    assert phase2 and phase2[-1][-1] > 0


def test_step_length_follows_the_curvature_of_random_views(monkeypatch):
    """On a random view's residual Gram (Table 4's random:2 over [20]^2) the multiplicative map's
    Jacobian has eigenvalues near 1/2, so tau = 3 overshoots; the Barzilai-Borwein length picks a
    shorter step and certifies 1e-4 in fewer steps than tau fixed at 3."""
    from querysmasher.decompose import decompose
    from querysmasher.schema import parse_schema
    from querysmasher.solvers.sdp import dual
    from querysmasher.solvers.sdp.problem import prepare
    from querysmasher.workload import parse_workload

    d = decompose(parse_workload("random:2", parse_schema("synthetic:n=20,d=2")))
    G = d.grams[(0, 1)].dense(d.store)
    adaptive = solve_dense(G)
    W = prepare(G).W
    start = np.einsum("ij,ij->j", W, W)
    first = dual.dual_point(W, start / start.sum())
    assert dual.step_length(first, None) == 3.0
    second = dual.ascent_step(W, first, dual.Tracker(), {"factorizations": 0})
    assert 1.0 < dual.step_length(second, first) < 3.0
    monkeypatch.setattr(dual, "step_length", lambda pt, prev: 3.0)
    fixed = solve_dense(G)
    assert adaptive.converged and fixed.converged
    assert adaptive.iterations < fixed.iterations
    assert adaptive.loss == pytest.approx(fixed.loss, rel=2e-4)
