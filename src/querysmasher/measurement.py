"""The measurement record: what a plan of any kind measures, and the noisy vectors it released.

A plan states what it will measure as a list of :class:`LinearMeasurement` -- each a linear
operator on one marginal of the records (the attributes it reads, cells row-major in schema order;
every attribute for a full-domain strategy) with the noise it adds -- in the spirit of
Private-PGM's ``LinearMeasurement(query, clique, stddev)``. Measuring (the privacy re-check on the
operators actually applied, the sampler, the finiteness checks), the measurements file and the
generic reconstruction are written once against this record (:mod:`querysmasher.measure`,
:mod:`querysmasher.reconstruct`); each plan kind (:mod:`querysmasher.plankinds`) only says what its
measurements are and how its answers are estimated from them.

The privacy cost of a measurement is ``cost / scale``: for Gaussian noise of variance ``scale``
(sigma^2) the cost is the applied operator's squared L2 sensitivity under the budget's neighbouring
relation (so the cost is a share of beta); for Laplace noise of scale ``scale`` (b) it is the L1
sensitivity (a share of epsilon). Measurements compose by addition.

>>> import numpy as np
>>> m = LinearMeasurement((0,), 3, lambda x: 2 * x, "gaussian", 8.0, 4.0, index=0)
>>> m.privacy_cost
0.5
>>> total_cost([m, m])
1.0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["LinearMeasurement", "Measurements", "StoredVectors", "NOISES", "total_cost", "noise_kind"]

NOISES = ("gaussian", "laplace")


@dataclass(frozen=True, eq=False)
class LinearMeasurement:
    """One released vector: ``apply(marginal on attrs) + noise`` of ``rows`` values.

    ``apply`` maps the marginal (cells row-major, with an optional trailing batch axis) to the
    ``rows`` clean values; ``noise`` is ``"gaussian"`` (variance ``scale``) or ``"laplace"`` (scale
    ``scale``); ``cost`` is the applied operator's cost at unit noise (module docstring); ``index``
    labels the measurement in its plan (a residual plan's view index, else its position);
    ``factors``, where the kind knows them, are the matrices ``apply`` applies, one per attribute
    of ``attrs`` (rows_i x n_i, the operator their Kronecker product), for exporters that need the
    operator itself (None: ``apply`` only)."""

    attrs: tuple[int, ...]
    rows: int
    apply: Callable[[np.ndarray], np.ndarray]
    noise: str
    scale: float
    cost: float
    index: int = 0
    factors: tuple[np.ndarray, ...] | None = None

    def release(self, marginal: np.ndarray, noise, draws: int | None = None) -> np.ndarray:
        """``apply(marginal)`` with this measurement's noise from ``noise`` (a
        :class:`querysmasher.noise.NoiseSource`): Gaussian of variance ``scale``, or Laplace of
        scale ``scale`` calibrated to the L1 sensitivity ``cost``; ``draws`` independent copies as
        a trailing axis (Gaussian, numpy sampler only)."""
        clean = self.apply(marginal)
        if self.noise == "laplace":
            if draws is not None:
                raise ValueError("Laplace measurements are drawn one release at a time")
            return noise.add_laplace(clean, self.scale, self.cost)
        return noise.add_gaussian(clean, self.scale, draws, sensitivity2=self.cost)

    @property
    def privacy_cost(self) -> float:
        """cost / scale: this measurement's share of beta (Gaussian) or epsilon (Laplace)."""
        return float(self.cost) / float(self.scale)


def total_cost(measurements: Sequence[LinearMeasurement]) -> float:
    """The privacy cost of releasing every measurement (their costs add)."""
    return float(sum(m.privacy_cost for m in measurements))


def noise_kind(measurements: Sequence[LinearMeasurement]) -> str:
    """The one noise kind of a plan's measurements (``gaussian`` when there are none); a ValueError
    when they mix kinds (their costs would not add)."""
    kinds = {m.noise for m in measurements}
    if len(kinds) > 1:
        raise ValueError(f"a plan's measurements mix noise kinds ({', '.join(sorted(kinds))})")
    return kinds.pop() if kinds else "gaussian"


class StoredVectors:
    """Read-only sequence of the per-measurement slices of one flat HDF5 dataset, read on demand,
    so a multi-gigabyte release is never loaded whole."""

    def __init__(self, path: str | Path, offsets: np.ndarray):
        import h5py  # h5py only where a release is read from its file

        self._file = h5py.File(path, "r")
        self._y = self._file["y"]
        self._offsets = offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, k: int) -> np.ndarray:
        return self._y[int(self._offsets[k]) : int(self._offsets[k + 1])]

    def __iter__(self):
        return (self[k] for k in range(len(self)))

    def close(self) -> None:
        self._file.close()


@dataclass(eq=False)
class Measurements:
    """The noisy vectors of a release, one per measurement of its plan, in the plan's order:
    ``index`` (each measurement's :attr:`LinearMeasurement.index`), ``y`` (the vectors, with a
    trailing draws axis for Monte Carlo), ``seeded`` (noise from a fixed seed: experiments only),
    ``plan_sha256`` (the plan file they were made with), ``sampler`` (which sampler drew them)."""

    index: np.ndarray
    y: list[np.ndarray] | StoredVectors
    seeded: bool
    plan_sha256: str = ""
    sampler: str = ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.index)} measurements{', seeded' if self.seeded else ''})"

    def close(self) -> None:
        """Close the file a loaded release reads from (nothing for measurements in memory)."""
        if isinstance(self.y, StoredVectors):
            self.y.close()

    def __enter__(self) -> Measurements:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
