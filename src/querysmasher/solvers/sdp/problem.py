"""The prepared per-view problem: input checks, the factor W of G, weighted Grams, the dual value and losses.

Everything the phases and front ends of :mod:`querysmasher.solvers.sdp` evaluate G through:
:func:`prepare` validates G and factors G / scale = W^T W at its numerical rank;
:func:`weighted_gram` forms A(p) = W D_p W^T, :func:`root_spectrum` takes its rounding-safe square
roots and :func:`dual_s` sums them into s(p), the square root of the dual value
(:func:`dual_bound`); :func:`loss_of` / :func:`loss_and_eig` give the exact loss tr(G X^+) of an
explicit X. The package docstring describes the math.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from ...linalg import eigh_sym

__all__ = [
    "EPS",
    "RANGE_RTOL",
    "Prepared",
    "prepare",
    "weighted_gram",
    "root_spectrum",
    "dual_s",
    "dual_bound",
    "loss_and_eig",
    "loss_of",
]

EPS = float(np.finfo(float).eps)
_SYM_RTOL = 1e-8  # |G - G^T| allowed, relative to max |G|: Grams assembled in floating point
_PSD_RTOL = 1e-8  # most negative eigenvalue allowed, relative to the largest |eigenvalue|
RANGE_RTOL = 1e-8  # ||(I - X X^+) G^½||_F / ||G^½||_F accepted as "range(X) contains range(G)"


# ----------------------------------------------------------------------------- input handling


def _as_square(m: np.ndarray, name: str) -> np.ndarray:
    a = np.array(m, dtype=float)  # a copy: callers' arrays are never modified
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or infinite entries")
    return a


def _symmetrised(m: np.ndarray, name: str) -> np.ndarray:
    scale = float(np.abs(m).max(initial=0.0))
    if float(np.abs(m - m.T).max(initial=0.0)) > _SYM_RTOL * scale:
        raise ValueError(f"{name} is not symmetric (max |{name} - {name}^T| exceeds {_SYM_RTOL:g} x max |{name}|)")
    return (m + m.T) / 2


def _check_psd(e: np.ndarray, name: str) -> None:
    scale = float(np.abs(e).max(initial=0.0))
    if e.size and float(e.min()) < -_PSD_RTOL * scale:
        raise ValueError(
            f"{name} is not positive semidefinite (smallest eigenvalue {e.min():.3g}, largest |eigenvalue| {scale:.3g})"
        )


@dataclass(frozen=True)
class Prepared:
    """G / scale = W_all^T W_all (numerical rank); the solve uses the columns ``kept``."""

    c: int
    scale: float  # max diag(G); 0 for G == 0
    W_all: np.ndarray  # r x c factor of G / scale
    kept: np.ndarray  # cells with a nonzero diagonal

    @property
    def W(self) -> np.ndarray:
        return self.W_all[:, self.kept]


def prepare(G: np.ndarray) -> Prepared:
    """G validated (square, finite, symmetric, PSD), scaled to unit max diagonal and factored at its numerical rank."""
    g = _symmetrised(_as_square(G, "G"), "G")
    c = g.shape[0]
    diag = np.diag(g)
    scale = float(diag.max(initial=0.0))
    e, v = eigh_sym(g / scale if scale > 0 else g)
    _check_psd(e, "G")
    if scale <= 0:  # PSD with a zero diagonal: G == 0
        return Prepared(c, 0.0, np.zeros((0, c)), np.zeros(0, dtype=int))
    # eigenvalues at rounding level are zero (the rule of numpy.linalg.matrix_rank, at least 32 eps)
    keep = e > max(c, 32) * EPS * e.max()
    w_all = (v[:, keep] * np.sqrt(e[keep])).T
    kept = np.flatnonzero(diag > c * EPS * scale)
    return Prepared(c, scale, w_all, kept)


# ----------------------------------------------------------------------------- the dual value and the loss


def weighted_gram(W: np.ndarray, p: np.ndarray) -> np.ndarray:
    """W D_p W^T (upper triangle) for p >= 0 by one symmetric rank-k update: half a general product."""
    a = W * np.sqrt(p)
    if a.shape[0] == 0:
        return np.zeros((0, 0))
    return sla.blas.dsyrk(1.0, a.T, trans=1, lower=0)  # a.T is Fortran-ordered: read in place


def root_spectrum(k: np.ndarray) -> tuple[np.ndarray, float]:
    """(sqrt(max(k - e, 0)), e) for the computed eigenvalues k of a PSD r x r matrix A = W D_p W^T.

    e = r eps max(k) bounds the rounding error of each computed eigenvalue (forming A and the
    symmetric eigensolver are backward stable, and Weyl's inequality carries that to eigenvalues).
    The square root magnifies an error d in a small eigenvalue k to d / (2 sqrt k): ~1e-8 relative
    for the eigenvalues that are exactly 0. Lowering every eigenvalue by e before the root keeps
    s(p), hence the dual bound, below its exact value.
    """
    floor = k.size * EPS * max(float(k.max(initial=0.0)), 0.0)
    return np.sqrt(np.maximum(k - floor, 0.0)), floor


def dual_s(W: np.ndarray, p: np.ndarray) -> float:
    """s(p) = tr((W D_p W^T)^½)."""
    if W.shape[0] == 0:
        return 0.0
    return float(root_spectrum(np.linalg.eigvalsh(weighted_gram(W, p), UPLO="U"))[0].sum())


def dual_bound(G: np.ndarray, p: np.ndarray) -> float:
    """The dual value (tr (D_p^½ G D_p^½)^½)^2 for p >= 0 normalised to sum 1: a lower bound on min L.

    >>> round(dual_bound(np.diag([1.0, 4.0]), np.array([0.5, 0.5])), 12)  # (sqrt .5 + sqrt 2)^2
    4.5
    >>> round(dual_bound(np.diag([1.0, 4.0]), np.array([0.2, 0.8])), 12)  # p ∝ diag: the optimum tr G
    5.0
    """
    prep = prepare(G)
    q = np.asarray(p, dtype=float).ravel()
    if q.shape != (prep.c,) or not np.all(np.isfinite(q)) or np.any(q < 0) or q.sum() <= 0:
        raise ValueError(f"p must be {prep.c} finite non-negative weights with a positive sum")
    q = q / q.sum()
    return prep.scale * dual_s(prep.W, q[prep.kept]) ** 2


def _loss_from_factor(W_all: np.ndarray, X: np.ndarray) -> float:
    """tr(W^T W X^+) for PSD X with range(X) ⊇ range(W^T) (checked); W^T W is G up to rounding."""
    return loss_and_eig(W_all, X)[0]


def loss_and_eig(W_all: np.ndarray, X: np.ndarray) -> tuple[float, tuple[np.ndarray, np.ndarray]]:
    """:func:`_loss_from_factor` and the eigendecomposition of X it used."""
    e, v = eigh_sym(X)
    top = float(np.abs(e).max(initial=0.0))
    _check_psd(e, "X")
    # eigenvalues at rounding level are zero, as for G
    nz = e > X.shape[0] * EPS * top
    wv = W_all @ v  # row a, column k: <w_a, v_k>
    total = float((W_all**2).sum())
    outside = float((wv[:, ~nz] ** 2).sum())  # ||(I - X X^+) G^½||_F^2
    if total > 0 and outside > RANGE_RTOL**2 * total:
        raise ValueError(f"range(X) does not contain range(G): relative residual {np.sqrt(outside / total):.2e}")
    return float(((wv[:, nz] ** 2).sum(axis=0) / e[nz]).sum()), (e, v)


def loss_of(G: np.ndarray, X: np.ndarray) -> float:
    """tr(G X^+), after checking that X is PSD and range(X) ⊇ range(G) (ValueError otherwise).

    Eigenvalues of G and X at rounding level (<= c eps max) count as zero; the range condition is
    accepted when ||(I - X X^+) G^½||_F <= 1e-8 ||G^½||_F.

    >>> loss_of(np.diag([1.0, 4.0]), np.diag([1.0, 0.5]))
    9.0
    """
    prep = prepare(G)
    x = _symmetrised(_as_square(X, "X"), "X")
    if x.shape[0] != prep.c:
        raise ValueError(f"X is {x.shape[0]} x {x.shape[0]} but G is {prep.c} x {prep.c}")
    return prep.scale * _loss_from_factor(prep.W_all, x)
