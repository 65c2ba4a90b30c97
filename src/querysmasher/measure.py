"""Measure: the only step that reads records, for a plan of any kind.

A plan's kind (:mod:`querysmasher.plankinds`) states what it measures as a list of
:class:`~querysmasher.measurement.LinearMeasurement`; everything here is written once against that
list. Before any record is read the plan is checked (:func:`check_plan`): every noise scale one the
sampler can draw, one noise kind, the sum of the measurements' costs -- recomputed from the operators
actually applied -- at most the budget (beta for Gaussian noise, epsilon for Laplace; no tolerance),
then the kind's own check (its answers estimable). Each measurement reads one marginal of the
records (counted from the records directly, never the full domain vector unless the measurement
reads every attribute), applies its operator and adds its noise (:meth:`NoiseSource.add_gaussian
<querysmasher.noise.NoiseSource.add_gaussian>` at variance sigma^2, or ``add_laplace``); every
vector must be finite.

Noise comes from :mod:`querysmasher.noise`: OpenDP's floating-point-safe sampler (OS entropy) for
releases, numpy's fast generator for seeded experiments (a seeded release is marked as such). The
measurements file holds the noisy vectors, where each starts, the plan's digest, the sampler and
the budget: nothing else derived from the data.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from . import data
from . import h5read as r
from .errors import InputError, require_finite
from .io import atomic_h5, open_h5, put, put_json
from .logs import progress
from .measurement import LinearMeasurement, Measurements, StoredVectors, noise_kind, total_cost
from .noise import SAMPLERS, as_noise, check_noise_scales
from .plankinds import kind_of
from .threads import at_most

if TYPE_CHECKING:
    from .data import Records
    from .noise import NoiseSource

log = logging.getLogger(__name__)

__all__ = [
    "Measurements",
    "measurements_of",
    "check_budget",
    "check_plan",
    "measure",
    "measure_iter",
    "save_measurements",
    "load_measurements",
    "measure_plan_to_file",
    "plan_digest",
    "make_rng",
]


def measurements_of(plan) -> list[LinearMeasurement]:
    """What measuring ``plan`` applies, in order (its kind's ``measurements``)."""
    return kind_of(plan).op("measurements")(plan)


def check_budget(plan, measurements: list[LinearMeasurement] | None = None) -> float:
    """The privacy cost of ``plan`` recomputed from the operators measure applies (its
    ``measurements``); an InputError for a noise scale the sampler cannot draw, for mixed noise
    kinds, or above the plan's budget (no tolerance). Called before any record is read."""
    ms = measurements_of(plan) if measurements is None else measurements
    try:
        noise = noise_kind(ms)
    except ValueError as exc:
        raise InputError("plan", getattr(plan, "method", type(plan).__name__), str(exc)) from None
    laplace = noise == "laplace"
    check_noise_scales([m.scale for m in ms], "plan Laplace scale" if laplace else "plan sigma2", laplace=laplace)
    cost = total_cost(ms)
    budget = plan.budget
    limit, what = (budget.epsilon, "epsilon") if laplace else (budget.beta, f"beta ({budget.neighbours})")
    if not cost <= limit:
        raise InputError(
            "plan privacy cost",
            cost,
            f"exceeds its budget {what} {limit!r}: the plan file is stale or edited; refusing to measure",
        )
    return cost


def check_plan(plan) -> float:
    """Everything that must hold before any record is read: the privacy re-check
    (:func:`check_budget`) and the kind's own check (its answers estimable). Returns the cost."""
    cost = check_budget(plan)
    kind_of(plan).op("check")(plan)
    return cost


def make_rng(seed: int | None) -> tuple[np.random.Generator, bool]:
    """(numpy generator, seeded): OS entropy by default; a fixed seed only when asked for.
    Releases use :func:`querysmasher.noise.make_noise` (OpenDP's sampler) instead."""
    if seed is not None and (not isinstance(seed, (int, np.integer)) or seed < 0):
        raise InputError("seed", seed, "must be an integer >= 0")
    if seed is None:
        return np.random.default_rng(secrets.randbits(128)), False
    return np.random.default_rng(seed), True


def plan_digest(path: str | Path) -> str:
    """SHA-256 of a plan file, recorded in measurements so they are never used with another plan."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_schema(plan, records: Records) -> None:
    if records.schema.names != plan.schema.names or records.schema.sizes != plan.schema.sizes:
        raise InputError(
            "data schema",
            records.schema.name,
            f"does not match the plan's schema {plan.schema.name!r} (names and sizes must agree)",
        )


def measure_iter(
    plan,
    records: Records,
    rng: np.random.Generator | NoiseSource,
    *,
    draws: int | None = None,
    measurements: list[LinearMeasurement] | None = None,
):
    """Yield (measurement index, y) for every measurement of the plan, one at a time (bounded
    memory), the privacy cost re-checked first on exactly the measurements applied.

    ``rng`` is a :class:`querysmasher.noise.NoiseSource` (which sampler: :func:`make_noise`) or a
    numpy generator (experiments); ``draws`` independent copies as a trailing axis (numpy only, for
    tests); ``measurements``: the plan's list when the caller already has it (it is checked and
    applied as given). BLAS runs single-threaded while noise is drawn (many small products).
    """
    noise = as_noise(rng)
    ms = measurements_of(plan) if measurements is None else measurements
    check_budget(plan, ms)
    _check_schema(plan, records)
    sizes = plan.schema.sizes
    attrs, x = None, None
    with at_most(1):
        for m in progress(ms, desc="measure", total=len(ms)):
            if m.attrs != attrs:  # consecutive measurements of one marginal count it once
                attrs, x = m.attrs, data.marginal(records, m.attrs, sizes)
            yield m.index, m.release(x, noise, draws)
    log.info("measured %d vectors", len(ms))


def measure(
    plan, records: Records, rng: np.random.Generator | NoiseSource, *, seeded: bool = False, draws: int | None = None
) -> Measurements:
    """Every measurement of the plan once (or ``draws`` times with independent noise, for tests)."""
    noise = as_noise(rng)
    pairs = list(measure_iter(plan, records, noise, draws=draws))
    return Measurements(
        np.array([i for i, _ in pairs], dtype=np.int64), [y for _, y in pairs], seeded, sampler=noise.sampler
    )


def _offsets(ms: list[LinearMeasurement]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([m.rows for m in ms])]).astype(np.int64)


def save_measurements(
    path: str | Path,
    plan,
    stream,
    *,
    seeded: bool,
    plan_sha256: str,
    sampler: str,
    measurements: list[LinearMeasurement] | None = None,
) -> None:
    """Write the measurements file from (measurement index, y) pairs (e.g. :func:`measure_iter`),
    streaming: the noisy vectors (one flat ``y``), which measurement each is (``index``) and where
    it starts (``offsets``), the plan's digest, the sampler and the budget; nothing else derived
    from the data."""
    if sampler not in SAMPLERS:  # every measurements file says which sampler drew its noise
        raise ValueError(f"sampler must be one of {SAMPLERS}, not {sampler!r}")
    ms = measurements_of(plan) if measurements is None else measurements
    offsets = _offsets(ms)
    with atomic_h5(path, kind="measurements") as f:
        f.attrs["plan_sha256"] = plan_sha256
        f.attrs["seeded"] = bool(seeded)
        f.attrs["sampler"] = sampler
        f.attrs["method"] = plan.method
        put_json(f, "budget", plan.budget.to_dict())
        put(f, "index", np.array([m.index for m in ms], dtype=np.int64))
        put(f, "offsets", offsets)
        ds = f.create_dataset("y", shape=(int(offsets[-1]),), dtype="f8", track_times=False)
        count = 0
        for pos, (i, y) in enumerate(stream):
            if pos >= len(ms) or i != ms[pos].index or np.shape(y) != (ms[pos].rows,):
                raise ValueError("measurement stream does not follow the plan's measurements")
            require_finite(y, "measurement", f"vector {pos}")
            ds[offsets[pos] : offsets[pos + 1]] = y
            count += 1
        if count != len(ms):
            raise ValueError("measurement stream does not follow the plan's measurements")


def load_measurements(path: str | Path, plan_sha256: str | None = None, plan=None) -> Measurements:
    """Open a measurements file, every field checked (an InputError naming the field otherwise);
    with ``plan``, also that it holds one finite float vector of the right length for each of the
    plan's measurements, and nothing else. The vectors are read on demand."""
    with open_h5(path, "measurements") as f, r.h5py_errors(path, "measurements file"):
        digest = r.text(f, "plan_sha256")
        if plan_sha256 is not None and digest != plan_sha256:
            raise InputError("measurements file", str(path), "was made with a different plan (plan_sha256 differs)")
        seeded = r.flag(f, "seeded")
        sampler = r.text(f, "sampler", choices=SAMPLERS, default="")
        index = r.array(f, "index", kind="i", ndim=1, lo=0)
        offs = r.array(f, "offsets", kind="i", ndim=1)
        y = r.child(f, "y", group=False)
        length = y.shape[0] if y.shape is not None and len(y.shape) == 1 else -1
        if length < 0:
            raise r.bad(f, "y", f"shape {y.shape}", "must be a 1-D array")
        if len(offs) != len(index) + 1 or offs[0] != 0 or offs[-1] != length or np.any(np.diff(offs) < 0):
            raise r.bad(
                f,
                "offsets",
                offs[:8].tolist(),
                f"must hold one vector per measurement: offsets rising from 0 to the length of y ({length}), "
                f"one more than index ({len(index)})",
            )
        if plan is not None:
            ms = measurements_of(plan)
            want, labels = _offsets(ms), np.array([m.index for m in ms], dtype=np.int64)
            if not (np.array_equal(index, labels) and np.array_equal(offs, want)):
                raise InputError(
                    "measurements file",
                    str(path),
                    "does not hold one vector per measurement of the plan (index/offsets/y disagree)",
                )
            r.finite_vector(f, "y", int(want[-1]))
    return Measurements(index, StoredVectors(path, offs), seeded, digest, sampler)


def measure_plan_to_file(plan, records: Records, noise: NoiseSource, out, *, plan_sha256: str) -> None:
    """The measurements file of a plan of any kind (checked by the caller before the records were
    read, :func:`check_plan`; measuring re-checks its privacy cost on what it applies)."""
    ms = measurements_of(plan)  # once: the stream and the file's layout follow the same list
    save_measurements(
        out,
        plan,
        measure_iter(plan, records, noise, measurements=ms),
        seeded=noise.seeded,
        plan_sha256=plan_sha256,
        sampler=noise.sampler,
        measurements=ms,
    )
