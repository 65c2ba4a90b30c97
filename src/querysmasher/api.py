"""The notebook path: plan, measure, reconstruct and files in a few calls (re-exported by the root).

>>> import numpy as np, pandas as pd
>>> import querysmasher as qs
>>> plan = qs.make_plan("synthetic:n=4,d=3", "prefix:1,2", method="rp", rho=0.5)
>>> plan
Plan(rp, prefix:1,2 over synthetic:n=4,d=3: RMSE 2.401, 7 residual views, 3 distinct solves, beta 1)
>>> rng = np.random.default_rng(0)
>>> records = pd.DataFrame(rng.integers(0, 4, (200, 3)), columns=plan.schema.names)
>>> release = plan.measure(records)       # noise from the operating system's entropy
>>> release
Release(7 measured views of rp on prefix:1,2)
>>> answers = release.reconstruct()
>>> t = answers.table(("a0", "a1"))      # a DataFrame: codes, estimate, variance
>>> list(t.columns), len(t)
(['a0', 'a1', 'estimate', 'variance'], 16)
>>> round(float(t.variance.mean()), 3)   # known from the plan alone
3.595
>>> import tempfile, os
>>> folder = tempfile.mkdtemp()
>>> qs.save(plan, os.path.join(folder, "plan.h5")); qs.save(release, os.path.join(folder, "release.h5"))
>>> again = qs.load(os.path.join(folder, "release.h5"), plan=os.path.join(folder, "plan.h5"))
>>> bool(np.allclose(again.reconstruct().table("a0").estimate, answers.table("a0").estimate))
True
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .errors import InputError
from .measure import Measurements
from .plan import Plan
from .threads import limited

__all__ = ["make_plan", "measure", "reconstruct", "MeasurablePlan", "Release", "Answers", "save", "load", "budget"]

log = logging.getLogger(__name__)


def budget(*, beta: float | None = None, rho: float | None = None, mu: float | None = None, epsilon: float | None = None, delta: float | None = None):
    """A :class:`~querysmasher.accounting.Budget` from one of beta, rho (zCDP), mu (GDP) or epsilon
    (with delta); delta alone sets the delta at which epsilon is reported. Default beta = 1.

    >>> budget(rho=0.5).beta, budget(epsilon=1.0, delta=1e-6).source
    (1.0, 'epsilon-delta')
    """
    from .accounting import make_budget

    return make_budget(beta=beta, rho=rho, mu=mu, epsilon=epsilon, delta=delta)


@dataclasses.dataclass(eq=False, repr=False)
class MeasurablePlan(Plan):
    """A :class:`~querysmasher.plan.Plan` with the next step as a method (what this module returns;
    the library modules themselves never depend on this one)."""

    def measure(self, data, *, seed: int | None = None, sampler: str | None = None, domain=None, on_invalid: str = "error") -> Release:
        """The release: this plan's mechanisms run on records (see :func:`measure`)."""
        return measure(self, data, seed=seed, sampler=sampler, domain=domain, on_invalid=on_invalid)


@dataclasses.dataclass(eq=False, repr=False)
class Release(Measurements):
    """:class:`~querysmasher.measure.Measurements` that know the plan that made them."""

    plan: Plan | None = None

    def __repr__(self) -> str:
        of = f" of {self.plan.method} on {self.plan.workload.spec}" if self.plan is not None else ""
        return f"Release({len(self.view_index)} measured views{of}{', seeded' if self.seeded else ''})"

    def reconstruct(self) -> Answers:
        """Answers to every workload query with their variances."""
        return reconstruct(self)


def _measurable(plan: Plan) -> MeasurablePlan:
    if isinstance(plan, MeasurablePlan) or not isinstance(plan, Plan):
        return plan
    out = MeasurablePlan(**{f.name: getattr(plan, f.name) for f in dataclasses.fields(Plan)})
    if getattr(plan, "_sha256", None):
        out._sha256 = plan._sha256
    return out


def _release(meas: Measurements, plan: Plan | None) -> Release:
    return Release(meas.view_index, meas.y, meas.seeded, meas.plan_sha256, plan)


def make_plan(schema, workload, method: str = "qs", budget=None, *, beta: float | None = None, rho: float | None = None, mu: float | None = None,
              epsilon: float | None = None, delta: float | None = None, neighbours: str | None = None, noise: str = "gaussian",
              objective: str = "sum", options: dict | None = None, solver_options: dict | None = None, all_numeric: bool = False,
              threads: int = 1):
    """Optimise the mechanism of a workload: :func:`querysmasher.planning.make_plan` (every method
    of the method table, every objective, budget as a Budget or as one keyword). Returns a
    :class:`MeasurablePlan` (a Plan with ``.measure``), or the planner's own plan (HDMM).
    ``threads``: for numerical work (default 1; more solves that many views at a time,
    :mod:`querysmasher.threads`), for this call only.
    """
    from .planning import make_plan as plan_workload

    with limited(threads):
        plan = plan_workload(schema, workload, method, budget, beta=beta, rho=rho, mu=mu, epsilon=epsilon, delta=delta,
                             neighbours=neighbours, noise=noise, objective=objective, options=options,
                             solver_options=solver_options, all_numeric=all_numeric)
    return _measurable(plan)


def _records(plan, data, *, domain=None, on_invalid: str = "error"):
    from .data import Records, load_records, validate_records

    if isinstance(data, Records):
        return data
    if isinstance(data, (str, os.PathLike)):
        return load_records(data, plan.schema, domain_file=domain, on_invalid=on_invalid)
    if domain is not None:
        raise InputError("domain", domain, "applies to data files only; encode a DataFrame's values first")
    return validate_records(data, plan.schema, on_invalid=on_invalid)


def measure(plan: Plan, data, *, seed: int | None = None, sampler: str | None = None, domain=None, on_invalid: str = "error", threads: int = 1) -> Release:
    """Run the plan's mechanisms on records (a pandas DataFrame with one integer-code column per
    attribute, a CSV/Parquet path, or :class:`~querysmasher.data.Records`): the release.

    The privacy cost and estimability are re-checked before the records are read. Noise comes from OpenDP's
    floating-point-safe sampler with the operating system's entropy; ``seed`` switches to numpy's
    seeded generator for experiments only (the release is then marked as seeded); see
    :func:`querysmasher.noise.make_noise`. ``threads``: for numerical work (default 1)."""
    from .data import warn_dropped
    from .measure import check_plan
    from .measure import measure as measure_records
    from .noise import make_noise

    check_plan(plan)  # the kind's check: privacy cost, noise scales, estimability
    noise = make_noise(seed, sampler)
    records = _records(plan, data, domain=domain, on_invalid=on_invalid)
    warn_dropped(records)
    if noise.seeded:
        log.warning("fixed noise seed: this release is for experiments only")
    with limited(threads):
        return _release(measure_records(plan, records, noise, seeded=noise.seeded), plan)


class Answers:
    """Answers to a workload from one release, with their variances (known from the plan alone).

    ``table(attrs)`` is the reconstructed marginal table over some attributes, ``view(i)`` the
    answers to every query of workload view ``i``; both are DataFrames with an ``estimate`` and a
    ``variance`` column. The estimates are unbiased.
    """

    def __init__(self, plan, measurements, *, threads: int = 1):
        from .reconstruct import reconstruct

        self.plan = plan
        self.measurements = measurements
        with limited(threads):
            self.reconstruction = reconstruct(plan, measurements)

    def __repr__(self) -> str:
        p = self.plan
        return f"Answers({p.method}, {p.workload.spec} over {p.schema.name}: {len(p.workload.views)} workload views, {len(self.measurements.view_index)} measured residual views)"

    def _attrs(self, attrs) -> tuple[int, ...]:
        names = self.plan.schema.names
        if isinstance(attrs, (str, int)):
            attrs = (attrs,)
        out = []
        for a in attrs:
            if isinstance(a, str):
                if a not in names:
                    raise InputError("attribute", a, f"is not in schema {self.plan.schema.name!r} ({', '.join(names)})")
                out.append(names.index(a))
            elif not 0 <= int(a) < len(names):
                raise InputError("attribute", a, f"is not an index of schema {self.plan.schema.name!r} (0..{len(names) - 1})")
            else:
                out.append(int(a))
        return tuple(sorted(set(out)))

    def table(self, attrs: str | int | Sequence[str | int]):
        """The marginal table over ``attrs`` (names or indices): one row per cell, the attribute
        codes, ``estimate`` and ``variance``. Every residual view under ``attrs`` must be measured
        (it is whenever ``attrs`` lies within one workload view)."""
        import itertools

        import numpy as np
        import pandas as pd

        from .variances import query_variances, view_variances
        from .workload import WorkloadView

        idx = self._attrs(attrs)
        plan = self.plan
        position = {v: i for i, v in enumerate(plan.views)}
        for r in range(len(idx) + 1):
            for sub in itertools.combinations(idx, r):
                i = position.get(sub)
                if i is None or not np.isfinite(plan.allocation.sigma2[i]):
                    names = [plan.schema.names[a] for a in sub] or ["(total)"]
                    raise InputError("table", ",".join(plan.schema.names[a] for a in idx), f"is not answered by this plan: residual view {'x'.join(names)} is not measured")
        sizes = tuple(plan.schema.sizes[a] for a in idx)
        if idx:
            variance = view_variances(plan, WorkloadView(idx, "marginal", 1.0, ("marginal",) * len(idx)))
        else:
            variance = query_variances(plan, (), np.ones((1, 1)))
        codes = np.indices(sizes).reshape(len(idx), -1) if idx else np.zeros((0, 1), dtype=int)
        frame = pd.DataFrame({plan.schema.names[a]: codes[k] for k, a in enumerate(idx)})
        frame["estimate"] = self.reconstruction.table(idx)
        frame["variance"] = variance
        return frame

    def view(self, index: int):
        """Every query of workload view ``index`` (``plan.workload.views[index]``): estimate, variance."""
        import pandas as pd

        from .variances import view_variances

        v = self.plan.workload.views[index]
        return pd.DataFrame({"estimate": self.reconstruction.view_answers(v), "variance": view_variances(self.plan, v)})

    def save(self, path) -> dict:
        """Write the answers file (per-view tables, answers and variances); see ``querysmasher reconstruct``."""
        from .reconstruct import save_answers

        return save_answers(path, self.reconstruction)


def reconstruct(measurements, plan=None, *, threads: int = 1) -> Answers:
    """Answers from a release (its plan is the one that measured it, unless given); ``threads``:
    for numerical work (default 1)."""
    plan = plan if plan is not None else getattr(measurements, "plan", None)
    if plan is None:
        raise InputError("measurements", "plan", "are not attached to a plan: load them with qs.load(path, plan=...)")
    return Answers(plan, measurements, threads=threads)


def _plan_sha256(plan) -> str:
    """Digest of the plan's file (as saved or loaded; else of the file it would be saved as)."""
    from .measure import plan_digest
    from .planfile import save_plan

    digest = getattr(plan, "_sha256", None)
    if digest:
        return digest
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plan.h5"
        save_plan(plan, path)
        return plan_digest(path)


def save(obj, path) -> None:
    """Write a plan of any kind (``plan.h5``), Measurements (the release) or Answers to ``path``,
    in the same formats as the command line, atomically."""
    from .measure import plan_digest, save_measurements
    from .planfiles import is_plan, save_any_plan

    if isinstance(obj, Measurements):
        plan = getattr(obj, "plan", None)
        if plan is None:
            raise InputError("measurements", "plan", "are not attached to a plan")
        digest = obj.plan_sha256 or _plan_sha256(plan)
        save_measurements(path, plan, zip((int(i) for i in obj.view_index), obj.y), seeded=obj.seeded, plan_sha256=digest)
    elif isinstance(obj, Answers):
        obj.save(path)
    elif is_plan(obj):
        save_any_plan(obj, path)
        if isinstance(obj, Plan):
            obj._sha256 = plan_digest(path)
    else:
        raise InputError("save", type(obj).__name__, "is not a plan, Measurements or Answers")


def load(path, *, plan=None):
    """Read a plan or measurements file. Measurements are attached to ``plan`` (a Plan or a plan
    file), which must be the plan they were made with (checked by its digest when known)."""
    from .io import read_kind
    from .measure import load_measurements, plan_digest
    from .planfiles import load_any_plan
    from .plankinds import PLAN_KINDS

    if not Path(path).is_file():
        raise InputError("file", str(path), "does not exist")
    kind = read_kind(path)
    if kind in PLAN_KINDS:
        p = _measurable(load_any_plan(path))
        if isinstance(p, Plan):
            p._sha256 = plan_digest(path)
        return p
    if kind == "measurements":
        if isinstance(plan, (str, os.PathLike)):
            plan = load(plan)
        digest = getattr(plan, "_sha256", None) if plan is not None else None
        return _release(load_measurements(path, digest), plan)
    raise InputError("file", str(path), f"holds a {kind!r}; qs.load reads plan and measurements files")
