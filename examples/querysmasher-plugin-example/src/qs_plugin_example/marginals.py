"""A planner plugin with a plan record of its own: each workload view's marginal measured with
Gaussian noise (the identity on that marginal), answers by the view's queries applied to it.

It is the smallest complete *plan kind*: a record (:class:`MarginalsPlan`, ``file_kind``
``example-marginals-plan``), its file format, its privacy re-check, its measure and its
reconstruct, declared as one :class:`querysmasher.plankinds.PlanKind` (:data:`KIND`) and
registered through the entry-point group ``querysmasher.plan_kinds``, so that a fresh
``querysmasher measure`` process loads its plan files. Not a good mechanism: an example.

Each record adds 1 to one cell of every view's marginal, so under add-remove neighbours the
releases cost sum_v 1 / sigma_v^2 (the largest diagonal of sum_v M_v^T M_v / sigma_v^2); the noise
variances are allocated in closed form (:func:`querysmasher.allocation.allocate`) against the
views' losses ||Q_v||_F^2 (weighted).

>>> from querysmasher.accounting import Budget
>>> from querysmasher.planning import parse_problem
>>> schema, workload = parse_problem("synthetic:n=3,d=2", "marginal:1")
>>> plan = NoisyMarginalsPlanner().plan(schema, workload, Budget.from_beta(1.0))
>>> plan.views, round(plan.rmse, 6)
([(0,), (1,)], 1.414214)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from querysmasher import h5read as r
from querysmasher.accounting import Budget
from querysmasher.allocation import allocate, rmse
from querysmasher.decompose import view_query_matrix
from querysmasher.families import query_matrix_1d
from querysmasher.errors import InputError, require_finite
from querysmasher.io import atomic_h5, new_group, open_h5, put, put_json
from querysmasher.noise import as_noise, check_noise_scales
from querysmasher.plankinds import PlanKind
from querysmasher.schema import Schema
from querysmasher.workload import Workload, parse_workload

__all__ = ["MarginalsPlan", "NoisyMarginalsPlanner", "KIND", "FILE_KIND"]

FILE_KIND = "example-marginals-plan"


def view_queries(workload, v) -> np.ndarray:
    """A workload view's query rows over the cells of its marginal (product families: the
    Kronecker product of their per-attribute queries)."""
    if not v.factors:
        return view_query_matrix(workload, v)
    q = np.ones((1, 1))
    for f, a in zip(v.factors, v.attrs):
        q = np.kron(q, query_matrix_1d(f, workload.schema.sizes[a]))
    return q


@dataclass(eq=False)
class MarginalsPlan:
    """The views measured (each distinct workload view's attributes) and their noise variances."""

    file_kind: ClassVar[str] = FILE_KIND
    schema: Schema
    workload: Workload
    method: str
    budget: Budget
    views: list[tuple[int, ...]]
    sigma2: np.ndarray
    phase_seconds: dict = field(default_factory=dict)

    @property
    def queries(self) -> float:
        return self.workload.query_count(weighted=True)

    @property
    def total_variance(self) -> float:
        index = {a: k for k, a in enumerate(self.views)}
        return float(sum(v.weight * self.sigma2[index[v.attrs]] * np.sum(view_queries(self.workload, v) ** 2) for v in self.workload.views))

    @property
    def rmse(self) -> float:
        return rmse(self.total_variance, self.queries)

    def privacy_cost(self) -> float:
        return float(np.sum(1.0 / self.sigma2))

    def summary(self) -> dict:
        return {"schema": self.schema.name, "workload": self.workload.spec, "method": self.method, "rmse": self.rmse,
                "total_variance": self.total_variance, "queries": self.queries, "views": len(self.workload.views),
                "seconds": 0.0, "phase_seconds": {}, "notes": [], **self.budget.to_dict()}


class NoisyMarginalsPlanner:
    """The whole-workload planner of :class:`MarginalsPlan` (method ``noisymarginals``)."""

    name = "noisymarginals"
    plan_kind = FILE_KIND  # what the method table reads: its plans are of this kind
    objectives = ("sum",)
    neighbours = ("add-remove",)

    @staticmethod
    def unsupported(workload) -> str:
        return "custom queries are not supported" if any(v.family == "custom" for v in workload.views) else ""

    def plan(self, schema, workload, budget, *, objective: str = "sum") -> MarginalsPlan:
        views = sorted({v.attrs for v in workload.views}, key=lambda a: (len(a), a))
        index = {a: k for k, a in enumerate(views)}
        losses = np.zeros(len(views))
        for v in workload.views:
            losses[index[v.attrs]] += v.weight * float(np.sum(view_queries(workload, v) ** 2))
        return MarginalsPlan(schema, workload, self.name, budget, views, np.asarray(allocate(losses, budget.beta).sigma2, dtype=float))


def check(plan: MarginalsPlan) -> float:
    """The privacy cost of what measure applies, refused above the budget or for noise the sampler
    cannot draw; every workload view is measured (a view's queries see its marginal only)."""
    check_noise_scales(plan.sigma2, "plan sigma2")
    cost = plan.privacy_cost()
    if not cost <= plan.budget.beta:
        raise InputError("plan privacy cost", cost, f"exceeds its budget beta {plan.budget.beta!r}")
    missing = {v.attrs for v in plan.workload.views} - set(plan.views)
    if missing:
        raise InputError("plan", plan.method, f"{len(missing)} workload views are not measured")
    return cost


def save(plan: MarginalsPlan, path) -> None:
    with atomic_h5(path, kind=FILE_KIND) as f:
        f.attrs["method"] = plan.method
        f.attrs["workload"] = plan.workload.spec
        put_json(f, "schema", plan.schema.to_dict())
        put_json(f, "budget", {"beta": plan.budget.beta, "source": plan.budget.source, "delta": plan.budget.delta})
        g = new_group(f, "views")
        lengths = [len(a) for a in plan.views]
        put(g, "attrs", np.array([a for v in plan.views for a in v], dtype=np.int64))
        put(g, "offsets", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        put(g, "sigma2", np.asarray(plan.sigma2, dtype=np.float64))


def load(path) -> MarginalsPlan:
    """A saved plan, every field checked (one InputError naming it otherwise); runs no planner."""
    with open_h5(path, FILE_KIND) as f, r.h5py_errors(path, "plan file"):
        schema = r.read_schema(f)
        workload = parse_workload(r.text(f, "workload"), schema)
        b = r.json_attr(f, "budget")
        budget = Budget(float(r.json_number(f, "budget", b, "beta", positive=True)), r.json_text(f, "budget", b, "source"),
                        float(r.json_number(f, "budget", b, "delta", positive=True, hi=1)))
        g = r.child(f, "views", group=True)
        offs = r.array(g, "offsets", kind="i", ndim=1, lo=0)
        flat = r.array(g, "attrs", kind="i", ndim=1, lo=0, hi=len(schema.sizes) - 1)
        if len(offs) < 1 or offs[0] != 0 or offs[-1] != len(flat) or np.any(np.diff(offs) < 0):
            raise r.bad(g, "offsets", offs[:8].tolist(), "must rise from 0 to the number of attributes listed")
        views = [tuple(int(a) for a in flat[offs[i]:offs[i + 1]]) for i in range(len(offs) - 1)]
        sigma2 = r.array(g, "sigma2", kind="f", shape=(len(views),), positive=True)
        method = r.text(f, "method")
    return MarginalsPlan(schema, workload, method, budget, views, np.asarray(sigma2, dtype=float))


def measure_to_file(plan: MarginalsPlan, records, noise, path, *, plan_sha256: str) -> None:
    from querysmasher.data import marginal

    check(plan)  # before any record is read (measure_plan_to_file checks too)
    noise = as_noise(noise)
    ys = [require_finite(noise.add_gaussian(marginal(records, a, plan.schema.sizes), float(s2)), "measurement", k)
          for k, (a, s2) in enumerate(zip(plan.views, plan.sigma2))]
    with atomic_h5(path, kind="measurements") as f:
        f.attrs["plan_sha256"] = plan_sha256
        f.attrs["seeded"] = bool(noise.seeded)
        f.attrs["sampler"] = noise.sampler
        f.attrs["method"] = plan.method
        g = new_group(f, "views")
        for k, y in enumerate(ys):
            put(g, str(k), np.asarray(y, dtype=np.float64))


def reconstruct_to_file(plan: MarginalsPlan, measurements, out, *, plan_sha256: str, csv_dir=None, max_answers=None) -> dict:
    if csv_dir:
        raise InputError("--csv", str(csv_dir), f"{plan.method} answers have no per-view tables to write as CSV")
    sizes = plan.schema.sizes
    with open_h5(measurements, "measurements") as f, r.h5py_errors(measurements, "measurements file"):
        if r.text(f, "plan_sha256") != plan_sha256:
            raise InputError("measurements file", str(measurements), "was made with a different plan (plan_sha256 differs)")
        g = r.child(f, "views", group=True)
        ys = [np.asarray(r.finite_vector(g, str(k), math.prod(sizes[a] for a in attrs))[()]) for k, attrs in enumerate(plan.views)]
    index = {a: k for k, a in enumerate(plan.views)}
    answers, variances = [], []
    for v in plan.workload.views:
        q = view_queries(plan.workload, v)
        answers.append(require_finite(q @ ys[index[v.attrs]], "answers", v.attrs))
        variances.append(plan.sigma2[index[v.attrs]] * np.sum(q * q, axis=1))
    offsets = np.concatenate([[0], np.cumsum([len(a) for a in answers])]).astype(np.int64)
    with atomic_h5(out, kind="answers") as f:
        f.attrs["workload"] = plan.workload.spec
        f.attrs["method"] = plan.method
        f.attrs["answers_written"] = True
        g = new_group(f, "views")
        put(g, "answer_offsets", offsets)
        put(g, "answers", np.concatenate(answers))
        put(g, "variances", np.concatenate(variances))
    return {"views": len(answers), "queries": int(offsets[-1]), "answers_written": True}


def released_answers(plan: MarginalsPlan, answers_path, views=None):
    with open_h5(answers_path, "answers") as f:
        offs, answers, variances = f["views/answer_offsets"][()], f["views/answers"], f["views/variances"]
        for i in range(len(plan.workload.views)) if views is None else views:
            yield plan.workload.views[i], answers[offs[i]:offs[i + 1]], variances[offs[i]:offs[i + 1]]


_M = __name__
KIND = PlanKind(FILE_KIND, f"{_M}:MarginalsPlan", False, save=f"{_M}:save", load=f"{_M}:load", check=f"{_M}:check",
                measure_to_file=f"{_M}:measure_to_file", reconstruct_to_file=f"{_M}:reconstruct_to_file",
                released_answers=f"{_M}:released_answers")
