"""Noise sources: the one place that decides which sampler a measurement uses (Gaussian noise for
every method; Laplace noise for HDMM under pure epsilon-DP).

Three samplers:

* ``discrete`` (releases, the default): exact discrete Gaussian noise on a power-of-two grid fitted
  to each measurement's sensitivity, drawn in numpy batches from the operating system's
  cryptographic generator (:mod:`querysmasher.discrete_gaussian`): no floating-point leak, no seed,
  its privacy cost at most the plan's (checked exactly per measurement); 4 x 10^5 to 9 x 10^5
  values a second on one core (vectors of 10^4 to 10^6 values). Beyond its two-limb grid
  ((sigma / Delta) sqrt(n) > 2^39) it draws with OpenDP.
* ``opendp``: OpenDP's floating-point-safe Gaussian mechanism (``make_gaussian`` on a vector of
  floats, exact discrete Gaussian noise on the 2^-1074 grid); about 2.5 x 10^4 values a second.
  Laplace noise (HDMM under pure DP) always comes from OpenDP's ``make_laplace``.
* ``numpy`` (experiments): numpy's PCG64 ``standard_normal``, fast (~10^8 a second) and seedable,
  but neither cryptographic nor floating-point safe: for seeded, reproducible experiments.

>>> src = make_noise(seed=3)
>>> src.sampler, src.seeded
('numpy', True)
>>> y = src.add_gaussian(np.zeros(2), sigma2=4.0)
>>> y.shape
(2,)
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field

import numpy as np

from .discrete_gaussian import grid_gaussian
from .errors import InputError

__all__ = [
    "NoiseSource",
    "make_noise",
    "as_noise",
    "SAMPLERS",
    "MAX_NOISE_VARIANCE",
    "MAX_LAPLACE_SCALE",
    "check_noise_scales",
]

# The largest noise a sampler is asked for. Beyond it OpenDP's Gaussian cannot state its privacy
# cost (rho = 1 / (2 sigma^2) underflows: at sigma^2 = 1.79e308 its map refuses) and the noisy
# values leave floating point; no plan of a positive budget comes near it.
MAX_NOISE_VARIANCE = 1e300
MAX_LAPLACE_SCALE = 1e150

_MAP_RTOL = 1e-9  # OpenDP's privacy map may exceed the planned cost by rounding only

SAMPLERS: tuple[str, ...] = ("discrete", "opendp", "numpy")


@dataclass
class NoiseSource:
    """Adds N(0, sigma^2 I) to vectors with the chosen sampler."""

    sampler: str
    seeded: bool
    rng: np.random.Generator | None = None
    _mechanisms: dict = field(default_factory=dict, repr=False)

    def add_gaussian(
        self, clean: np.ndarray, sigma2: float, draws: int | None = None, sensitivity2: float | None = None
    ) -> np.ndarray:
        """clean + N(0, sigma2) per entry (``draws`` independent copies as a trailing axis: numpy
        only). ``sensitivity2``: the squared L2 sensitivity of ``clean`` (the measurement's cost at
        unit noise), to which the discrete sampler fits its grid (required there)."""
        sigma = math.sqrt(sigma2)
        if self.sampler == "numpy":
            shape = clean.shape if draws is None else clean.shape + (draws,)
            return (clean if draws is None else clean[..., None]) + self.rng.standard_normal(shape) * sigma
        if draws is not None:
            raise ValueError(f"the {self.sampler} sampler draws one release at a time")
        if self.sampler == "discrete":
            if sensitivity2 is None:
                raise ValueError("the discrete sampler needs the values' squared L2 sensitivity (sensitivity2)")
            grid = grid_gaussian(float(sigma2), float(sensitivity2), max(1, int(np.size(clean))))
            if grid is not None:
                return grid.add(clean)
        mech = self._mechanisms.get(sigma)
        if mech is None:
            mech = self._mechanisms[sigma] = _opendp_gaussian(sigma)
        return np.asarray(mech(np.ascontiguousarray(clean, dtype=float).ravel().tolist()), dtype=float).reshape(
            clean.shape
        )

    def add_laplace(self, clean: np.ndarray, scale: float, sensitivity: float) -> np.ndarray:
        """clean + Lap(scale) per entry: (sensitivity / scale)-DP for answers of L1 sensitivity
        ``sensitivity`` (OpenDP's map is checked against that epsilon)."""
        clean = np.asarray(clean, dtype=float)
        if self.sampler == "numpy":
            return clean + self.rng.laplace(0.0, scale, clean.shape)
        key = ("laplace", float(scale), float(sensitivity))
        mech = self._mechanisms.get(key)
        if mech is None:
            mech = self._mechanisms[key] = _opendp_laplace(float(scale), float(sensitivity))
        return np.asarray(mech(np.ascontiguousarray(clean).ravel().tolist()), dtype=float).reshape(clean.shape)

    def standard_normal(self, shape) -> np.ndarray:
        """Unit Gaussian draws (numpy only), so a NoiseSource stands in for a numpy generator in
        experiments; the exact samplers add noise to a measurement's values (add_gaussian), never
        hand out draws to be scaled in floating point."""
        if self.sampler != "numpy":
            raise ValueError(f"the {self.sampler} sampler adds noise to values (add_gaussian), it draws none alone")
        return self.rng.standard_normal(shape)


def _opendp_gaussian(sigma: float):
    """OpenDP's mechanism at noise scale sigma, after checking that OpenDP's own privacy map agrees
    with the accounting here: rho = d^2 / (2 sigma^2) at L2 sensitivity d = 1 (its rounding
    relaxation must vanish at double precision, which the budget margin absorbs)."""
    import opendp.prelude as dp  # loads opendp only where it is used

    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l2_distance(T=float)
    mech = dp.m.make_gaussian(*space, scale=sigma)
    ours = 1.0 / (2.0 * sigma * sigma)
    if not mech.map(1.0) <= ours * (1 + 1e-12):
        raise RuntimeError(
            f"OpenDP's Gaussian at scale {sigma!r} costs rho {mech.map(1.0)!r} > {ours!r} at unit sensitivity"
        )
    return mech


def _opendp_laplace(scale: float, sensitivity: float):
    """OpenDP's Laplace mechanism at ``scale``, after checking that its privacy map spends at most
    sensitivity / scale at L1 distance ``sensitivity``."""
    import opendp.prelude as dp  # loads opendp only where it is used

    dp.enable_features("contrib")
    mech = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l1_distance(T=float), scale=scale)
    spent, allowed = float(mech.map(sensitivity)), sensitivity / scale
    if spent > allowed * (1 + _MAP_RTOL):
        raise RuntimeError(f"OpenDP's Laplace mechanism spends epsilon {spent}, more than the planned {allowed}")
    return mech


def check_noise_scales(values, field: str, *, laplace: bool = False) -> None:
    """Refuse (InputError), before any record is read, a noise variance (a Laplace scale with
    ``laplace``) that is not a positive finite number at most :data:`MAX_NOISE_VARIANCE`
    (:data:`MAX_LAPLACE_SCALE`): the samplers could not draw it, or not account for it.

    >>> check_noise_scales([1.0, 4e10], "plan sigma2")
    >>> check_noise_scales([1.79e308], "plan sigma2")
    Traceback (most recent call last):
    ...
    querysmasher.errors.InputError: plan sigma2 1.79e+308: must be a positive number at most 1e+300: the noise sampler cannot draw or account for it
    """  # noqa: E501  (a doctest's expected output is one line)
    top = MAX_LAPLACE_SCALE if laplace else MAX_NOISE_VARIANCE
    for v in np.asarray(values, dtype=float).ravel():
        if not (0.0 < v <= top):
            raise InputError(
                field,
                float(v),
                f"must be a positive number at most {top:g}: the noise sampler cannot draw or account for it",
            )


def as_noise(source) -> NoiseSource:
    """A :class:`NoiseSource` as is; anything else (a numpy generator, or a test double with
    ``standard_normal`` / ``laplace``) as a seeded numpy source for experiments and tests."""
    return source if isinstance(source, NoiseSource) else NoiseSource("numpy", True, source)


def make_noise(seed: int | None = None, sampler: str | None = None) -> NoiseSource:
    """The noise source for a measurement: the exact ``discrete`` sampler with OS entropy by
    default (``opendp``: OpenDP's, on request); numpy when a seed is given (experiments) or asked
    for (``sampler="numpy"``: fast, OS-entropy seeded, not floating-point safe)."""
    if sampler is None:
        sampler = "numpy" if seed is not None else "discrete"
    if sampler not in SAMPLERS:
        raise InputError("--sampler", sampler, f"must be one of {', '.join(SAMPLERS)}")
    if seed is not None:
        if sampler != "numpy":
            raise InputError(
                "--seed", seed, f"the {sampler} sampler cannot be seeded; a seed is for numpy experiments only"
            )
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise InputError("--seed", seed, "must be an integer >= 0")
        return NoiseSource("numpy", True, np.random.default_rng(seed))
    if sampler == "numpy":
        return NoiseSource("numpy", False, np.random.default_rng(secrets.randbits(128)))
    return NoiseSource(sampler, False)
