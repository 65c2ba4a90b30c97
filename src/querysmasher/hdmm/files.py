"""HDMM plan, measurement and answer files, for the ``plan``/``measure``/``reconstruct`` commands.

An HDMM plan file records what determines the strategy (schema, workload, budget, seed, restarts)
and its expected error; loading it re-runs the seeded optimisers and checks that the same error
comes out, so the file stays small even when the strategy has many Kronecker blocks. Measuring and
reconstructing need the full data vector, so they refuse domains above ``MAX_DOMAIN_CELLS``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..accounting import Budget
from ..data import Records
from ..errors import InputError
from ..io import atomic_h5, get_json, new_group, open_h5, put, put_json
from ..schema import Schema
from .plan import MAX_DOMAIN_CELLS, HDMMMeasurements, HDMMPlan, _check_domain, hdmm_measure, hdmm_reconstruct, plan_hdmm

__all__ = ["save_hdmm_plan", "load_hdmm_plan", "check_measurable", "measure_hdmm_to_file", "reconstruct_hdmm_to_file"]


def save_hdmm_plan(plan: HDMMPlan, path: str | Path) -> None:
    with atomic_h5(path, kind="hdmm-plan") as f:
        put_json(f, "schema", plan.schema.to_dict())
        f.attrs["workload"] = plan.workload.spec
        put_json(f, "budget", {"beta": plan.budget.beta, "source": plan.budget.source, "delta": plan.budget.delta})
        f.attrs["seed"] = plan.seed
        f.attrs["restarts"] = plan.restarts
        f.attrs["total_variance"] = plan.total_variance
        put_json(f, "summary", plan.summary())


def load_hdmm_plan(path: str | Path) -> HDMMPlan:
    """Re-derive the plan from its seeded inputs and check it reproduces the recorded error."""
    with open_h5(path, "hdmm-plan") as f:
        schema = Schema.from_dict(get_json(f, "schema"))
        workload, b = str(f.attrs["workload"]), get_json(f, "budget")
        seed, restarts, recorded = int(f.attrs["seed"]), int(f.attrs["restarts"]), float(f.attrs["total_variance"])
    plan = plan_hdmm(schema, workload, Budget(b["beta"], b["source"], b["delta"]), seed=seed, restarts=restarts)
    if not np.isclose(plan.total_variance, recorded, rtol=1e-9, atol=0):
        raise InputError("hdmm plan file", str(path), f"does not reproduce (total variance {plan.total_variance!r}, recorded {recorded!r})")
    return plan


def check_measurable(plan: HDMMPlan, max_domain_cells: int = MAX_DOMAIN_CELLS) -> None:
    """Raise the one-line InputError when the full data vector would not fit (HDMM's real limit)."""
    _check_domain(plan, max_domain_cells)


def _full_vector(plan: HDMMPlan, records: Records, max_domain_cells: int) -> np.ndarray:
    cells = _check_domain(plan, max_domain_cells)  # refuse before allocating anything
    flat = np.ravel_multi_index(tuple(records.codes[:, i] for i in range(len(plan.schema))), plan.schema.sizes)
    return np.bincount(flat, minlength=cells).astype(float)


def measure_hdmm_to_file(plan: HDMMPlan, records: Records, rng: np.random.Generator, path: str | Path, *, seeded: bool,
                         plan_sha256: str, max_domain_cells: int = MAX_DOMAIN_CELLS) -> None:
    """The release for an HDMM plan: each group's noisy strategy answers, nothing else."""
    meas = hdmm_measure(plan, _full_vector(plan, records, max_domain_cells), rng, max_domain_cells=max_domain_cells)
    with atomic_h5(path, kind="measurements") as f:
        f.attrs["plan_sha256"] = plan_sha256
        f.attrs["seeded"] = bool(seeded)
        f.attrs["method"] = "hdmm"
        put_json(f, "budget", plan.budget.to_dict())
        groups = new_group(f, "groups")
        for gi, blocks in enumerate(meas.y):
            g = new_group(groups, str(gi))
            for bi, y in enumerate(blocks):
                put(g, str(bi), y)


def reconstruct_hdmm_to_file(plan: HDMMPlan, measurements: str | Path, out: str | Path, plan_sha256: str) -> dict:
    with open_h5(measurements, "measurements") as f:
        if str(f.attrs["plan_sha256"]) != plan_sha256:
            raise InputError("measurements file", str(measurements), "was made with a different plan (plan_sha256 differs)")
        groups = f["groups"]
        y = tuple(tuple(groups[str(gi)][str(bi)][()] for bi in range(len(groups[str(gi)]))) for gi in range(len(groups)))
    answers = hdmm_reconstruct(plan, HDMMMeasurements(y))
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
