"""The notebook path: plan, measure, reconstruct and files in a few calls, any method (re-exported by the root).

>>> import numpy as np, pandas as pd
>>> import querysmasher as qs
>>> plan = qs.make_plan("synthetic:n=4,d=3", "prefix:1,2", method="rp", rho=0.5)
>>> plan
Plan(rp, prefix:1,2 over synthetic:n=4,d=3: RMSE 2.401, 7 residual views, 3 distinct solves, beta 1)
>>> rng = np.random.default_rng(0)
>>> records = pd.DataFrame(rng.integers(0, 4, (200, 3)), columns=plan.schema.names)
>>> release = plan.measure(records)       # noise from the operating system's entropy
>>> release
Release(7 measurements of rp on prefix:1,2)
>>> answers = release.reconstruct()
>>> t = answers.table(("a0", "a1"))      # a DataFrame: codes, estimate, variance, 95% interval
>>> list(t.columns), len(t)
(['a0', 'a1', 'estimate', 'variance', 'lower', 'upper'], 16)
>>> round(float(t.variance.mean()), 3)   # known from the plan alone
3.595
>>> import tempfile, os
>>> folder = tempfile.mkdtemp()
>>> qs.save(plan, os.path.join(folder, "plan.h5")); qs.save(release, os.path.join(folder, "release.h5"))
>>> again = qs.load(os.path.join(folder, "release.h5"), plan=os.path.join(folder, "plan.h5"))
>>> bool(np.allclose(again.reconstruct().table("a0").estimate, answers.table("a0").estimate))
True

Every method works the same way, through the one measurement model: a plan's kind
(:mod:`querysmasher.plankinds`) says what it measures and how its answers and variances are
estimated, and the stages (:mod:`querysmasher.measure`, :mod:`querysmasher.reconstruct`) do the
rest; nothing here asks which kind it is. A release holds its noisy vectors in memory (or reads
them on demand from a loaded file). A plan made here holds its mechanisms as its plan file does
(its kind's ``file_form``), so a release saved with it fits the plan loaded from that file.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from . import data as record_data  # its functions looked up when called (tests check that none reads records)
from .accounting import make_budget
from .errors import InputError
from .intervals import DEFAULT_CONFIDENCE, bounds, check_confidence, is_gaussian, multiplier
from .measurement import Measurements
from .noise import make_noise
from .plankinds import PLAN_KINDS, kind_of
from .planning import make_plan as plan_workload
from .threads import limited

__all__ = ["make_plan", "measure", "reconstruct", "Measurable", "Release", "Answers", "save", "load", "budget"]

log = logging.getLogger(__name__)


def budget(
    *,
    beta: float | None = None,
    rho: float | None = None,
    mu: float | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
):
    """A :class:`~querysmasher.accounting.Budget` from one of beta, rho (zCDP), mu (GDP) or epsilon
    (with delta); delta alone sets the delta at which epsilon is reported. Default beta = 1.

    >>> budget(rho=0.5).beta, budget(epsilon=1.0, delta=1e-6).source
    (1.0, 'epsilon-delta')
    """
    return make_budget(beta=beta, rho=rho, mu=mu, epsilon=epsilon, delta=delta)


class Measurable:
    """A plan record of any kind with the next step as a method: :func:`make_plan` and :func:`load`
    give each plan the class ``Measurable<Record>``, derived from its record's class (it stays an
    instance of it, of its kind); the library modules themselves never depend on this one."""

    _record: type  # the record class it derives from

    def measure(
        self, data, *, seed: int | None = None, sampler: str | None = None, domain=None, on_invalid: str = "error"
    ) -> Release:
        """The release: this plan's mechanisms run on records (see :func:`measure`)."""
        return measure(self, data, seed=seed, sampler=sampler, domain=domain, on_invalid=on_invalid)

    def __reduce__(self):
        # pickled as its record (a class importable by name), made measurable again when unpickled
        return _unpickled, (self._record, self.__dict__)


_MEASURABLE: dict[type, type] = {}  # record class -> its Measurable class, made once


def _measurable(plan):
    """``plan`` (a record of a registered kind, an InputError otherwise) with ``.measure``: its
    class becomes its record class's Measurable class."""
    if isinstance(plan, Measurable):
        return plan
    kind_of(plan)
    record = type(plan)
    cls = _MEASURABLE.get(record)
    if cls is None:
        cls = _MEASURABLE[record] = type(
            f"Measurable{record.__name__}",
            (Measurable, record),
            {"__module__": __name__, "__doc__": record.__doc__, "_record": record},
        )
    plan.__class__ = cls
    return plan


def _unpickled(record: type, state: dict):
    plan = record.__new__(record)
    plan.__dict__.update(state)
    return _measurable(plan)


@dataclasses.dataclass(eq=False, repr=False)
class Release(Measurements):
    """A plan's measurements (what :func:`measure` and :func:`load` give), of any kind:
    :class:`~querysmasher.measurement.Measurements` that know the plan that made them (``plan``,
    None until attached). ``reconstruct()`` answers them, ``save(path)`` writes the command
    line's measurements file, ``to_mbi()`` gives them to Private-PGM."""

    plan: object = None

    def __repr__(self) -> str:
        of = f" of {self.plan.method} on {self.plan.workload.spec}" if self.plan is not None else ""
        return f"Release({len(self.index)} measurements{of}{', seeded' if self.seeded else ''})"

    def reconstruct(self, *, threads: int = 1) -> Answers:
        """Answers to every workload query with their variances."""
        return reconstruct(self, threads=threads)

    def to_mbi(self):
        """The measurements for Private-PGM (``mbi``, an optional extra): an
        :class:`~querysmasher.mbi_export.MbiExport` with its ``domain``, ``measurements`` and
        ``total`` (post-processing: reads no record)."""
        from .mbi_export import to_mbi  # loads mbi and jax only where they are used

        if self.plan is None:
            raise InputError("measurements", "plan", "are not attached to a plan")
        return to_mbi(self.plan, self)

    def save(self, path) -> None:
        from .measure import save_measurements  # loads h5py only where it is used

        if self.plan is None:
            raise InputError("measurements", "plan", "are not attached to a plan")
        digest = self.plan_sha256 or _plan_sha256(self.plan)
        save_measurements(
            path,
            self.plan,
            zip((int(i) for i in self.index), self.y),
            seeded=self.seeded,
            plan_sha256=digest,
            sampler=self.sampler,
        )


def _measured_form(plan):
    """``plan`` as this module measures and answers it: a plan made or loaded here already is; any
    other in the form its plan file holds (its kind's ``file_form``). A copy made for that carries
    the digest of the plan's own file, which loads in that form."""
    if isinstance(plan, Measurable):
        return plan
    kind = kind_of(plan)
    form = kind.op("file_form")(plan) if kind.file_form else plan
    if form is not plan:
        form._sha256 = _plan_sha256(plan)
    return form


def make_plan(
    schema,
    workload,
    method: str = "qs",
    budget=None,
    *,
    beta: float | None = None,
    rho: float | None = None,
    mu: float | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    neighbours: str | None = None,
    noise: str = "gaussian",
    objective: str = "sum",
    options: dict | None = None,
    solver_options: dict | None = None,
    all_numeric: bool = False,
    threads: int = 1,
):
    """Optimise the mechanism of a workload: :func:`querysmasher.planning.make_plan` (every method
    of the method table, every objective, budget as a Budget or as one keyword). Returns the
    planner's plan record with ``.measure`` (:class:`Measurable`), whatever its kind, holding its
    mechanisms as its plan file does (module docstring).
    ``threads``: for numerical work (default 1; more solves that many views at a time,
    :mod:`querysmasher.threads`), for this call only.
    """
    with limited(threads):
        plan = plan_workload(
            schema,
            workload,
            method,
            budget,
            beta=beta,
            rho=rho,
            mu=mu,
            epsilon=epsilon,
            delta=delta,
            neighbours=neighbours,
            noise=noise,
            objective=objective,
            options=options,
            solver_options=solver_options,
            all_numeric=all_numeric,
        )
        kind = kind_of(plan)
        return _measurable(kind.op("file_form")(plan) if kind.file_form else plan)


def _records(plan, data, *, domain=None, on_invalid: str = "error"):
    if isinstance(data, record_data.Records):
        return data
    if isinstance(data, (str, os.PathLike)):
        return record_data.load_records(data, plan.schema, domain_file=domain, on_invalid=on_invalid)
    if domain is not None:
        raise InputError("domain", domain, "applies to data files only; encode a DataFrame's values first")
    return record_data.validate_records(data, plan.schema, on_invalid=on_invalid)


def measure(
    plan,
    data,
    *,
    seed: int | None = None,
    sampler: str | None = None,
    domain=None,
    on_invalid: str = "error",
    threads: int = 1,
) -> Release:
    """Run the mechanisms of a plan of any kind on records (a pandas DataFrame with one integer-code
    column per attribute, a CSV/Parquet path, or :class:`~querysmasher.data.Records`): the release.

    The privacy cost and estimability are re-checked before the records are read (the kind's
    ``check``). Noise comes from OpenDP's floating-point-safe sampler with the operating system's
    entropy; ``seed`` switches to numpy's seeded generator for experiments only (the release is then
    marked as seeded); see :func:`querysmasher.noise.make_noise`. ``threads``: for numerical work
    (default 1)."""
    from .measure import check_plan  # loads h5py only where it is used
    from .measure import measure as measure_records

    plan = _measured_form(plan)
    check_plan(plan)  # privacy cost, noise scales, estimability: before the records are read
    noise = make_noise(seed, sampler)
    records = _records(plan, data, domain=domain, on_invalid=on_invalid)
    record_data.warn_dropped(records)
    if noise.seeded:
        log.warning("fixed noise seed: this release is for experiments only")
    with limited(threads):
        meas = measure_records(plan, records, noise, seeded=noise.seeded)
    return Release(meas.index, meas.y, meas.seeded, "", meas.sampler, plan)


class Answers:
    """Answers to a workload from one release, with their variances (known from the plan alone).

    ``view(i)`` is every query of workload view ``i`` (``plan.workload.views[i]``), ``table(attrs)``
    the reconstructed marginal table over some attributes; both are DataFrames with an ``estimate``
    column, a ``variance`` column and the confidence interval's ``lower`` and ``upper`` bounds at
    ``confidence`` (default 0.95; exact under Gaussian noise, :mod:`querysmasher.intervals`; none
    where the kind gives no variances: HDMM). The estimates are unbiased. A release answers a table
    over any attributes whose cells its measurements estimate (a residual plan: every attribute set
    whose residual views are measured at full rank), or that a workload view gives as its marginal
    queries. ``save(path)`` writes the answers file
    of ``querysmasher reconstruct``.
    """

    def __init__(self, plan, measurements, *, threads: int = 1):
        from .reconstruct import reconstruct as estimates  # loads h5py, numpy only where it is used
        from .reconstruct import variances_of

        self.plan = plan
        self.measurements = measurements
        self.threads = threads
        with limited(threads):
            self.reconstruction = estimates(plan, measurements)  # the kind's estimates (computed on demand)
        self.variances = variances_of(plan)

    def __repr__(self) -> str:
        p = self.plan
        return f"Answers({p.method}, {p.workload.spec} over {p.schema.name}: {len(p.workload.views)} workload views)"

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
                raise InputError(
                    "attribute", a, f"is not an index of schema {self.plan.schema.name!r} (0..{len(names) - 1})"
                )
            else:
                out.append(int(a))
        return tuple(sorted(set(out)))

    def _interval(self, frame, variance, confidence: float):
        """``variance`` and the interval's bounds at ``confidence`` added to ``frame`` (its ``estimate``)."""
        if variance is None:
            return frame
        z = multiplier(check_confidence(confidence), gaussian=is_gaussian(self.plan))
        frame["variance"] = variance
        _, frame["lower"], frame["upper"] = bounds(frame["estimate"], variance, z)
        return frame

    def table(self, attrs: str | int | Sequence[str | int], confidence: float = DEFAULT_CONFIDENCE):
        """The marginal table over ``attrs`` (names or indices): one row per cell, the attribute
        codes, ``estimate``, ``variance`` and the interval at ``confidence`` (class docstring: which
        tables a release gives)."""
        import pandas as pd  # loads pandas only where it is used

        idx = self._attrs(attrs)
        with limited(self.threads):
            estimate, variance = self._table(idx)
        names, sizes = self.plan.schema.names, self.plan.schema.sizes
        codes = np.indices(tuple(sizes[a] for a in idx)).reshape(len(idx), -1) if idx else np.zeros((0, 1), dtype=int)
        frame = pd.DataFrame({names[a]: codes[k] for k, a in enumerate(idx)})
        frame["estimate"] = estimate
        return self._interval(frame, variance, confidence)

    def view(self, index: int, confidence: float = DEFAULT_CONFIDENCE):
        """Every query of workload view ``index`` (``plan.workload.views[index]``): estimate, variance
        and the interval at ``confidence``."""
        import pandas as pd  # loads pandas only where it is used

        v = self.plan.workload.views[index]
        with limited(self.threads):
            answers, variances = self.reconstruction.view_answers(v), self.variances.view(v)
        return self._interval(pd.DataFrame({"estimate": answers}), variances, confidence)

    def save(self, path) -> dict:
        """Write the answers file (see ``querysmasher reconstruct``); returns its summary."""
        from .reconstruct import save_answers  # loads h5py, numpy only where it is used

        with limited(self.threads):
            return save_answers(path, self.reconstruction, self.variances)

    def _table(self, idx: tuple[int, ...]):
        """(estimates, variances) of the table on ``idx``: its cells where they are estimable, else
        a workload view that is the marginal on these attributes (its queries are the cells)."""
        variance, why = self.variances.cells(idx)
        if variance is not None:
            return self.reconstruction.table(idx), variance
        for v in self.plan.workload.views:
            if v.attrs == idx and v.factors == ("marginal",) * len(idx):
                return self.reconstruction.view_answers(v), self.variances.view(v)
        names = ",".join(self.plan.schema.names[a] for a in idx) or "(total)"
        raise InputError(
            "table", names, f"is not given by this release: {why}; view(i) gives every workload view's answers"
        )


def reconstruct(measurements: Release | Measurements, plan=None, *, threads: int = 1) -> Answers:
    """Answers from a release (its plan is the one that measured it, unless given); ``threads``:
    for numerical work (default 1)."""
    plan = _measured_form(plan) if plan is not None else getattr(measurements, "plan", None)
    if plan is None:
        raise InputError("measurements", "plan", "are not attached to a plan: load them with qs.load(path, plan=...)")
    return Answers(plan, measurements, threads=threads)


def _plan_sha256(plan) -> str:
    """Digest of the plan's file (as saved or loaded; else of the file it would be saved as)."""
    from .measure import plan_digest  # loads h5py only where it is used
    from .planfiles import save_any_plan  # loads h5py only where it is used

    digest = getattr(plan, "_sha256", None)
    if digest:
        return digest
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plan.h5"
        save_any_plan(plan, path)
        return plan_digest(path)


def save(obj, path) -> None:
    """Write a plan of any kind (``plan.h5``), a release or Answers to ``path``, in the same formats
    as the command line, atomically."""
    from .measure import plan_digest  # loads h5py only where it is used
    from .planfiles import is_plan, save_any_plan  # loads h5py only where it is used

    if isinstance(obj, (Release, Answers)):
        obj.save(path)
    elif isinstance(obj, Measurements):
        raise InputError("measurements", "plan", "are not attached to a plan")
    elif is_plan(obj):
        save_any_plan(obj, path)
        obj._sha256 = plan_digest(path)
    else:
        raise InputError("save", type(obj).__name__, "is not a plan, a release or Answers")


def load(path, *, plan=None):
    """Read a plan file (of any kind: a plan with ``.measure``) or a measurements file. Measurements
    are attached to ``plan`` (a plan or a plan file), which must be the plan they were made with
    (checked by its digest when known)."""
    from .io import read_kind  # loads h5py only where it is used
    from .measure import load_measurements, plan_digest  # loads h5py only where it is used
    from .planfiles import load_any_plan  # loads h5py only where it is used

    if not Path(path).is_file():
        raise InputError("file", str(path), "does not exist")
    kind = read_kind(path)
    if kind in PLAN_KINDS:
        p = _measurable(load_any_plan(path))
        p._sha256 = plan_digest(path)
        return p
    if kind == "measurements":
        if isinstance(plan, (str, os.PathLike)):
            plan = load(plan)
        if plan is not None:
            kind_of(plan)  # a plan, not another file's content
            plan = _measured_form(plan)
        meas = load_measurements(path, getattr(plan, "_sha256", None), plan)
        return Release(meas.index, meas.y, meas.seeded, meas.plan_sha256, meas.sampler, plan)
    raise InputError("file", str(path), f"holds a {kind!r}; qs.load reads plan and measurements files")
