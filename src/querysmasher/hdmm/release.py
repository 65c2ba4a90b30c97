"""HDMM releases: measure an HDMM plan's strategies on the full data vector and reconstruct the
workload's answers, with their measurement and answer files.

The plan's privacy cost is recomputed from the operators measure applies
(:func:`~.plan.check_hdmm_budget`, no tolerance above the budget) before any record is read, and
every measurement vector read back is one finite float vector per strategy block. Measuring and
reconstructing need the full data vector, so they refuse domains above ``MAX_DOMAIN_CELLS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .. import h5read as r
from ..errors import InputError, require_finite
from ..families import query_matrix_1d
from ..io import atomic_h5, new_group, open_h5, put, put_json
from ..linalg import kron_apply
from ..noise import as_noise, check_noise_scales, make_noise
from .plan import MAX_DOMAIN_CELLS, HDMMPlan, check_domain, check_hdmm_budget, noise_cost

if TYPE_CHECKING:
    from ..data import Records

__all__ = [
    "HDMMMeasurements", "hdmm_measure", "hdmm_reconstruct", "check_measurable",
    "measure_hdmm_to_file", "reconstruct_hdmm_to_file", "hdmm_released_answers",
]


@dataclass(frozen=True, eq=False)
class HDMMMeasurements:
    """Noisy strategy answers: per group, one vector per Kronecker block."""

    y: tuple[tuple[np.ndarray, ...], ...]




def hdmm_measure(plan: HDMMPlan, x_full: np.ndarray, rng=None, *, max_domain_cells: int = MAX_DOMAIN_CELLS) -> HDMMMeasurements:
    """Answer every group's strategy on the full data vector (cells row-major in schema order) with
    Gaussian noise of variance σ_g^2, or Laplace noise of scale b_g = ||A_g||_1 / ε_g, spending the
    plan's budget. ``rng``: a :class:`querysmasher.noise.NoiseSource`, a numpy generator
    (experiments), or None for OpenDP's samplers with OS entropy (releases)."""
    cells = check_domain(plan, max_domain_cells)
    check_hdmm_budget(plan)
    x = np.asarray(x_full, dtype=float)
    if x.shape != (cells,):
        raise InputError("data vector", f"shape {x.shape}", f"must have shape ({cells},): one count per cell of the domain")
    noise = make_noise() if rng is None else as_noise(rng)
    if plan.noise == "laplace":
        alloc = plan.allocation
        return HDMMMeasurements(tuple(
            tuple(noise.add_laplace(y, b, noise_cost(g.strategy)) for y in g.strategy.answer(x))
            for g, b in zip(plan.groups, alloc.scales)
        ))
    sigma2 = plan.allocation.sigma2
    return HDMMMeasurements(tuple(tuple(noise.add_gaussian(y, s2) for y in g.strategy.answer(x)) for g, s2 in zip(plan.groups, sigma2)))


def hdmm_reconstruct(plan: HDMMPlan, meas: HDMMMeasurements, *, max_domain_cells: int = MAX_DOMAIN_CELLS) -> list[np.ndarray]:
    """Workload answers, one array per workload view (in ``plan.workload.views`` order): each group's
    least-squares estimate x̂_g = X_g^+ A_g^T y_g answers the views of that group (HDMM's OPT_+ error
    model, which the plan predicts exactly; a joint estimate over all groups could only lower it)."""
    check_domain(plan, max_domain_cells)
    sizes = plan.schema.sizes
    answers: list[np.ndarray | None] = [None] * len(plan.workload.views)
    for g, y in zip(plan.groups, meas.y):
        xhat = g.strategy.estimate(y).reshape(sizes)
        for j in g.views:
            v = plan.workload.views[j]
            marg = xhat.sum(axis=tuple(i for i in range(len(sizes)) if i not in v.attrs)).ravel()
            view_sizes = tuple(sizes[i] for i in v.attrs)
            answers[j] = kron_apply([query_matrix_1d(f, n) for f, n in zip(v.factors, view_sizes)], marg, view_sizes)
    return answers


def check_measurable(plan: HDMMPlan, max_domain_cells: int = MAX_DOMAIN_CELLS) -> float:
    """Raise the one-line InputError when the full data vector would not fit (HDMM's real limit),
    or when the plan's privacy cost, recomputed from the operators measure applies, exceeds its
    budget (:func:`~.plan.check_hdmm_budget`); returns that cost."""
    check_domain(plan, max_domain_cells)
    cost = check_hdmm_budget(plan)
    if plan.noise == "laplace":
        check_noise_scales(plan.allocation.scales, "plan Laplace scale", laplace=True)
    else:
        check_noise_scales([s2 for s2 in plan.allocation.sigma2 if np.isfinite(s2)], "plan sigma2")
    return cost


def _full_vector(plan: HDMMPlan, records: Records, max_domain_cells: int) -> np.ndarray:
    cells = check_domain(plan, max_domain_cells)  # refuse before allocating anything
    flat = np.ravel_multi_index(tuple(records.codes[:, i] for i in range(len(plan.schema))), plan.schema.sizes)
    return np.bincount(flat, minlength=cells).astype(float)


def measure_hdmm_to_file(plan: HDMMPlan, records: Records, noise, path: str | Path, *,
                         plan_sha256: str, max_domain_cells: int = MAX_DOMAIN_CELLS) -> None:
    """The release for an HDMM plan: each group's noisy strategy answers, nothing else."""
    noise = as_noise(noise)
    meas = hdmm_measure(plan, _full_vector(plan, records, max_domain_cells), noise, max_domain_cells=max_domain_cells)
    for gi, blocks in enumerate(meas.y):
        for y in blocks:
            require_finite(y, "measurement", f"group {gi}")
    with atomic_h5(path, kind="measurements") as f:
        f.attrs["plan_sha256"] = plan_sha256
        f.attrs["seeded"] = bool(noise.seeded)
        f.attrs["sampler"] = noise.sampler
        f.attrs["method"] = "hdmm"
        put_json(f, "budget", plan.budget.to_dict())
        groups = new_group(f, "groups")
        for gi, blocks in enumerate(meas.y):
            g = new_group(groups, str(gi))
            for bi, y in enumerate(blocks):
                put(g, str(bi), y)


def _read_measurements(f, plan: HDMMPlan) -> HDMMMeasurements:
    """Per group of the plan, one finite float vector per strategy block, of the block's length."""
    groups = r.child(f, "groups", group=True)
    if len(r.indexed_members(groups, "one group of measurements per strategy group")) != len(plan.groups):
        raise r.bad(groups, "", len(r.members(groups)), f"must hold one group per strategy group of the plan ({len(plan.groups)})")
    y = []
    for gi, grp in enumerate(plan.groups):
        g = r.child(groups, str(gi), group=True)
        rows = grp.strategy.block_rows()
        if len(r.indexed_members(g, "one vector per strategy block")) != len(rows):
            raise r.bad(g, "", len(r.members(g)), f"must hold one vector per block of the group's strategy ({len(rows)})")
        y.append(tuple(np.asarray(r.finite_vector(g, str(b), n)[()], dtype=np.float64) for b, n in enumerate(rows)))
    return HDMMMeasurements(tuple(y))


def reconstruct_hdmm_to_file(plan: HDMMPlan, measurements: str | Path, out: str | Path, *, plan_sha256: str,
                             csv_dir=None, max_answers: int | None = None) -> dict:
    """Answers from an HDMM release, every measurement checked against the plan's strategies
    (HDMM's answers are per query: no per-view tables, so ``csv_dir`` is refused; every answer is
    written whatever ``max_answers``)."""
    if csv_dir:
        raise InputError("--csv", str(csv_dir), "hdmm answers have no per-view tables to write as CSV")
    check_domain(plan, MAX_DOMAIN_CELLS)  # before any vector is read
    with open_h5(measurements, "measurements") as f, r.h5py_errors(measurements, "measurements file"):
        if r.text(f, "plan_sha256") != plan_sha256:
            raise InputError("measurements file", str(measurements), "was made with a different plan (plan_sha256 differs)")
        meas = _read_measurements(f, plan)
    answers = [require_finite(a, "answers", f"workload view {k}") for k, a in enumerate(hdmm_reconstruct(plan, meas))]
    offsets = np.concatenate([[0], np.cumsum([len(a) for a in answers])]).astype(np.int64)
    with atomic_h5(out, kind="answers") as f:
        f.attrs["workload"] = plan.workload.spec
        f.attrs["method"] = "hdmm"
        f.attrs["answers_written"] = True
        put_json(f, "budget", plan.budget.to_dict())
        g = new_group(f, "views")
        put(g, "answer_offsets", offsets)
        put(g, "answers", np.concatenate(answers) if answers else np.zeros(0))
    return {"views": len(answers), "queries": int(offsets[-1]), "answers_written": True}


def hdmm_released_answers(plan: HDMMPlan, answers_path, views=None):
    """(workload view, released answers, None) for every view (or the view indices ``views``),
    read from an HDMM answers file one view at a time (HDMM's answers file holds no variances)."""
    with open_h5(answers_path, "answers") as f:
        offs, answers = f["views/answer_offsets"][()], f["views/answers"]
        for i in range(len(plan.workload.views)) if views is None else views:
            yield plan.workload.views[i], answers[int(offs[i]):int(offs[i + 1])], None
