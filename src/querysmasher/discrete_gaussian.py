"""Exact discrete Gaussian noise for float vectors, drawn in numpy batches from the OS's entropy.

:func:`grid_gaussian` fixes, for noise of scale sigma on a vector of ``n`` values of L2
sensitivity ``Delta``, a grid 2^k fine enough that rounding the values to it raises the
sensitivity by at most 2^k sqrt(n) <= 2^-55 Delta, and a scale tau a few ulps above sigma 2^-k in
grid units; :meth:`GridGaussian.add` returns 2^k (round(x 2^-k) + Z) correctly rounded to float, with Z
exactly N_Z(0, tau^2), the discrete Gaussian (Canonne, Kamath and Steinke 2020). Z shifted by an
integer vector mu has Renyi divergence alpha |mu|^2 / (2 tau^2), so the release is
(Delta + 2^k sqrt n)^2 / (2 tau^2 4^k) <= Delta^2 / (2 sigma^2)-zCDP: never more than the plan's
rho, checked in exact rational arithmetic for every mechanism built. The output is a function of
the exact integer round(x 2^-k) + Z only (its correct rounding), so it leaks nothing of x's
floating-point representation. Its variance is that of N_Z(0, tau^2) 4^k: within a few ulps of sigma^2.

The sampler is CKS's rejection from a discrete Laplace of scale 2^e >= tau, with every
Bernoulli(exp(-gamma)) drawn by their Algorithm 1, whose only random steps are comparisons of a
uniform u with a rational q. Each comparison is decided from 64 random bits and a floating-point
bound on q; the rare comparison those cannot decide (|u - q| within about 2^-40 q) is decided
exactly, with more random bits and q in Python's integers. |Z| < 2^104 is held in two 52-bit
limbs, so the grid needs tau <= 2^94: (sigma / Delta) sqrt(n) <= 2^39 or so; :func:`grid_gaussian`
returns None beyond (the caller then uses OpenDP's sampler).

>>> g = grid_gaussian(sigma2=9.0, sensitivity2=1.0, n=1000)
>>> g.k, g.e
(-60, 62)
>>> y = g.add(np.zeros(4))
>>> y.shape, bool(np.all(np.isfinite(y)))
((4,), True)
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = ["GridGaussian", "grid_gaussian", "discrete_gaussian", "round_sum3", "GRID_SLACK_BITS", "MAX_E"]

GRID_SLACK_BITS = 55  # rounding to the grid raises the sensitivity by at most 2^-55 of it
MAX_E = 94  # the discrete Laplace's scale 2^e: |Z| = hi 2^52 + lo with hi < 2^52 while V < 2^10
_LIMB = 52
_V_LIMIT = 1 << 10  # a geometric count this large (probability e^-1024) takes the exact scalar path
# A comparison u < q is decided in floating point when |u - q| exceeds SLACK (|q| + err): far above
# the rounding of the few operations that compute q (2^-50), far below 1 (undecided: ~2^-39).
SLACK = 2.0**-40


def _uniform64(n: int) -> np.ndarray:
    """n uniform 64-bit integers from the operating system's cryptographic generator."""
    return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)


def _exact_below(m: int, q: Fraction) -> bool:
    """u < q for u uniform in [m, m + 1) / 2^64, drawing u's further bits until decided."""
    num, bits = m, 64
    while True:
        if (num + 1) * q.denominator <= q.numerator << bits:
            return True
        if num * q.denominator >= q.numerator << bits:
            return False
        num = (num << 64) | int.from_bytes(os.urandom(8), "little")
        bits += 64


def _below(q: np.ndarray, err: np.ndarray, exact_q) -> np.ndarray:
    """A fresh uniform u in [0, 1) per entry: u < q_true, for q_true within ``err`` of ``q``;
    ``exact_q(i)``: entry i's q as a Fraction (asked only where floating point cannot decide)."""
    m = _uniform64(q.size)
    u = m.astype(np.float64) * 2.0**-64  # within 2^-53 of m 2^-64
    u_low = u * (1 - SLACK)
    u_high = u * (1 + SLACK) + 2.0**-63  # above (m + 1) 2^-64
    pad = (np.abs(q) + err) * SLACK
    q_low, q_high = q - err - pad, q + err + pad
    out = u_high < q_low
    undecided = np.flatnonzero(~out & (u_low < q_high))
    for i in undecided:
        out[i] = _exact_below(int(m[i]), exact_q(int(i)))
    return out


def _bernoulli_exp(gamma: np.ndarray, err: np.ndarray, exact_gamma) -> np.ndarray:
    """Bernoulli(exp(-gamma_true)) per entry, gamma_true in [0, 1] within ``err`` of ``gamma``
    (CKS Algorithm 1: K <- 1; while Bernoulli(gamma / K): K <- K + 1; return K odd)."""
    out = np.empty(gamma.size, dtype=bool)
    active = np.arange(gamma.size)
    k = 1
    while active.size:
        q = gamma[active] / k
        e = err[active] / k + q * 2.0**-52
        go = _below(q, e, lambda j, a=active, k=k: exact_gamma(int(a[j])) / k)
        out[active[~go]] = k % 2 == 1
        active = active[go]
        k += 1
    return out


def _bernoulli_exp_one(n: int) -> np.ndarray:
    """n draws of Bernoulli(exp(-1))."""
    ones = np.ones(n)
    return _bernoulli_exp(ones, ones * 0.0, lambda i: Fraction(1))


@dataclass
class _Draw:
    """Discrete Gaussian draws: sign * (hi 2^52 + lo), or ``exact`` (Python ints) where set."""

    sign: np.ndarray
    hi: np.ndarray
    lo: np.ndarray
    exact: dict


def _laplace_magnitudes(e: int, n: int):
    """Candidates X = U + 2^e V of a discrete Laplace of scale 2^e (CKS Algorithm 2) for n slots,
    as (slot index, hi, lo, V), before the sign; U's exponential acceptance applied."""
    raw = _uniform64(n)
    if e > _LIMB:
        u_hi = (raw >> np.uint64(64 - (e - _LIMB))).astype(np.int64)
        u_lo = (_uniform64(n) >> np.uint64(64 - _LIMB)).astype(np.int64)
    else:
        u_hi = np.zeros(n, dtype=np.int64)
        u_lo = (raw >> np.uint64(64 - e)).astype(np.int64) if e > 0 else np.zeros(n, dtype=np.int64)
    gamma = np.ldexp(np.ldexp(u_hi.astype(np.float64), _LIMB) + u_lo.astype(np.float64), -e)

    def exact(i):
        return Fraction((int(u_hi[i]) << _LIMB) + int(u_lo[i]), 1 << e)

    keep = np.flatnonzero(_bernoulli_exp(gamma, gamma * 2.0**-52, exact))
    u_hi, u_lo = u_hi[keep], u_lo[keep]
    v = np.zeros(keep.size, dtype=np.int64)
    active = np.arange(keep.size)
    while active.size:
        go = _bernoulli_exp_one(active.size)
        v[active[go]] += 1
        active = active[go]
    return keep, u_hi, u_lo, v


def discrete_gaussian(tau: float, e: int, n: int) -> _Draw:
    """n independent draws of N_Z(0, tau^2), by rejection from the discrete Laplace of scale 2^e
    (CKS Algorithm 3; any 2^e > 0 is exact, 2^e >= tau keeps the rejection rate below about 3/4)."""
    if not (0 <= e <= MAX_E) or not (0.0 < tau < 2.0**MAX_E):
        raise ValueError(f"discrete_gaussian needs 0 <= e <= {MAX_E} and 0 < tau < 2^{MAX_E}")
    tau_q = Fraction(tau)
    centre = tau_q * tau_q / (1 << e)  # |Y| - tau^2 / 2^e in the acceptance exponent
    centre_f = tau * tau * 2.0**-e
    two_tau2 = 2.0 * tau * tau
    sign = np.zeros(n, dtype=np.int8)
    hi = np.zeros(n, dtype=np.int64)
    lo = np.zeros(n, dtype=np.int64)
    exact: dict = {}
    pending = np.arange(n)
    while pending.size:
        keep, u_hi, u_lo, v = _laplace_magnitudes(e, pending.size)
        slots = pending[keep]
        negative = (_uniform64(slots.size) >> np.uint64(63)).astype(bool)
        # the sign's Bernoulli(1/2) rejects -0 (so that 0 is not drawn twice as often)
        ok = ~(negative & (u_hi == 0) & (u_lo == 0) & (v == 0))
        slots, u_hi, u_lo, v, negative = slots[ok], u_hi[ok], u_lo[ok], v[ok], negative[ok]
        big = v >= _V_LIMIT
        magnitude_exact = {
            int(i): (int(v[i]) << e) + (int(u_hi[i]) << _LIMB) + int(u_lo[i]) for i in np.flatnonzero(big)
        }
        vv = np.where(big, 0, v)
        if e >= _LIMB:
            m_hi = u_hi + (vv << (e - _LIMB))
            m_lo = u_lo
        else:
            total = u_lo + (vv << e)
            m_hi, m_lo = total >> _LIMB, total & ((1 << _LIMB) - 1)
        y = np.ldexp(m_hi.astype(np.float64), _LIMB) + m_lo.astype(np.float64)  # within 2^-53 of |Y|
        for i, mag in magnitude_exact.items():
            y[i] = float(mag)
        a = y - centre_f
        err_a = (y + centre_f) * 2.0**-51
        gamma = a * a / two_tau2
        err = (err_a * (2 * np.abs(a) + err_a) / two_tau2) * (1 + SLACK) + gamma * 2.0**-50
        reps = np.floor(gamma + 2 * err + gamma * 2.0**-50).astype(np.int64) + 1  # > gamma_true

        def exact_gamma(i):
            mag = magnitude_exact.get(i)
            if mag is None:
                mag = (int(m_hi[i]) << _LIMB) + int(m_lo[i])
            return (mag - centre) ** 2 / (2 * tau_q * tau_q)

        owner = np.repeat(np.arange(slots.size), reps)
        r = reps[owner]
        trials = _bernoulli_exp(
            gamma[owner] / r,
            err[owner] / r + gamma[owner] / r * 2.0**-52,
            lambda j: exact_gamma(int(owner[j])) / int(r[j]),
        )
        accept = np.logical_and.reduceat(trials, np.concatenate(([0], np.cumsum(reps)[:-1]))) if slots.size else trials
        idx = np.flatnonzero(accept)
        done = slots[idx]
        sign[done] = np.where(negative[idx], -1, 1)
        hi[done], lo[done] = m_hi[idx], m_lo[idx]
        for i, mag in magnitude_exact.items():
            if accept[i]:
                exact[int(slots[i])] = (-1 if negative[i] else 1) * mag
        pending = np.setdiff1d(pending, done, assume_unique=True)
    return _Draw(sign, hi, lo, exact)


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def round_sum3(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a + b + c correctly rounded to float (round to nearest, ties to even), for float arrays
    whose sum stays in the normal range (Boldo and Melquiond 2008: two error-free sums, the low
    parts added with rounding to odd, then one rounding to nearest)."""
    uh, ul = _two_sum(b, c)
    th, tl = _two_sum(a, uh)
    s, err = _two_sum(tl, ul)
    odd = (s.view(np.int64) & 1).astype(bool)
    v = np.where((err == 0) | odd, s, np.nextafter(s, np.copysign(np.inf, err)))
    return th + v


@dataclass(frozen=True)
class GridGaussian:
    """The discrete Gaussian mechanism on the grid 2^k at scale ``tau`` grid units (Laplace
    proposal scale 2^e), for vectors of ``n`` values."""

    k: int
    tau: float
    e: int
    n: int

    def add(self, x: np.ndarray) -> np.ndarray:
        """2^k (round(x 2^-k) + Z) correctly rounded to float, Z ~ N_Z(0, tau^2) per entry."""
        x = np.ascontiguousarray(x, dtype=np.float64)
        flat = x.ravel()
        if not np.all(np.isfinite(flat)):
            raise ValueError("the values to add noise to must be finite")
        if flat.size > self.n:
            raise ValueError(f"this mechanism was built for at most {self.n} values, not {flat.size}")
        base = np.rint(np.ldexp(flat, -self.k))  # exact: an integer-valued float
        draw = discrete_gaussian(self.tau, self.e, flat.size)
        s = draw.sign.astype(np.float64)
        out = round_sum3(base, s * np.ldexp(draw.hi.astype(np.float64), _LIMB), s * draw.lo.astype(np.float64))
        for i, z in draw.exact.items():
            out[i] = float(Fraction(int(base[i])) + z)
        return np.ldexp(out, self.k).reshape(x.shape)


def _ceil_sqrt(n: int) -> int:
    r = math.isqrt(n)
    return r if r * r == n else r + 1


def spends_at_most(k: int, tau: float, sigma2: float, sensitivity2: float, n: int) -> bool:
    """Exactly (rational arithmetic): (Delta + 2^k sqrt n)^2 / (tau 2^k)^2 <= Delta^2 / sigma2 for
    Delta^2 = ``sensitivity2``. With G = (tau 2^k)^2 / sigma2 it reads 2^k sqrt n <= (sqrt G - 1)
    Delta, implied by (2^k ceil(sqrt n))^2 <= (2 (G - 1) / (G + 3))^2 Delta^2 (sqrt G <= (G + 1) / 2)."""
    step = Fraction(2) ** k
    g = (Fraction(tau) * step) ** 2 / Fraction(sigma2)
    low = 2 * (g - 1) / (g + 3)  # at most sqrt(G) - 1
    return g > 1 and (step * _ceil_sqrt(n)) ** 2 <= low * low * Fraction(sensitivity2)


def grid_gaussian(sigma2: float, sensitivity2: float, n: int) -> GridGaussian | None:
    """The grid mechanism adding noise of variance ``sigma2`` to ``n`` values of squared L2
    sensitivity ``sensitivity2`` at no more privacy cost than N(0, sigma2) at that sensitivity,
    or None where its grid would need more than two limbs (then use OpenDP's sampler). Values of
    sensitivity 0 do not depend on the records: their grid is fitted to sensitivity sigma2.
    """
    if not (0 < sigma2 < math.inf and 0 <= sensitivity2 < math.inf and n >= 1):
        raise ValueError(
            f"grid_gaussian needs sigma2 > 0, sensitivity2 >= 0, n >= 1, not {sigma2}, {sensitivity2}, {n}"
        )
    if sensitivity2 == 0:
        sensitivity2 = sigma2
    k = math.floor(math.log2(math.sqrt(sensitivity2) / _ceil_sqrt(n))) - GRID_SLACK_BITS
    tau = math.ldexp(math.sqrt(sigma2), -k)
    for _ in range(8):  # two or three ulps above sqrt(sigma2) 2^-k: the exact check decides
        tau = float(np.nextafter(tau, math.inf))
        if spends_at_most(k, tau, sigma2, sensitivity2, n):
            break
    else:
        raise AssertionError("no scale of a few ulps spends within the plan")  # the slack bits rule it out
    e = max(0, math.ceil(math.log2(tau)))
    while math.ldexp(1.0, e) < tau:
        e += 1
    if e > MAX_E:
        return None
    return GridGaussian(k, tau, e, n)
