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

Every method works the same way: each step calls the operations of the plan's kind
(:mod:`querysmasher.plankinds`: ``check``, ``measure_to_file``, ``reconstruct_to_file``,
``released_answers``, ``save``, ``load``), never asks which kind it is. A release is held as the
measurements file its kind writes (:class:`FileRelease`, in memory) and answered from the files its
kind's reconstruct writes; the residual kind (kind ``plan``: qs, rp, rpplus, wff, mm) also has
in-memory stages (:mod:`querysmasher.measure`, :mod:`querysmasher.reconstruct`), which its releases
use (:class:`ResidualRelease`): their vectors stay at hand and a table over any attributes whose
residual views are measured comes with variances known from the plan alone. A plan made here holds
its mechanisms as its plan file does (:meth:`ResidualRelease.plan_form`), so a release saved with
it fits the plan loaded from that file.
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
from .plankinds import kind_of
from .threads import limited

__all__ = ["make_plan", "measure", "reconstruct", "Measurable", "Release", "ResidualRelease", "FileRelease", "Answers",
           "save", "load", "budget"]

log = logging.getLogger(__name__)


def budget(*, beta: float | None = None, rho: float | None = None, mu: float | None = None,
           epsilon: float | None = None, delta: float | None = None):
    """A :class:`~querysmasher.accounting.Budget` from one of beta, rho (zCDP), mu (GDP) or epsilon
    (with delta); delta alone sets the delta at which epsilon is reported. Default beta = 1.

    >>> budget(rho=0.5).beta, budget(epsilon=1.0, delta=1e-6).source
    (1.0, 'epsilon-delta')
    """
    from .accounting import make_budget

    return make_budget(beta=beta, rho=rho, mu=mu, epsilon=epsilon, delta=delta)


class Measurable:
    """A plan record of any kind with the next step as a method: :func:`make_plan` and :func:`load`
    give each plan the class ``Measurable<Record>``, derived from its record's class (it stays an
    instance of it, of its kind); the library modules themselves never depend on this one."""

    _record: type  # the record class it derives from

    def measure(self, data, *, seed: int | None = None, sampler: str | None = None, domain=None,
                on_invalid: str = "error") -> Release:
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
        cls = _MEASURABLE[record] = type(f"Measurable{record.__name__}", (Measurable, record),
                                         {"__module__": __name__, "__doc__": record.__doc__, "_record": record})
    plan.__class__ = cls
    return plan


def _unpickled(record: type, state: dict):
    plan = record.__new__(record)
    plan.__dict__.update(state)
    return _measurable(plan)


class Release:
    """A plan's measurements (what :func:`measure` and :func:`load` give): ``plan`` (None until
    attached), ``seeded`` (noise from a fixed seed: experiments only), ``plan_sha256`` (the digest
    of the plan file it was made with), ``reconstruct()`` and ``save(path)`` (the command line's
    measurements file). Held by :class:`ResidualRelease` (the residual kind's, in memory) or
    :class:`FileRelease` (any kind's, as its measurements file)."""

    def reconstruct(self, *, threads: int = 1) -> Answers:
        """Answers to every workload query with their variances."""
        return reconstruct(self, threads=threads)


def _release_type(plan) -> type[Release]:
    """How a release of ``plan`` is held: in memory for the residual kind, whose stages run in memory
    (module docstring); as its measurements file for every other kind, and when no plan is known."""
    return ResidualRelease if isinstance(plan, Plan) else FileRelease


def _measured_form(plan):
    """``plan`` as this module measures and answers it: a plan made or loaded here already is; any
    other in the form its release takes (``plan_form``). A copy made for that carries the digest of
    the plan's own file, which loads in that form."""
    if isinstance(plan, Measurable):
        return plan
    form = _release_type(plan).plan_form(plan)
    if form is not plan:
        form._sha256 = _plan_sha256(plan)
    return form


@dataclasses.dataclass(eq=False, repr=False)
class ResidualRelease(Measurements, Release):
    """The release of a residual plan: its :class:`~querysmasher.measure.Measurements`, which know
    the plan that made them."""

    plan: Plan | None = None

    def __repr__(self) -> str:
        of = f" of {self.plan.method} on {self.plan.workload.spec}" if self.plan is not None else ""
        return f"Release({len(self.view_index)} measured views{of}{', seeded' if self.seeded else ''})"

    @staticmethod
    def plan_form(plan: Plan) -> Plan:
        """``plan`` with each mechanism as its plan file stores it (written by
        :func:`querysmasher.planfile.write_solution` and read back, one at a time): a small dense X
        is stored by its eigenpairs, a lowrank mechanism measuring other values (as many as its
        rank), so a release measured with the dense X would not fit the plan loaded from the file."""
        import h5py

        from .planfile import read_solution, write_solution

        solutions = {}
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "solution.h5"
            for key, sol in plan.solutions.items():
                with h5py.File(path, "w") as f:
                    write_solution(f.create_group("s"), sol)
                with h5py.File(path, "r") as f:
                    solutions[key] = read_solution(f["s"], sol.mechanism.sizes)
        # its own timings and notes: what the copy computes later leaves the given plan as it was
        return dataclasses.replace(plan, solutions=solutions, phase_seconds=dict(plan.phase_seconds),
                                   notes=list(plan.notes))

    @classmethod
    def measured(cls, plan: Plan, records, noise) -> ResidualRelease:
        from .measure import measure as measure_records

        meas = measure_records(plan, records, noise, seeded=noise.seeded)
        return cls(meas.view_index, meas.y, meas.seeded, meas.plan_sha256, meas.sampler, plan)

    @classmethod
    def read(cls, path, plan: Plan, plan_sha256: str | None) -> ResidualRelease:
        """The measurements file at ``path`` (its vectors read on demand), checked against
        ``plan_sha256`` when known and against the plan's measured views (one finite vector each)."""
        from .measure import load_measurements

        meas = load_measurements(path, plan_sha256, plan)
        return cls(meas.view_index, meas.y, meas.seeded, meas.plan_sha256, meas.sampler, plan)

    def save(self, path) -> None:
        from .measure import save_measurements

        if self.plan is None:
            raise InputError("measurements", "plan", "are not attached to a plan")
        digest = self.plan_sha256 or _plan_sha256(self.plan)
        vectors = zip((int(i) for i in self.view_index), self.y)
        save_measurements(path, self.plan, vectors, seeded=self.seeded, plan_sha256=digest, sampler=self.sampler)


class FileRelease(Release):
    """The release of a plan of any kind as its measurements file (what ``querysmasher measure``
    writes), held in memory: written by the kind's ``measure_to_file``, answered through its
    ``reconstruct_to_file``."""

    def __init__(self, plan, content: bytes, seeded: bool, plan_sha256: str):
        self.plan = plan
        self.content = content
        self.seeded = seeded
        self.plan_sha256 = plan_sha256

    def __repr__(self) -> str:
        of = f" of {self.plan.method} on {self.plan.workload.spec}" if self.plan is not None else ""
        return f"Release(measurements{of}: {len(self.content)} bytes{', seeded' if self.seeded else ''})"

    @staticmethod
    def plan_form(plan):
        """``plan`` itself: its kind's operations measure and answer it as they are given it."""
        return plan

    @classmethod
    def measured(cls, plan, records, noise) -> FileRelease:
        digest = _plan_sha256(plan)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "measurements.h5"
            kind_of(plan).op("measure_to_file")(plan, records, noise, path, plan_sha256=digest)
            return cls(plan, path.read_bytes(), noise.seeded, digest)

    @classmethod
    def read(cls, path, plan, plan_sha256: str | None) -> FileRelease:
        """The measurements file at ``path``, checked against ``plan_sha256`` when known (the kind's
        reconstruct checks every vector against the plan)."""
        from . import h5read as r
        from .io import open_h5

        with open_h5(path, "measurements") as f, r.h5py_errors(path, "measurements file"):
            digest, seeded = r.text(f, "plan_sha256"), r.flag(f, "seeded")
        if plan_sha256 is not None and digest != plan_sha256:
            raise InputError("measurements file", str(path), "was made with a different plan (plan_sha256 differs)")
        return cls(plan, Path(path).read_bytes(), seeded, digest)

    def save(self, path) -> None:
        _write_bytes(path, self.content)


def _write_bytes(path, content: bytes) -> None:
    from .atomic import atomic_path, check_output

    check_output(path, "output file")
    with atomic_path(path) as tmp:
        tmp.write_bytes(content)


def make_plan(schema, workload, method: str = "qs", budget=None, *, beta: float | None = None,
              rho: float | None = None, mu: float | None = None, epsilon: float | None = None,
              delta: float | None = None, neighbours: str | None = None, noise: str = "gaussian",
              objective: str = "sum", options: dict | None = None, solver_options: dict | None = None,
              all_numeric: bool = False, threads: int = 1):
    """Optimise the mechanism of a workload: :func:`querysmasher.planning.make_plan` (every method
    of the method table, every objective, budget as a Budget or as one keyword). Returns the
    planner's plan record with ``.measure`` (:class:`Measurable`), whatever its kind, holding its
    mechanisms as its plan file does (module docstring).
    ``threads``: for numerical work (default 1; more solves that many views at a time,
    :mod:`querysmasher.threads`), for this call only.
    """
    from .planning import make_plan as plan_workload

    with limited(threads):
        plan = plan_workload(schema, workload, method, budget, beta=beta, rho=rho, mu=mu, epsilon=epsilon, delta=delta,
                             neighbours=neighbours, noise=noise, objective=objective, options=options,
                             solver_options=solver_options, all_numeric=all_numeric)
        return _measurable(_release_type(plan).plan_form(plan))


def _records(plan, data, *, domain=None, on_invalid: str = "error"):
    from .data import Records, load_records, validate_records

    if isinstance(data, Records):
        return data
    if isinstance(data, (str, os.PathLike)):
        return load_records(data, plan.schema, domain_file=domain, on_invalid=on_invalid)
    if domain is not None:
        raise InputError("domain", domain, "applies to data files only; encode a DataFrame's values first")
    return validate_records(data, plan.schema, on_invalid=on_invalid)


def measure(plan, data, *, seed: int | None = None, sampler: str | None = None, domain=None, on_invalid: str = "error",
            threads: int = 1) -> Release:
    """Run the mechanisms of a plan of any kind on records (a pandas DataFrame with one integer-code
    column per attribute, a CSV/Parquet path, or :class:`~querysmasher.data.Records`): the release.

    The privacy cost and estimability are re-checked before the records are read (the kind's
    ``check``). Noise comes from OpenDP's floating-point-safe sampler with the operating system's
    entropy; ``seed`` switches to numpy's seeded generator for experiments only (the release is then
    marked as seeded); see :func:`querysmasher.noise.make_noise`. ``threads``: for numerical work
    (default 1)."""
    from .data import warn_dropped
    from .measure import check_plan
    from .noise import make_noise

    plan = _measured_form(plan)
    check_plan(plan)  # the kind's check: privacy cost, noise scales, estimability
    noise = make_noise(seed, sampler)
    records = _records(plan, data, domain=domain, on_invalid=on_invalid)
    warn_dropped(records)
    if noise.seeded:
        log.warning("fixed noise seed: this release is for experiments only")
    with limited(threads):
        return _release_type(plan).measured(plan, records, noise)


class _ResidualAnswers:
    """The residual kind's answers in memory (:mod:`querysmasher.reconstruct`): a table over any
    attributes whose residual views are measured, variances known from the plan alone."""

    def __init__(self, plan: Plan, measurements: Measurements):
        from .reconstruct import reconstruct

        self.plan = plan
        self.reconstruction = reconstruct(plan, measurements)

    def view(self, index: int):
        from .variances import view_variances

        v = self.plan.workload.views[index]
        return self.reconstruction.view_answers(v), view_variances(self.plan, v)

    def table(self, idx: tuple[int, ...]):
        import itertools

        import numpy as np

        from .fulldomain import is_full_domain_plan
        from .variances import query_variances, view_variances
        from .workload import WorkloadView

        plan = self.plan
        position = {v: i for i, v in enumerate(plan.views)}
        # a full-domain plan (mm) answers every table from its one view, a residual one from the views under it
        subsets = [s for r in range(len(idx) + 1) for s in itertools.combinations(idx, r)]
        needed = plan.views if is_full_domain_plan(plan) else subsets
        for sub in needed:
            i = position.get(sub)
            if i is None or not np.isfinite(plan.allocation.sigma2[i]):
                names = [plan.schema.names[a] for a in sub] or ["(total)"]
                raise InputError("table", ",".join(plan.schema.names[a] for a in idx),
                                 f"is not answered by this plan: residual view {'x'.join(names)} is not measured")
        if idx:
            variance = view_variances(plan, WorkloadView(idx, "marginal", 1.0, ("marginal",) * len(idx)))
        else:
            variance = query_variances(plan, (), np.ones((1, 1)))
        return self.reconstruction.table(idx), variance

    def save(self, path) -> dict:
        from .reconstruct import save_answers

        return save_answers(path, self.reconstruction)


class _AnswerFiles:
    """The answers of a release of any kind, read back from what its kind's reconstruct writes: the
    answers file (every workload view's answers, and variances where the kind gives them) and, for
    a kind with per-view tables, the CSV tables (:mod:`querysmasher.tablefiles`)."""

    reconstruction = None  # no in-memory reconstruction: the files are the answers

    def __init__(self, plan, release: FileRelease):
        import numpy as np

        from .reconstruct import reconstruct_plan_to_file, released_answers
        from .tablefiles import check_table_columns

        self.plan = plan
        digest = _plan_sha256(plan)  # the kind's reconstruct refuses measurements made with another plan
        self.no_tables = None if kind_of(plan).per_view_tables else f"{plan.method} answers have no per-view tables"
        if self.no_tables is None:
            try:
                check_table_columns(plan.schema)
            except InputError as exc:
                self.no_tables = str(exc)
        with tempfile.TemporaryDirectory() as tmp:
            measurements, out, csv = Path(tmp) / "measurements.h5", Path(tmp) / "answers.h5", Path(tmp) / "tables"
            measurements.write_bytes(release.content)
            self.info = reconstruct_plan_to_file(plan, measurements, out, plan_sha256=digest,
                                                 csv_dir=None if self.no_tables else csv)
            self.content = out.read_bytes()
            self.views = [(np.asarray(a, dtype=np.float64), None if v is None else np.asarray(v, dtype=np.float64))
                          for _, a, v in released_answers(plan, out)]
            self.tables = {} if self.no_tables else _read_tables(plan.schema, csv)

    def view(self, index: int):
        return self.views[index]

    def table(self, idx: tuple[int, ...]):
        names = ",".join(self.plan.schema.names[a] for a in idx)
        table = self.tables.get(idx)
        if isinstance(table, tuple):
            return table
        # a workload view that is the marginal on these attributes answers exactly their cells, row-major
        for k, v in enumerate(self.plan.workload.views):
            if v.attrs == idx and v.factors == ("marginal",) * len(idx):
                return self.views[k]
        if table is not None:
            raise InputError("table", names, f"is not given by this release: {table}")
        why = self.no_tables or "its tables are those of the workload's views"
        raise InputError("table", names, f"is not a table of this release ({why}); view(i) gives every workload "
                                         "view's answers")

    def save(self, path) -> dict:
        _write_bytes(path, self.content)
        return dict(self.info)


def _read_tables(schema, folder: Path) -> dict:
    """{attrs: (estimates, variances) or why it is omitted} of the CSV tables in ``folder`` (its
    ``tables.json`` index; a variance is the square of the written standard error)."""
    import json

    import pandas as pd

    out = {}
    for entry in json.loads((folder / "tables.json").read_text())["tables"]:
        attrs = tuple(schema.names.index(name) for name in entry["view"])
        if entry["file"] is None:
            out[attrs] = entry["omitted"]
        else:
            frame = pd.read_csv(folder / entry["file"])
            out[attrs] = (frame["estimate"].to_numpy(), frame["std_error"].to_numpy() ** 2)
    return out


class Answers:
    """Answers to a workload from one release, with their variances (known from the plan alone).

    ``view(i)`` is every query of workload view ``i`` (``plan.workload.views[i]``), ``table(attrs)``
    the reconstructed marginal table over some attributes; both are DataFrames with an ``estimate``
    column and a ``variance`` column (none where the kind gives no variances: HDMM). The estimates
    are unbiased. A residual plan's release answers a table over any attributes whose residual views
    are measured; any other kind's, the tables of its workload's views where it has per-view tables
    (and a workload view that is the marginal on those attributes). ``save(path)`` writes the
    answers file of ``querysmasher reconstruct``.
    """

    def __init__(self, plan, measurements, *, threads: int = 1):
        self.plan = plan
        self.measurements = measurements
        source = _AnswerFiles if isinstance(measurements, FileRelease) else _ResidualAnswers
        with limited(threads):
            self._source = source(plan, measurements)

    @property
    def reconstruction(self):
        """The residual kind's in-memory :class:`~querysmasher.reconstruct.Reconstruction` (None for
        answers read from a kind's files)."""
        return self._source.reconstruction

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
                    raise InputError("attribute", a, f"is not in schema {self.plan.schema.name!r} "
                                                     f"({', '.join(names)})")
                out.append(names.index(a))
            elif not 0 <= int(a) < len(names):
                raise InputError("attribute", a, f"is not an index of schema {self.plan.schema.name!r} "
                                                 f"(0..{len(names) - 1})")
            else:
                out.append(int(a))
        return tuple(sorted(set(out)))

    def table(self, attrs: str | int | Sequence[str | int]):
        """The marginal table over ``attrs`` (names or indices): one row per cell, the attribute
        codes, ``estimate`` and ``variance`` (class docstring: which tables a release gives)."""
        import numpy as np
        import pandas as pd

        idx = self._attrs(attrs)
        estimate, variance = self._source.table(idx)
        names, sizes = self.plan.schema.names, self.plan.schema.sizes
        codes = np.indices(tuple(sizes[a] for a in idx)).reshape(len(idx), -1) if idx else np.zeros((0, 1), dtype=int)
        frame = pd.DataFrame({names[a]: codes[k] for k, a in enumerate(idx)})
        frame["estimate"] = estimate
        if variance is not None:
            frame["variance"] = variance
        return frame

    def view(self, index: int):
        """Every query of workload view ``index`` (``plan.workload.views[index]``): estimate, variance."""
        import pandas as pd

        answers, variances = self._source.view(index)
        frame = pd.DataFrame({"estimate": answers})
        if variances is not None:
            frame["variance"] = variances
        return frame

    def save(self, path) -> dict:
        """Write the answers file (see ``querysmasher reconstruct``); returns its summary."""
        return self._source.save(path)


def reconstruct(measurements: Release | Measurements, plan=None, *, threads: int = 1) -> Answers:
    """Answers from a release (its plan is the one that measured it, unless given); ``threads``:
    for numerical work (default 1)."""
    plan = _measured_form(plan) if plan is not None else getattr(measurements, "plan", None)
    if plan is None:
        raise InputError("measurements", "plan", "are not attached to a plan: load them with qs.load(path, plan=...)")
    return Answers(plan, measurements, threads=threads)


def _plan_sha256(plan) -> str:
    """Digest of the plan's file (as saved or loaded; else of the file it would be saved as)."""
    from .measure import plan_digest
    from .planfiles import save_any_plan

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
    from .measure import plan_digest
    from .planfiles import is_plan, save_any_plan

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
    from .io import read_kind
    from .measure import plan_digest
    from .planfiles import load_any_plan
    from .plankinds import PLAN_KINDS

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
        return _release_type(plan).read(path, plan, getattr(plan, "_sha256", None))
    raise InputError("file", str(path), f"holds a {kind!r}; qs.load reads plan and measurements files")
