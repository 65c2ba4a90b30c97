"""The noise HDMM adds to its strategy answers: Gaussian (zCDP) or Laplace (pure ε-DP).

:func:`laplace_noise` is the one place Laplace noise is drawn. A release (``rng=None``) uses
OpenDP's Laplace mechanism on the answers, with OpenDP's own privacy map checked against the ε it
must spend; a seeded generator (experiments, tests) draws with numpy instead.

>>> import numpy as np
>>> y = laplace_noise(np.zeros(3), scale=2.0, sensitivity=1.0, rng=np.random.default_rng(0))
>>> y.shape
(3,)
"""

from __future__ import annotations

import numpy as np

__all__ = ["gaussian_noise", "laplace_noise"]

_MAP_RTOL = 1e-9


def gaussian_noise(y: np.ndarray, sd: float, rng) -> np.ndarray:
    """y + N(0, sd^2 I)."""
    return y + sd * rng.standard_normal(y.shape)


def laplace_noise(y: np.ndarray, *, scale: float, sensitivity: float, rng: np.random.Generator | None) -> np.ndarray:
    """y + Lap(scale)^m: (sensitivity / scale)-DP for answers y of L1 sensitivity ``sensitivity``.

    ``rng=None``: OpenDP's sampler (OS entropy), for releases; otherwise ``rng.laplace``.
    """
    y = np.asarray(y, dtype=float)
    if rng is not None:
        return y + rng.laplace(0.0, scale, y.shape)
    import opendp.prelude as dp

    dp.enable_features("contrib")
    mech = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l1_distance(T=float), scale=float(scale))
    spent, allowed = float(mech.map(float(sensitivity))), sensitivity / scale
    if spent > allowed * (1 + _MAP_RTOL):
        raise RuntimeError(f"OpenDP's Laplace mechanism spends epsilon {spent}, more than the planned {allowed}")
    return np.asarray(mech(y.tolist()), dtype=float)
