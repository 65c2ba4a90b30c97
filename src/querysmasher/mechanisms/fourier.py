"""The ``fourier`` mechanism kind: X = F^H diag(w) F, F the unnormalised multi-dimensional DFT and w
a table over frequencies (WFF on several-term Grams), measured as B x = sqrt(c) IFFT(sqrt(w) FFT(x))."""

from __future__ import annotations

import math

import numpy as np

from ..linalg import kron_apply
from .base import ViewMechanism, count_positive, refuse

__all__ = ["FourierMechanism"]


class FourierMechanism(ViewMechanism):
    """X = F^H diag(w) F, F the unnormalised multi-dimensional DFT."""

    KIND = "fourier"

    @classmethod
    def stored_arrays(cls, g, sizes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
        from .. import h5read as r  # loads h5py only where it is used

        return (r.array(g, "m0", kind="f", shape=tuple(sizes), lo=0.0),)

    def max_diag(self) -> float:
        return float(self.mats[0].sum())  # |F[f, x]| = 1: every diagonal entry is sum(w)

    def replace_cost(self) -> float:
        if self.cells < 2:
            return 0.0
        # Re X[x, y] = Re c(x - y) with c = fftn(w) (|F| = 1), so the cost is 2 (c(0) - min Re c(d ≠ 0)).
        c = np.real(np.fft.fftn(self.mats[0])).ravel()
        return float(2.0 * (c[0] - c[1:].min()))

    def _applied(self) -> ViewMechanism:
        w = self.mats[0]
        if tuple(w.shape) != tuple(self.sizes) or np.any(w < 0):
            raise refuse("fourier", f"weights must be non-negative over shape {self.sizes}")
        return self  # the applied operator is X, or its real part, which costs no more

    def _root_apply(self, x: np.ndarray, inverse: bool) -> np.ndarray:
        # X = F^H diag(w) F with F the unnormalised DFT: X^(1/2) x = sqrt(c) IFFT(sqrt(w) FFT(x)).
        w = self.mats[0]
        sqrt_w = np.sqrt(w)
        scale = np.where(w > 0, 1.0 / np.where(w > 0, sqrt_w, 1.0), 0.0) if inverse else sqrt_w
        c = self.cells
        batch = x.shape[1:]
        t = x.reshape(self.sizes + batch)
        axes = tuple(range(len(self.sizes)))
        out = np.real(
            np.fft.ifftn(scale.reshape(self.sizes + (1,) * len(batch)) * np.fft.fftn(t, axes=axes), axes=axes)
        )
        return (out / math.sqrt(c) if inverse else out * math.sqrt(c)).reshape((c,) + batch)

    def sqrt_apply(self, x: np.ndarray) -> np.ndarray:
        return self._root_apply(x, inverse=False)

    def pinv_sqrt_apply(self, y: np.ndarray) -> np.ndarray:
        return self._root_apply(y, inverse=True)

    @property
    def variance_weights(self) -> np.ndarray:
        """a^2 with |Re(X^(+1/2)) q|^2 = sum_f a^2(f) |F q|^2(f) / c^2: reconstruct applies the real
        part of the root, F^H diag(a) F / c with a = (r(f) + r(-f)) / 2 and r = (w^+)^(1/2) (a = r
        when w is symmetric under f -> -f, as WFF's weights are)."""
        w = self.mats[0]
        r = np.where(w > 0, 1.0 / np.sqrt(np.where(w > 0, w, 1.0)), 0.0)
        mirrored = r
        for axis, n in enumerate(r.shape):
            mirrored = np.take(mirrored, (-np.arange(n)) % n, axis=axis)
        return ((r + mirrored) / 2) ** 2

    def rows_pinv_quadratic(self, s: np.ndarray) -> np.ndarray:
        # one FFT per query, not the root's FFT and inverse
        f = np.fft.fftn(s.reshape((s.shape[0],) + tuple(self.sizes)), axes=tuple(range(1, len(self.sizes) + 1)))
        return (f.real**2 + f.imag**2).reshape(s.shape[0], -1) @ self.variance_weights.ravel() / self.cells**2

    def kron_rows_pinv_quadratic(self, kept_q: list[np.ndarray]) -> np.ndarray:
        # the Kronecker row's |F q|^2 is prod_j |F_j q_j|^2(f_j): a mode product of the variance
        # weights by the |FFT|^2 of each attribute
        shape = [q.shape[0] for q in kept_q]
        power = [np.abs(np.fft.fft(qc, axis=1)) ** 2 for qc in kept_q]
        return kron_apply(power, self.variance_weights.reshape(-1), self.sizes).reshape(shape) / self.cells**2

    def pinv_factor(self) -> np.ndarray:
        raise ValueError("pinv_factor is for dense, kron and lowrank mechanisms, not fourier")

    def rank(self) -> int:
        return count_positive(self.mats[0])

    def dense_x(self) -> np.ndarray:
        f = _dft_matrix(self.sizes)
        return np.real(f.conj().T @ (self.mats[0].ravel()[:, None] * f))


def _dft_matrix(sizes: tuple[int, ...]) -> np.ndarray:
    out = np.ones((1, 1), dtype=complex)
    for n in sizes:
        out = np.kron(out, np.fft.fft(np.eye(n)))
    return out
