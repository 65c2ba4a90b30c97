"""View mechanisms: one class per kind (one module each), with every operation the stages need
(cost, apply, variances, rank).

A mechanism over one view (its cells row-major over the view's attributes) is a Gaussian mechanism
at privacy cost <= 1, described by its privacy Gram X = B^T B (unit noise): it releases
y = B x + N(0, sigma^2 I). Four kinds keep large views implicit:

* ``kron`` (:class:`KronMechanism`): X = X_1 ⊗ ... ⊗ X_k, one small matrix per attribute (RP, WFF,
  QS on one-term Grams); B = ⊗ X_i^(1/2);
* ``dense`` (:class:`DenseMechanism`): one c x c matrix (QS on several-term Grams, ``mm``);
  B = X^(1/2);
* ``fourier`` (:class:`FourierMechanism`): X = F^H diag(w) F, F the unnormalised multi-dimensional
  DFT and w a table over frequencies (WFF on several-term Grams); B x = sqrt(c) IFFT(sqrt(w) FFT(x));
* ``lowrank`` (:class:`LowRankMechanism`): X = V diag(s) V^T with V (c x r) orthonormal columns and
  s >= 0 (QS on several-term Grams of rank r < c); B = W diag(s)^(1/2) V^T, r noisy values, with W an
  orthogonal ``rotation`` (the identity unless re-derived from a query factor).

Every kind answers the same questions, so no stage switches on the kind: the privacy cost under
each neighbouring relation (:meth:`~ViewMechanism.cost`), the operator actually applied
(:meth:`~ViewMechanism.applied`, refusing malformed arrays), B x and B^+ y
(:meth:`~ViewMechanism.sqrt_apply`, :meth:`~ViewMechanism.pinv_sqrt_apply`), q X^+ q^T for explicit
and for Kronecker query rows (:meth:`~ViewMechanism.rows_pinv_quadratic`,
:meth:`~ViewMechanism.kron_rows_pinv_quadratic`) and the rank of X (:meth:`~ViewMechanism.rank`),
none of them forming a c x c matrix for kron, fourier or lowrank mechanisms.
``ViewMechanism(kind, sizes, mats)`` builds the class of ``kind`` (the form solvers and plugins use).

>>> v = np.array([[0.6], [0.8]])  # X = 2 v v^T, rank 1 over 2 cells
>>> m = ViewMechanism("lowrank", (2,), (v, np.array([2.0])))
>>> type(m).__name__, round(m.max_diag(), 12), m.outputs, m.rank(), m.dense_x().round(12).tolist()
('LowRankMechanism', 1.28, 1, 1, [[0.72, 0.96], [0.96, 1.28]])
"""

from __future__ import annotations

import numpy as np  # noqa: F401  (the examples above)

from .base import (
    EXACT_PAIR_CELLS,
    MECHANISM_KINDS,
    RANK_RTOL,
    ViewMechanism,
    mechanism_cost,
    prime_eigh,
    shared_psd_eigh,
    shared_psd_power,
)

# importing a kind registers it; this order is the order errors list the kinds in
from .kron import KronMechanism  # isort: skip
from .dense import DenseMechanism  # isort: skip
from .lowrank import LowRankMechanism  # isort: skip
from .fourier import FourierMechanism  # isort: skip

__all__ = [
    "ViewMechanism",
    "KronMechanism",
    "DenseMechanism",
    "FourierMechanism",
    "LowRankMechanism",
    "MECHANISM_KINDS",
    "EXACT_PAIR_CELLS",
    "shared_psd_eigh",
    "shared_psd_power",
    "prime_eigh",
    "mechanism_cost",
    "RANK_RTOL",
]
