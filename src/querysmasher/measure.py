"""Measure: the only step that reads records.

For every measured residual view A' (privacy Gram X at cost 1, noise scale sigma^2 from the
allocation) the release is

    y_A' = X^(1/2) x_A' + N(0, sigma^2 I),

whose privacy Gram is X / sigma^2, so the plan's allocation bounds the total privacy cost by beta.
X^(1/2) is applied implicitly (:meth:`querysmasher.mechanisms.ViewMechanism.sqrt_apply`: factor by
factor for Kronecker mechanisms, by FFT for Fourier ones, by one symmetric square root for dense
ones); x_A' is the view's marginal counted from the records, never the full domain vector. A low-rank mechanism X = V diag(s) V^T releases
y_A' = W diag(s)^(1/2) V^T x_A' + N(0, sigma^2 I): r values, with the same privacy Gram X / sigma^2
(W: the mechanism's orthogonal ``rotation``, the identity unless it was re-derived from its query
factor, :mod:`querysmasher.queryfactor`).

Noise comes from :mod:`querysmasher.noise`: OpenDP's floating-point-safe sampler (OS entropy) for
releases, numpy's fast generator for seeded experiments (a seeded release is marked as such). The measurement file holds the noisy
vectors and what is needed to use them with the plan — nothing else derived from the data.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .errors import InputError, require_finite
from .noise import SAMPLERS
from .threads import at_most
from .logs import progress
from .plan import Plan

if TYPE_CHECKING:  # .data imports pandas (half a second), and reconstruct never reads records
    from .data import Records
    from .noise import NoiseSource

log = logging.getLogger(__name__)

__all__ = ["Measurements", "measure", "measure_iter", "measured_views", "save_measurements", "load_measurements", "plan_digest", "make_rng",
           "check_budget", "check_plan", "measure_residual_to_file", "measure_plan_to_file", "check_estimable", "check_residual_plan"]


def check_budget(plan: Plan) -> float:
    """Recompute the plan's privacy cost from the operators measure applies; refuse it (InputError)
    when it exceeds the plan's budget or asks the sampler for a noise it cannot draw. Called before
    any record is read."""
    from .accounting import check_plan_budget
    from .noise import check_noise_scales

    cost = check_plan_budget(plan, lambda mech: mech.applied())
    check_noise_scales(plan.allocation.sigma2[measured_views(plan)], "plan sigma2")
    return cost


ESTIMABLE_RTOL = 1e-6  # the part of G r outside the range of X, relative to G r


def check_estimable(plan: Plan) -> None:
    """Refuse (InputError), before any record is read, a residual plan whose measurements do not
    determine every workload query: a residual view whose subworkload Gram G is not zero must be
    measured, and G must lie in the range of its mechanism X, which :mod:`querysmasher.reconstruct`
    relies on (it applies X^+; outside the range the answers would be biased and their variances
    wrong). Tested on one random vector in the range of G per view: g = G r is compared with
    P g = X^(+1/2) X^(1/2) g, the projection through the operators measure and reconstruct apply (a
    part of G outside the range shows in g with probability one). The workload is decomposed again,
    as the planner did (seconds at the paper's largest scale); full-domain plans are left to their
    planner's own check."""
    from .decompose import decompose
    from .fulldomain import is_full_domain_plan

    if is_full_domain_plan(plan):
        return
    dec = decompose(plan.workload)
    index = {attrs: i for i, attrs in enumerate(plan.views)}
    rng = np.random.default_rng(0)  # a probe of the plan, not of the data
    names = plan.schema.names
    for attrs, gram in dec.grams.items():
        if not gram.trace > 0:
            continue
        view = "(" + ",".join(names[a] for a in attrs) + ")"
        i = index.get(attrs)
        if i is None or not np.isfinite(plan.allocation.sigma2[i]):
            raise InputError("plan", plan.method, f"residual view {view} of the workload is not measured: measuring the plan would spend the budget on "
                             "answers that cannot be given")
        mech = plan.solutions[plan.keys[i]].mechanism
        g = gram.apply(dec.store, rng.standard_normal(gram.cells))
        outside = np.linalg.norm(g - mech.pinv_sqrt_apply(mech.sqrt_apply(g)))
        if not outside <= ESTIMABLE_RTOL * np.linalg.norm(g):
            raise InputError("plan", plan.method, f"the mechanism of residual view {view} does not reach the workload's queries on it: measuring "
                             "the plan would spend the budget on answers that cannot be given")


def check_residual_plan(plan: Plan) -> float:
    """The residual kind's check before any record is read: the privacy cost (:func:`check_budget`)
    and estimability (:func:`check_estimable`). Returns the cost."""
    cost = check_budget(plan)
    check_estimable(plan)
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


class _Segments:
    """Read-only sequence of the per-view slices of one flat HDF5 dataset, read on demand, so a
    multi-gigabyte release is never loaded whole."""

    def __init__(self, path: str | Path, offsets: np.ndarray):
        import h5py

        self._file = h5py.File(path, "r")
        self._y = self._file["y"]
        self._offsets = offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, k: int) -> np.ndarray:
        return self._y[int(self._offsets[k]):int(self._offsets[k + 1])]

    def __iter__(self):
        return (self[k] for k in range(len(self)))

    def close(self) -> None:
        self._file.close()


@dataclass(eq=False)
class Measurements:
    """Noisy measurements of every measured residual view (index into plan.views)."""

    view_index: np.ndarray  # which plan views were measured
    y: list[np.ndarray] | _Segments  # per measured view: cells (x draws, for Monte Carlo)
    seeded: bool
    plan_sha256: str = ""
    sampler: str = ""  # the sampler that drew the noise (querysmasher.noise.SAMPLERS), saved with the vectors

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.view_index)} measured views{', seeded' if self.seeded else ''})"

    def close(self) -> None:
        """Close the file a loaded release reads from (nothing for measurements in memory)."""
        if isinstance(self.y, _Segments):
            self.y.close()

    def __enter__(self) -> Measurements:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _check_schema(plan: Plan, records: Records) -> None:
    if records.schema.names != plan.schema.names or records.schema.sizes != plan.schema.sizes:
        raise InputError("data schema", records.schema.name, f"does not match the plan's schema {plan.schema.name!r} (names and sizes must agree)")


def measured_views(plan: Plan) -> np.ndarray:
    """Indices of the plan's views that are measured (finite noise scale)."""
    return np.flatnonzero(np.isfinite(plan.allocation.sigma2))


def measure_iter(plan: Plan, records: Records, rng: np.random.Generator | NoiseSource, *, draws: int | None = None):
    """Yield (view index, y) for every measured view, one view at a time (bounded memory).

    ``rng`` is a :class:`querysmasher.noise.NoiseSource` (which sampler: :func:`make_noise`) or a
    numpy generator (experiments). BLAS runs single-threaded while noise is drawn (many small
    products). The plan's privacy cost is re-checked first (callers should also check before
    reading the records).
    """
    from .data import marginal
    from .noise import as_noise

    noise = as_noise(rng)
    check_budget(plan)
    _check_schema(plan, records)
    views = measured_views(plan)
    with at_most(1):
        for i in progress(views, desc="measure", total=len(views)):
            mech = plan.solutions[plan.keys[i]].mechanism
            x = marginal(records, plan.views[i], plan.schema.sizes)
            yield int(i), noise.add_gaussian(mech.sqrt_apply(x), float(plan.allocation.sigma2[i]), draws)
    log.info("measured %d residual views", len(views))


def measure(plan: Plan, records: Records, rng: np.random.Generator, *, seeded: bool = False, draws: int | None = None) -> Measurements:
    """Run every view's mechanism once (or ``draws`` times with independent noise, for tests)."""
    from .noise import as_noise

    noise = as_noise(rng)
    pairs = list(measure_iter(plan, records, noise, draws=draws))
    return Measurements(np.array([i for i, _ in pairs], dtype=np.int64), [y for _, y in pairs], seeded, sampler=noise.sampler)


def save_measurements(path: str | Path, plan: Plan, stream, *, seeded: bool, plan_sha256: str, sampler: str) -> None:
    """Write the release file from (view index, y) pairs (e.g. :func:`measure_iter`), streaming.

    It holds the noisy vectors, which views they belong to, the plan's digest and the budget:
    nothing else derived from the data.
    """
    from .io import atomic_h5, put, put_json

    if sampler not in SAMPLERS:  # every measurements file says which sampler drew its noise
        raise ValueError(f"sampler must be one of {SAMPLERS}, not {sampler!r}")
    idx = measured_views(plan)
    lengths = np.array([plan.solutions[plan.keys[i]].mechanism.outputs for i in idx], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    with atomic_h5(path, kind="measurements") as f:
        f.attrs["plan_sha256"] = plan_sha256
        f.attrs["seeded"] = bool(seeded)
        f.attrs["sampler"] = sampler
        f.attrs["method"] = plan.method
        put_json(f, "budget", plan.budget.to_dict())
        put(f, "view_index", idx.astype(np.int64))
        put(f, "offsets", offsets)
        ds = f.create_dataset("y", shape=(int(offsets[-1]),), dtype="f8", track_times=False)
        for pos, (i, y) in enumerate(stream):
            if i != idx[pos] or y.shape != (lengths[pos],):
                raise ValueError("measurement stream does not follow the plan's measured views")
            require_finite(y, "measurement", f"view {pos}")
            ds[offsets[pos]:offsets[pos + 1]] = y


def _read_layout(f) -> tuple[np.ndarray, np.ndarray, "h5py.Dataset"]:
    """(view_index, offsets, y) of a measurements file: integer vectors, offsets rising from 0 to
    the length of the float vector y, one more offset than views."""
    from . import h5read as r

    index = r.array(f, "view_index", kind="i", ndim=1, lo=0)
    offs = r.array(f, "offsets", kind="i", ndim=1)
    y = r.child(f, "y", group=False)
    length = y.shape[0] if y.shape is not None and len(y.shape) == 1 else -1
    if length < 0:
        raise r.bad(f, "y", f"shape {y.shape}", "must be a 1-D array")
    if len(offs) != len(index) + 1 or offs[0] != 0 or offs[-1] != length or np.any(np.diff(offs) < 0):
        raise r.bad(f, "offsets", offs[:8].tolist(), f"must hold one vector per measured view: offsets rising from 0 to the length of y ({length}), one more than view_index ({len(index)})")
    return index, offs, y


def load_measurements(path: str | Path, plan_sha256: str | None = None, plan: Plan | None = None) -> Measurements:
    """Open a measurements file, every field checked (an InputError naming the field otherwise);
    with ``plan``, also that it holds one finite float vector of the right length for each of the
    plan's measured views, and nothing else."""
    from . import h5read as r
    from .io import open_h5

    with open_h5(path, "measurements") as f, r.h5py_errors(path, "measurements file"):
        digest = r.text(f, "plan_sha256")
        if plan_sha256 is not None and digest != plan_sha256:
            raise InputError("measurements file", str(path), "was made with a different plan (plan_sha256 differs)")
        seeded = r.flag(f, "seeded")
        sampler = r.text(f, "sampler", choices=SAMPLERS, default="")
        index, offs, _ = _read_layout(f)
        if plan is not None:
            idx = measured_views(plan)
            # One vector per measured view, of the length its mechanism outputs (cells, or r for lowrank).
            want = np.concatenate([[0], np.cumsum([plan.solutions[plan.keys[i]].mechanism.outputs for i in idx])]).astype(np.int64)
            if index.shape != idx.shape or not np.array_equal(index, idx) or offs.shape != want.shape or not np.array_equal(offs, want):
                raise InputError("measurements file", str(path), "does not hold one vector per measured view of the plan (view_index/offsets/y disagree)")
            r.finite_vector(f, "y", int(want[-1]))
    return Measurements(index, _Segments(path, offs), seeded, digest, sampler)


def check_plan(plan) -> float:
    """The privacy re-check of a plan of any kind (:mod:`querysmasher.plankinds`) before any
    record is read: refused in one line when it exceeds its budget or cannot be measured; returns
    the recomputed cost."""
    from .plankinds import kind_of

    return kind_of(plan).op("check")(plan)


def measure_residual_to_file(plan: Plan, records: Records, noise: NoiseSource, out, *, plan_sha256: str) -> None:
    """The measurements file of a residual plan (kind ``plan``): every measured view's noisy vector."""
    save_measurements(out, plan, measure_iter(plan, records, noise), seeded=noise.seeded, plan_sha256=plan_sha256, sampler=noise.sampler)


def measure_plan_to_file(plan, records: Records, noise: NoiseSource, out, *, plan_sha256: str) -> None:
    """The measurements file of a plan of any kind, the plan checked first (:func:`check_plan`)."""
    from .plankinds import kind_of

    check_plan(plan)
    kind_of(plan).op("measure_to_file")(plan, records, noise, out, plan_sha256=plan_sha256)
