"""``qsplus`` releases: measure a :class:`.planner.MarginalPlan` from records and reconstruct its
answers, with their measurement and answer files (the plan kind ``marginal-plan`` of
:mod:`querysmasher.plankinds`).

The privacy cost is recomputed from the operators measure applies
(:func:`.operators.applied_privacy_cost` of :func:`.operators.measurement_operators`) before any record is
read, and refused above the plan's budget (no tolerance). Each measurement is one vector:
operator @ (the view's marginal, counted from the records) + Gaussian noise from the
:class:`querysmasher.noise.NoiseSource`. Reconstruction reads back one finite float vector of the
operator's row count per measurement and answers every workload query by GLS with its exact
variance (:func:`.gls.reconstruct`); with ``--csv`` each workload view's table with per-cell
standard errors, as a release writes them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import h5read as r
from ..errors import InputError, require_finite
from ..io import atomic_h5, new_group, open_h5, put, put_json
from ..noise import as_noise, check_noise_scales
from ..tablefiles import write_table_files
from .gls import check_estimable, measure_marginals, reconstruct
from .operators import applied_privacy_cost, measurement_operators

__all__ = ["check_marginal_plan", "measure_marginal_to_file", "reconstruct_marginal_to_file", "marginal_released_answers", "marginal_release_tables",
           "marginal_table_data"]

MAX_TABLE_CELLS = 4096  # cell variances of a workload view's table: explicit (cells x cells) up to this many cells


def check_marginal_plan(plan) -> float:
    """The privacy cost of the operators measure applies; an InputError above the plan's budget,
    for a noise scale the sampler cannot draw, or when the measurements would not determine every
    workload query (:func:`.gls.check_estimable`). Called before any record is read."""
    ops = measurement_operators(plan)
    check_noise_scales([m.sigma2 for m in ops], "plan sigma2")
    cost = applied_privacy_cost(ops, plan.budget.neighbours)
    if not np.isfinite(cost) or cost > plan.budget.beta:
        raise InputError("plan", plan.method, f"its applied operators cost beta {cost!r}, above the budget {plan.budget.beta!r}")
    check_estimable(plan)
    return cost


def marginal_release_tables(plan, records, noise):
    """The release of a ``qsplus`` plan: measure ``records`` (the privacy cost re-checked first),
    reconstruct by GLS, and return (tables, view_answers, total) as
    :func:`querysmasher.tablefiles.write_table_files` takes them (:func:`marginal_table_data`)."""
    from ..data import marginal

    check_marginal_plan(plan)  # before any record is read
    sizes = plan.schema.sizes
    ys = measure_marginals(plan, lambda attrs: marginal(records, tuple(attrs), sizes), as_noise(noise), budget_check=False)
    return marginal_table_data(plan, reconstruct(plan, ys, cell_variances=True, max_cells=MAX_TABLE_CELLS))


def marginal_table_data(plan, ans):
    """(tables, view_answers, total) of a ``qsplus`` reconstruction made with cell variances, as
    :func:`querysmasher.tablefiles.write_table_files` takes them: each workload view's table with its
    exact cell variances where it is an unbiased estimate of the marginal (else None and why),
    every answer with its variance, and the estimated total."""
    from .gls import table_estimable

    tables, seen = [], set()
    for k, v in enumerate(plan.workload.views):
        if v.attrs in seen:
            continue
        seen.add(v.attrs)
        var = ans.cell_variances[k]
        ok, why = table_estimable(plan, v.attrs)
        if ok and var is None:
            why = f"more than {MAX_TABLE_CELLS} cells: cell variances not computed"
        tables.append((v.attrs, ans.tables[k] if var is not None else None, var, why))
    # every table's constant coordinate is the one shared total
    total = float(np.sum(ans.tables[0])) if () in plan.problem.lower else None
    view_answers = [(v, lambda k=k: (ans.answers[k], ans.variances[k])) for k, v in enumerate(plan.workload.views)]
    return tables, view_answers, total


def measure_marginal_to_file(plan, records, noise, path: str | Path, *, plan_sha256: str) -> None:
    """The release: one noisy vector per measurement (marginal views, then residual-only subsets)."""
    from ..data import marginal

    check_marginal_plan(plan)  # before any record is read
    noise = as_noise(noise)
    sizes = plan.schema.sizes
    ys = measure_marginals(plan, lambda attrs: marginal(records, tuple(attrs), sizes), noise, budget_check=False)
    for i, y in enumerate(ys):
        require_finite(y, "measurement", i)
    with atomic_h5(path, kind="measurements") as f:
        f.attrs["plan_sha256"] = plan_sha256
        f.attrs["seeded"] = bool(noise.seeded)
        f.attrs["sampler"] = noise.sampler
        f.attrs["method"] = "qsplus"
        put_json(f, "budget", plan.budget.to_dict())
        g = new_group(f, "measurements")
        for i, y in enumerate(ys):
            put(g, str(i), np.asarray(y, dtype=np.float64))


def reconstruct_marginal_to_file(plan, measurements: str | Path, out: str | Path, *, plan_sha256: str,
                                 csv_dir=None, max_answers: int | None = None) -> dict:
    """Answers and exact variances from a ``qsplus`` release, every vector checked against the plan;
    with ``csv_dir``, also each workload view's table with per-cell standard errors as CSV (the
    files and ``tables.json`` index of :func:`querysmasher.tablefiles.write_table_files`; a view whose
    cells are not estimable, or of more than :data:`MAX_TABLE_CELLS` cells, is listed as omitted)."""
    ops = measurement_operators(plan)
    with open_h5(measurements, "measurements") as f, r.h5py_errors(measurements, "measurements file"):
        if r.text(f, "plan_sha256") != plan_sha256:
            raise InputError("measurements file", str(measurements), "was made with a different plan (plan_sha256 differs)")
        g = r.child(f, "measurements", group=True)
        if len(r.indexed_members(g, "one vector per measurement")) != len(ops):
            raise r.bad(g, "", len(r.members(g)), f"must hold one vector per measurement of the plan ({len(ops)})")
        ys = [np.asarray(r.finite_vector(g, str(i), m.operator.shape[0])[()], dtype=np.float64) for i, m in enumerate(ops)]
    ans = reconstruct(plan, ys, ops=ops, cell_variances=bool(csv_dir), max_cells=MAX_TABLE_CELLS)
    answers = [np.asarray(a, dtype=np.float64).ravel() for a in ans.answers]
    variances = [np.asarray(v, dtype=np.float64).ravel() for v in ans.variances]
    for k, (a, v) in enumerate(zip(answers, variances)):
        require_finite(a, "answers", f"workload view {k}")
        require_finite(v, "variances", f"workload view {k}")
    offsets = np.concatenate([[0], np.cumsum([len(a) for a in answers])]).astype(np.int64)
    with atomic_h5(out, kind="answers") as f:
        f.attrs["workload"] = plan.workload.spec
        f.attrs["method"] = "qsplus"
        f.attrs["answers_written"] = True
        put_json(f, "budget", plan.budget.to_dict())
        v = new_group(f, "views")
        put(v, "answer_offsets", offsets)
        put(v, "answers", np.concatenate(answers) if answers else np.zeros(0))
        put(v, "variances", np.concatenate(variances) if variances else np.zeros(0))
    info = {"views": len(answers), "queries": int(offsets[-1]), "answers_written": True}
    if csv_dir:
        tables, _, _ = marginal_table_data(plan, ans)
        Path(csv_dir).mkdir(parents=True, exist_ok=True)
        index = write_table_files(csv_dir, plan, tables, (), total=None)
        info["csv_tables"] = sum(1 for t in index["tables"] if t["file"])
    return info


def marginal_released_answers(plan, answers_path, views=None):
    """(workload view, released answers, variances) for every view (or the view indices ``views``),
    read one view at a time."""
    with open_h5(answers_path, "answers") as f:
        offs, answers, variances = f["views/answer_offsets"][()], f["views/answers"], f["views/variances"]
        for i in range(len(plan.workload.views)) if views is None else views:
            yield plan.workload.views[i], answers[offs[i]:offs[i + 1]], variances[offs[i]:offs[i + 1]]
