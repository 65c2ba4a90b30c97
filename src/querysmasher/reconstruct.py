"""Reconstruct: unbiased answers to every workload query, with their variances, for a plan of any kind.

A plan's kind (:mod:`querysmasher.plankinds`) gives its ``estimates`` from the measurements (each
kind's fast structured reconstruction: the residual closed forms of
:mod:`querysmasher.residualkind`, ``qsplus``'s per-view elimination, HDMM's Kronecker
pseudo-inverse) and its ``variances`` (known from the plan alone; none for HDMM); everything here
-- the answers file, the per-view CSV tables with standard errors, the answers a file gives back,
a release's publishable tables -- is written once against those two.

The answers file holds, per workload view, its reconstructed table over the view's cells (kinds
with per-view tables), and every query's answer, variance and confidence interval (``lower``,
``upper`` at the file's ``confidence``, exact under Gaussian noise: :mod:`querysmasher.intervals`)
when the workload has at most ``max_answers`` queries (always for kinds without tables); answers of
larger workloads are computed from the tables when read (:func:`released_answers`).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np

from .atomic import atomic_folder
from .decompose import view_answers
from .errors import InputError, require_finite
from .intervals import DEFAULT_CONFIDENCE, bounds, check_confidence, is_gaussian, multiplier
from .io import atomic_h5, new_group, open_h5, put, put_json
from .logs import progress
from .measure import load_measurements, measure
from .measurement import Measurements
from .plankinds import kind_of
from .threads import at_most
from .variances import query_variances, view_variances

log = logging.getLogger(__name__)

__all__ = [
    "reconstruct",
    "variances_of",
    "table_attrs",
    "save_answers",
    "table_data",
    "write_csv_tables",
    "release_tables",
    "reconstruct_plan_to_file",
    "released_answers",
    "has_per_view_tables",
    "query_variances",
    "view_variances",
    "DEFAULT_MAX_ANSWERS",
]

DEFAULT_MAX_ANSWERS = 10_000_000


def reconstruct(plan, meas: Measurements):
    """The estimates of a plan's answers from its measurements (its kind's ``estimates``: answers
    per workload view, ``view_answers(v)``, and tables, ``table(attrs)``, where the kind has them)."""
    return kind_of(plan).op("estimates")(plan, meas)


def variances_of(plan):
    """The variances of a plan's answers (its kind's ``variances``: ``view(v)``, ``cells(attrs)``)."""
    return kind_of(plan).op("variances")(plan)


def has_per_view_tables(plan) -> bool:
    """Whether reconstructing ``plan`` gives per-view tables (HDMM's answers are per query only)."""
    return kind_of(plan).per_view_tables


def save_answers(
    path: str | Path,
    est,
    variances=None,
    *,
    max_answers: int = DEFAULT_MAX_ANSWERS,
    confidence: float = DEFAULT_CONFIDENCE,
) -> dict:
    """Write the answers file of estimates ``est`` (of ``est.plan``; module docstring), streaming
    one view at a time; where the answers have variances, their intervals at ``confidence``
    (``lower``, ``upper``; the file's ``confidence`` and ``z``: :mod:`querysmasher.intervals`).
    Returns a small summary dict."""
    plan = est.plan
    z = multiplier(check_confidence(confidence), gaussian=is_gaussian(plan))
    variances = variances_of(plan) if variances is None else variances
    tables = has_per_view_tables(plan)
    views = plan.workload.views
    n_queries = int(plan.workload.query_count())
    write_answers = n_queries <= max_answers or not tables
    sizes = plan.schema.sizes
    with atomic_h5(path, kind="answers") as f, at_most(1):
        f.attrs["workload"] = plan.workload.spec
        f.attrs["method"] = plan.method
        f.attrs["answers_written"] = write_answers
        f.attrs["confidence"] = float(confidence)
        f.attrs["z"] = z
        put_json(f, "budget", plan.budget.to_dict())
        g = new_group(f, "views")
        put(g, "attrs", np.array([a for v in views for a in v.attrs], dtype=np.int64))
        put(g, "attr_offsets", np.concatenate([[0], np.cumsum([len(v.attrs) for v in views])]).astype(np.int64))
        put(g, "family", np.array([v.family for v in views], dtype=object))
        put(g, "weight", np.array([v.weight for v in views], dtype=float))
        if tables:
            t_offs = np.concatenate([[0], np.cumsum([math.prod(sizes[a] for a in v.attrs) for v in views])]).astype(
                np.int64
            )
            put(g, "table_offsets", t_offs)
            ds = g.create_dataset("tables", shape=(int(t_offs[-1]),), dtype="f8", track_times=False)
            for k, v in progress(
                enumerate(views), desc="reconstruct", total=len(views)
            ):  # one table in memory at a time
                ds[t_offs[k] : t_offs[k + 1]] = require_finite(
                    est.table(v.attrs), "answers", f"table of workload view {k}"
                )
        if write_answers:
            a_offs = np.concatenate([[0], np.cumsum([plan.workload.view_count(v) for v in views])]).astype(np.int64)
            put(g, "answer_offsets", a_offs)
            ans = g.create_dataset("answers", shape=(int(a_offs[-1]),), dtype="f8", track_times=False)
            var = None
            for k, v in progress(enumerate(views), desc="answers", total=len(views)):
                ans[a_offs[k] : a_offs[k + 1]] = require_finite(
                    np.asarray(est.view_answers(v), dtype=float).ravel(), "answers", f"workload view {k}"
                )
                vv = variances.view(v)
                if vv is not None:
                    if var is None:
                        shape = (int(a_offs[-1]),)
                        var, low, high = (
                            g.create_dataset(name, shape=shape, dtype="f8", track_times=False)
                            for name in ("variances", "lower", "upper")
                        )
                    part = slice(a_offs[k], a_offs[k + 1])
                    var[part] = require_finite(np.asarray(vv, dtype=float).ravel(), "variances", f"workload view {k}")
                    _, low[part], high[part] = bounds(ans[part], var[part], z)
    log.info(
        "reconstructed %d workload views (%d queries%s)",
        len(views),
        n_queries,
        "" if write_answers else ", tables only",
    )
    return {"views": len(views), "queries": n_queries, "answers_written": write_answers}


def table_attrs(plan) -> list[tuple[int, ...]]:
    """The attribute sets a plan's tables are written for: one per distinct attribute set of the
    workload's views, in the workload's order."""
    return list(dict.fromkeys(v.attrs for v in plan.workload.views))


def table_data(est, variances=None):
    """(tables, view_answers, total) of estimates ``est``, as
    :func:`querysmasher.tablefiles.write_table_files` takes them: one table per distinct attribute
    set of the workload's views with its cell variances where its cells are estimable (else None and
    why), every workload view's answers with their variances, and the estimated total (None where
    it is not estimable)."""
    plan = est.plan
    variances = variances_of(plan) if variances is None else variances
    tables = []
    for attrs in table_attrs(plan):
        var, why = variances.cells(attrs)
        tables.append((attrs, est.table(attrs) if var is not None else None, var, why))
    total = float(np.asarray(est.table(()))[0]) if variances.cells(())[0] is not None else None
    answers = [(v, lambda v=v: (est.view_answers(v), variances.view(v))) for v in plan.workload.views]
    return tables, answers, total


def write_csv_tables(folder: str | Path, est, variances=None, *, confidence: float = DEFAULT_CONFIDENCE) -> list[Path]:
    """Per-cell CSV tables with standard errors and confidence intervals, only for views whose cells
    are estimable, and an index ``tables.json`` (:mod:`querysmasher.tablefiles`). Returns the
    per-cell files written."""
    from .tablefiles import write_table_files  # loads pandas only where tables are written

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tables, _, total = table_data(est, variances)
    index = write_table_files(folder, est.plan, tables, (), total=total, confidence=confidence)
    return [folder / t["file"] for t in index["tables"] if t["file"]]


def release_tables(plan, records, noise, *, consistent: bool = False):
    """A release of ``plan`` (checked by the caller before the records were read,
    :func:`querysmasher.measure.check_plan`; measuring re-checks its privacy cost): measure
    ``records`` with ``noise``, reconstruct, and return the publishable tables as
    :func:`querysmasher.tablefiles.write_table_files` takes them, with (``consistent``) the
    non-negative tables consistent on every shared margin (:mod:`querysmasher.consistent`, from the
    measurements only; else None)."""
    released = measure(plan, records, noise, seeded=noise.seeded)
    tables, view_answers, total = table_data(reconstruct(plan, released))
    agreed = None
    if consistent:
        from .consistent import consistent_tables  # loads cvxpy only where it is asked for

        # over the tables whose cells are estimable: elsewhere the fit would not be determined
        agreed = consistent_tables(plan, released, [attrs for attrs, table, *_ in tables if table is not None])
    return tables, view_answers, total, agreed


def reconstruct_plan_to_file(
    plan,
    measurements,
    out,
    *,
    plan_sha256: str,
    csv_dir=None,
    max_answers: int | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
) -> dict:
    """The answers file of a plan of any kind from its measurements file (checked against the plan:
    its digest, one finite vector per measurement), plus per-view CSV tables in ``csv_dir`` where the
    kind has them, with confidence intervals at ``confidence``: a new folder published whole
    (:func:`querysmasher.atomic.atomic_folder`), never written into."""
    confidence = check_confidence(confidence, "--confidence")
    if csv_dir and not has_per_view_tables(plan):
        raise InputError("--csv", str(csv_dir), f"{plan.method} answers have no per-view tables to write as CSV")
    if csv_dir:
        from .tablefiles import check_table_columns  # loads pandas only where tables are written

        check_table_columns(plan.schema)
    limit = DEFAULT_MAX_ANSWERS if max_answers is None else int(max_answers)
    # overflow from measurements near the float limit is refused in one line (errors.require_finite)
    # before anything is written, not also warned about
    with np.errstate(over="ignore", invalid="ignore"), load_measurements(measurements, plan_sha256, plan) as meas:
        est, variances = reconstruct(plan, meas), variances_of(plan)
        if not csv_dir:
            return save_answers(out, est, variances, max_answers=limit, confidence=confidence)
        with atomic_folder(csv_dir, "--csv") as tmp:
            info = save_answers(out, est, variances, max_answers=limit, confidence=confidence)
            info["csv_tables"] = len(write_csv_tables(tmp, est, variances, confidence=confidence))
            return info


def released_answers(plan, answers_path, views=None):
    """(workload view, released answers, variances or None) for every view of a plan of any kind
    (or the view indices ``views``, in that order), read from its answers file one view at a time
    (bounded memory): the written answers, or those of the written tables."""
    with open_h5(answers_path, "answers") as f:
        g = f["views"]
        written = "answers" in g
        variances = None if written and "variances" in g else variances_of(plan)
        for i in range(len(plan.workload.views)) if views is None else views:
            v = plan.workload.views[i]
            if written:
                lo, hi = int(g["answer_offsets"][i]), int(g["answer_offsets"][i + 1])
                yield v, g["answers"][lo:hi], g["variances"][lo:hi] if variances is None else variances.view(v)
            else:
                lo, hi = int(g["table_offsets"][i]), int(g["table_offsets"][i + 1])
                yield v, view_answers(plan.workload, v, g["tables"][lo:hi]), variances.view(v)
