"""Reconstruct: unbiased answers to every workload query, with their variances.

From y_A' = X^(1/2) x_A' + noise the residual estimate is x̂_A' = (X^+)^(1/2) y_A' (generalised least
squares). A query q on view A decomposes into subqueries q_{=>A'} = q (⊗ W_i) (W_i = I - J/n_i on
A', (1/n_i) 1 elsewhere), each in the range of its view's mechanism, so

    answer(q) = sum_{A' ⊆ A} q_{=>A'} · x̂_A' = q · T̂_A,  T̂_A = sum_{A' ⊆ A} (⊗ W_i) x̂_A',

is unbiased, and its variance sum_{A'} sigma^2_A' q_{=>A'} X_A'^+ q_{=>A'}^T is known from the plan
alone. T̂_A — the reconstructed marginal table of the workload view — answers every workload query on
A; workloads with billions of queries are answered lazily from these tables.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .decompose import view_query_matrix
from .errors import require_finite
from .families import query_matrix_1d
from .fulldomain import is_full_domain_plan, marginalise
from .linalg import kron_apply
from .threads import at_most
from .logs import progress
from .measure import Measurements
from .plan import Plan
from .variances import ViewVarianceMemo, query_variances, view_variances
from .workload import WorkloadView

log = logging.getLogger(__name__)

__all__ = ["Reconstruction", "reconstruct", "save_answers", "write_csv_tables", "view_answers_from_table", "query_variances", "view_variances", "DEFAULT_MAX_ANSWERS",
           "reconstruct_residual_to_file", "residual_released_answers", "reconstruct_plan_to_file", "has_per_view_tables", "released_answers", "residual_release_tables"]

DEFAULT_MAX_ANSWERS = 10_000_000


def _lift(x: np.ndarray, sub: tuple[int, ...], attrs: tuple[int, ...], sizes_all: tuple[int, ...]) -> np.ndarray:
    """(⊗ W_i) x: a residual estimate over ``sub`` as a table over ``attrs`` (batch dims kept)."""
    sub_sizes = tuple(sizes_all[a] for a in sub)
    batch = x.shape[1:]
    t = x.reshape(sub_sizes + batch)
    for axis in range(len(sub)):
        t = t - t.mean(axis=axis, keepdims=True)
    shape = tuple(sizes_all[a] for a in attrs)
    expand = tuple(p for p, a in enumerate(attrs) if a not in sub)
    divisor = math.prod(shape[p] for p in expand)
    t = np.expand_dims(t, tuple(expand)) if expand else t
    return (np.broadcast_to(t, shape + batch) / divisor).reshape((-1,) + batch)


CACHE_CELLS = 4096  # residual estimates and tables up to this size are kept: many tables reuse them


@dataclass(eq=False)
class Reconstruction:
    """Residual estimates of every measured view (computed on demand), and the answers they give."""

    plan: Plan
    meas: Measurements
    _residual: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict, repr=False)
    _tables: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._position = {self.plan.views[int(i)]: k for k, i in enumerate(self.meas.view_index)}

    def __repr__(self) -> str:
        return f"Reconstruction({self.plan.method} on {self.plan.workload.spec}: {len(self._position)} measured views)"

    def residual(self, sub: tuple[int, ...]) -> np.ndarray | None:
        """x̂_A' = (X^+)^(1/2) y_A' for a measured residual view (None when it is not measured)."""
        if sub in self._residual:
            return self._residual[sub]
        k = self._position.get(sub)
        if k is None:
            return None
        i = int(self.meas.view_index[k])
        x = self.plan.solutions[self.plan.keys[i]].mechanism.pinv_sqrt_apply(np.asarray(self.meas.y[k]))
        if x.shape[0] <= CACHE_CELLS:
            self._residual[sub] = x
        return x

    def table(self, attrs: tuple[int, ...]) -> np.ndarray:
        """T̂_A over the cells of ``attrs`` (row-major): unbiased for every workload query on A."""
        attrs = tuple(attrs)
        if attrs in self._tables:
            return self._tables[attrs]
        sizes = self.plan.schema.sizes
        if is_full_domain_plan(self.plan):  # one full-domain estimate: marginalise it (method mm)
            full = self.residual(self.plan.views[0])
            total = np.zeros(math.prod(sizes[a] for a in attrs)) if full is None else marginalise(full, sizes, attrs)
            self._tables[attrs] = total
            return total
        total = None
        for r in range(len(attrs) + 1):
            for sub in itertools.combinations(attrs, r):
                x = self.residual(sub)
                if x is not None:
                    part = _lift(x, sub, attrs, sizes)
                    total = part.copy() if total is None else total.__iadd__(part)
        if total is None:
            total = np.zeros(math.prod(sizes[a] for a in attrs))
        if total.shape[0] <= CACHE_CELLS:
            self._tables[attrs] = total
        return total

    def answer(self, attrs: tuple[int, ...], queries: np.ndarray) -> np.ndarray:
        """Answers to explicit query rows over the cells of ``attrs``."""
        return np.asarray(queries, dtype=float) @ self.table(attrs)

    def view_answers(self, v: WorkloadView) -> np.ndarray:
        """Answers to every query of one workload view (product families by mode products)."""
        return view_answers_from_table(self.plan, v, self.table(v.attrs))


def view_answers_from_table(plan: Plan, v: WorkloadView, table: np.ndarray) -> np.ndarray:
    """Answers to every query of workload view ``v`` from a table over its cells (a reconstructed
    one, or true counts for an evaluation); product families by mode products."""
    if v.factors:
        sizes = tuple(plan.schema.sizes[a] for a in v.attrs)
        return kron_apply([query_matrix_1d(f, n) for f, n in zip(v.factors, sizes)], table, sizes)
    return view_query_matrix(plan.workload, v) @ table


def reconstruct(plan: Plan, meas: Measurements) -> Reconstruction:
    """A reconstruction over the measurements; residual estimates are computed when needed."""
    return Reconstruction(plan, meas)


def save_answers(path: str | Path, rec: Reconstruction, *, max_answers: int = DEFAULT_MAX_ANSWERS) -> dict:
    """Write the per-view reconstructed tables, and every query's answer and variance when the
    workload has at most ``max_answers`` queries. Returns a small summary dict."""
    from .io import atomic_h5, new_group, put, put_json

    plan = rec.plan
    views = plan.workload.views
    n_queries = int(plan.workload.query_count())
    write_answers = n_queries <= max_answers
    sizes = plan.schema.sizes
    cells = [math.prod(sizes[a] for a in v.attrs) for v in views]
    with atomic_h5(path, kind="answers") as f, at_most(1):
        f.attrs["workload"] = plan.workload.spec
        f.attrs["method"] = plan.method
        f.attrs["answers_written"] = write_answers
        put_json(f, "budget", plan.budget.to_dict())
        g = new_group(f, "views")
        lengths = [len(v.attrs) for v in views]
        put(g, "attrs", np.array([a for v in views for a in v.attrs], dtype=np.int64))
        put(g, "attr_offsets", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        put(g, "family", np.array([v.family for v in views], dtype=object))
        put(g, "weight", np.array([v.weight for v in views]))
        t_offs = np.concatenate([[0], np.cumsum(cells)]).astype(np.int64)
        put(g, "table_offsets", t_offs)
        tables = g.create_dataset("tables", shape=(int(t_offs[-1]),), dtype="f8", track_times=False)
        for k, v in progress(enumerate(views), desc="reconstruct", total=len(views)):  # streamed: one table in memory at a time
            tables[t_offs[k]:t_offs[k + 1]] = require_finite(rec.table(v.attrs), "answers", f"table of workload view {k}")
        if write_answers:
            counts = [plan.workload.view_count(v) for v in views]
            a_offs = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            put(g, "answer_offsets", a_offs)
            ans = g.create_dataset("answers", shape=(int(a_offs[-1]),), dtype="f8", track_times=False)
            var = g.create_dataset("variances", shape=(int(a_offs[-1]),), dtype="f8", track_times=False)
            variances = ViewVarianceMemo(plan)  # views of one shape, mechanism and noise share their variances
            for k, v in progress(enumerate(views), desc="answers", total=len(views)):
                ans[a_offs[k]:a_offs[k + 1]] = require_finite(rec.view_answers(v), "answers", f"workload view {k}")
                var[a_offs[k]:a_offs[k + 1]] = require_finite(variances(v), "variances", f"workload view {k}")
    log.info("reconstructed %d workload views (%d queries%s)", len(views), n_queries, "" if write_answers else ", tables only")
    return {"views": len(views), "queries": n_queries, "answers_written": write_answers}


def write_csv_tables(folder: str | Path, rec: Reconstruction) -> list[Path]:
    """Per-cell CSV tables with standard errors, only for views whose cells are estimable, and an
    index ``tables.json`` (see :mod:`querysmasher.tables`). Returns the per-cell files written."""
    from .tables import write_tables

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    index = write_tables(folder, rec, answers=False)
    return [folder / t["file"] for t in index["tables"] if t["file"]]


def residual_release_tables(plan, records, noise):
    """The release of a residual plan (kind ``plan``): measure ``records`` with ``noise``, reconstruct,
    and return the publishable tables as :func:`querysmasher.tablefiles.write_table_files` takes them."""
    from .measure import measure_iter, measured_views
    from .tables import residual_table_data

    meas = Measurements(measured_views(plan), [y for _, y in measure_iter(plan, records, noise)], False)
    return residual_table_data(reconstruct(plan, meas))


def reconstruct_residual_to_file(plan, measurements, out, *, plan_sha256: str, csv_dir=None, max_answers: int | None = None) -> dict:
    """The answers file of a residual plan (kind ``plan``) from its measurements file (checked
    against the plan: its digest, one finite vector per measured view), plus per-view CSV tables
    in ``csv_dir``."""
    from .measure import load_measurements

    with load_measurements(measurements, plan_sha256, plan) as meas:
        rec = reconstruct(plan, meas)
        info = save_answers(out, rec, max_answers=DEFAULT_MAX_ANSWERS if max_answers is None else int(max_answers))
        if csv_dir:
            info["csv_tables"] = len(write_csv_tables(csv_dir, rec))
    return info


def residual_released_answers(plan, answers_path, views=None):
    """(workload view, released answers, variances) for every view of a residual plan (or the view
    indices ``views``), from its answers file's tables one view at a time (bounded memory)."""
    from .io import open_h5

    with open_h5(answers_path, "answers") as f:
        variances = ViewVarianceMemo(plan)  # views of one shape, mechanism and noise share their variances
        offs, tables = f["views/table_offsets"][()], f["views/tables"]
        for i in range(len(plan.workload.views)) if views is None else views:
            v = plan.workload.views[i]
            yield v, view_answers_from_table(plan, v, tables[int(offs[i]):int(offs[i + 1])]), variances(v)


def reconstruct_plan_to_file(plan, measurements, out, *, plan_sha256: str, csv_dir=None, max_answers: int | None = None) -> dict:
    """The answers file of a plan of any kind (:mod:`querysmasher.plankinds`) from its
    measurements file, plus per-view CSV tables in ``csv_dir`` where the kind has them: a new
    folder published whole (:func:`querysmasher.atomic.atomic_folder`), never written into."""
    from .atomic import atomic_folder
    from .plankinds import kind_of

    from .tablefiles import check_table_columns

    op = kind_of(plan).op("reconstruct_to_file")
    # overflow from measurements near the float limit is refused in one line (errors.require_finite)
    # before anything is written, not also warned about
    with np.errstate(over="ignore", invalid="ignore"):
        if not csv_dir:
            return op(plan, measurements, out, plan_sha256=plan_sha256, csv_dir=None, max_answers=max_answers)
        check_table_columns(plan.schema)
        with atomic_folder(csv_dir, "--csv") as tmp:
            return op(plan, measurements, out, plan_sha256=plan_sha256, csv_dir=tmp, max_answers=max_answers)


def has_per_view_tables(plan) -> bool:
    """Whether reconstructing ``plan`` gives per-view tables (HDMM's answers are per query only)."""
    from .plankinds import kind_of

    return kind_of(plan).per_view_tables


def released_answers(plan, answers_path, views=None):
    """(workload view, released answers, variances or None) for every view of a plan of any kind
    (or the view indices ``views``, in that order), read from its answers file one view at a time
    (bounded memory)."""
    from .plankinds import kind_of

    return kind_of(plan).op("released_answers")(plan, answers_path, views)
