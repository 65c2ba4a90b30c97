"""Workloads: unions of weighted query families on attribute subsets.

Grammar: terms joined by ``+``; a term is ``FAMILY[opts]:K1,K2@WEIGHT`` (``[opts]`` and ``@WEIGHT``
optional) meaning the family on every K-subset of the schema's attributes, or ``custom:FILE@WEIGHT``.
``[opts]`` is ``key=value`` pairs; ``random`` takes ``seed`` (default 0).

>>> from querysmasher.schema import parse_schema
>>> w = parse_workload("prefix:1+affine:2", parse_schema("synthetic:n=10,d=40"))
>>> w.query_count(), len(w.views)
(15220, 820)

Views are enumerated (there are at most tens of thousands); queries never are.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import InputError
from .families import BASIC_1D, FAMILIES, PAIR_FAMILIES, count_1d, pair_count
from .schema import Schema

__all__ = ["FamilyTerm", "WorkloadView", "Workload", "parse_workload", "CustomQueries", "load_custom"]

_TERM = re.compile(r"^(?P<family>[a-z]+)(?:\[(?P<opts>[^\]]*)\])?:(?P<ks>[^@]+?)(?:@(?P<weight>[^@]+))?$")


@dataclass(frozen=True)
class CustomQueries:
    """Explicit queries over a named attribute subset (cells row-major in schema order)."""

    attributes: tuple[str, ...]
    queries: np.ndarray


def load_custom(path: str) -> CustomQueries:
    """Read a ``custom`` family file: ``.npz`` with arrays ``attributes`` and ``queries``, or JSON
    ``{"attributes": [...], "queries": [[...], ...]}``."""
    p = Path(path)
    if not p.is_file():
        raise InputError("custom workload file", path, "does not exist")
    try:
        if p.suffix == ".npz":
            with np.load(p, allow_pickle=False) as z:
                attrs, q = tuple(str(a) for a in z["attributes"]), np.asarray(z["queries"], dtype=float)
        else:
            d = json.loads(p.read_text())
            attrs, q = tuple(d["attributes"]), np.asarray(d["queries"], dtype=float)
    except (KeyError, ValueError, OSError) as exc:
        raise InputError("custom workload file", path, f"needs 'attributes' and 'queries' ({exc})") from None
    if q.ndim != 2 or not np.isfinite(q).all():
        raise InputError("custom workload file", path, "'queries' must be a finite 2-D array (queries x cells)")
    return CustomQueries(attrs, q)


@dataclass(frozen=True)
class FamilyTerm:
    """One ``+``-separated term of a workload spec."""

    family: str
    ks: tuple[int, ...] = ()
    weight: float = 1.0
    seed: int = 0
    path: str = ""

    def spec(self) -> str:
        if self.family == "custom":
            s = f"custom:{self.path}"
        else:
            opts = f"[seed={self.seed}]" if self.family == "random" else ""
            s = f"{self.family}{opts}:{','.join(map(str, self.ks))}"
        return s if self.weight == 1.0 else f"{s}@{self.weight:g}"


@dataclass(frozen=True)
class WorkloadView:
    """The queries of one family on one attribute subset (a workload view)."""

    attrs: tuple[int, ...]
    family: str  # product families are resolved per attribute in ``factors``
    weight: float
    factors: tuple[str, ...] = ()  # 1-D family per attribute (product families only)
    seed: int = 0
    term: int = 0  # index of the FamilyTerm it came from

    @property
    def is_product(self) -> bool:
        return bool(self.factors)


@dataclass(frozen=True)
class Workload:
    schema: Schema
    terms: tuple[FamilyTerm, ...]
    views: tuple[WorkloadView, ...] = field(repr=False)
    custom: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def spec(self) -> str:
        return "+".join(t.spec() for t in self.terms)

    def view_count(self, v: WorkloadView) -> int:
        """Number of queries of one workload view."""
        sizes = [self.schema.sizes[i] for i in v.attrs]
        if v.factors:
            return math.prod(count_1d(f, n) for f, n in zip(v.factors, sizes))
        if v.family in PAIR_FAMILIES:
            return pair_count(v.family, *sizes)
        if v.family == "random":
            return 3 * math.prod(sizes)
        if v.family == "custom":
            return int(self.custom[self.terms[v.term].path].queries.shape[0])
        raise AssertionError(v.family)

    def query_count(self, weighted: bool = False) -> float:
        """Total number of queries (with ``weighted``, each counted ``weight`` times)."""
        return sum(self.view_count(v) * (v.weight if weighted else 1) for v in self.views)

    def distinct_view_attrs(self) -> list[tuple[int, ...]]:
        return sorted({v.attrs for v in self.views}, key=lambda a: (len(a), a))


def _parse_ks(text: str, spec: str, d: int) -> tuple[int, ...]:
    ks = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise InputError("workload", spec, f"K must be a positive integer, got {part!r}")
        k = int(part)
        if k < 1 or k > d:
            raise InputError("workload", spec, f"K = {k} must be between 1 and the number of attributes ({d})")
        ks.append(k)
    return tuple(sorted(set(ks)))


def _parse_term(text: str, spec: str, d: int) -> FamilyTerm:
    text = text.strip()
    if text.startswith("custom:"):
        path, _, w = text[len("custom:"):].partition("@")
        return FamilyTerm("custom", (), _parse_weight(w, spec) if w else 1.0, path=path)
    m = _TERM.match(text)
    if not m:
        raise InputError("workload", spec, f"term {text!r} is not FAMILY:K1,K2[@WEIGHT] (e.g. prefix:1,2)")
    family = m.group("family")
    if family not in FAMILIES:
        raise InputError("workload", spec, f"unknown family {family!r} (known: {', '.join(FAMILIES)})")
    seed = 0
    if m.group("opts"):
        for opt in m.group("opts").split(","):
            key, _, val = opt.partition("=")
            if family != "random" or key.strip() != "seed" or not val.strip().lstrip("-").isdigit():
                raise InputError("workload", spec, f"option {opt!r} is not allowed for {family} (random takes seed=INT)")
            seed = int(val)
    ks = _parse_ks(m.group("ks"), spec, d)
    if family in PAIR_FAMILIES and ks != (2,):
        raise InputError("workload", spec, f"{family} is a two-way family: write {family}:2")
    weight = _parse_weight(m.group("weight"), spec) if m.group("weight") else 1.0
    return FamilyTerm(family, ks, weight, seed)


def _parse_weight(text: str, spec: str) -> float:
    try:
        w = float(text)
    except ValueError:
        raise InputError("workload", spec, f"weight {text!r} is not a number") from None
    if not (w > 0 and math.isfinite(w)):
        raise InputError("workload", spec, f"weight {text!r} must be a positive number")
    return w


def parse_workload(spec: str, schema: Schema, custom: dict[str, CustomQueries] | None = None) -> Workload:
    """Parse a workload spec against a schema and enumerate its views.

    ``custom`` supplies already-loaded ``custom`` files by path (a plan file carries them).
    """
    if not spec or not spec.strip():
        raise InputError("workload", spec, "is empty")
    terms = tuple(_parse_term(t, spec, len(schema)) for t in spec.split("+"))
    views: list[WorkloadView] = []
    custom = dict(custom or {})
    for ti, t in enumerate(terms):
        if t.family == "custom":
            cq = custom.setdefault(t.path, load_custom(t.path))
            attrs = tuple(sorted(schema.index(a) for a in cq.attributes))
            if len(set(attrs)) != len(attrs):
                raise InputError("custom workload file", t.path, "names an attribute twice")
            if [schema.names[i] for i in attrs] != list(cq.attributes):
                raise InputError("custom workload file", t.path, f"attributes must be in schema order: {[schema.names[i] for i in attrs]}")
            cells = math.prod(schema.sizes[i] for i in attrs)
            if cq.queries.shape[1] != cells:
                raise InputError("custom workload file", t.path, f"queries have {cq.queries.shape[1]} columns, the view has {cells} cells")
            views.append(WorkloadView(attrs, "custom", t.weight, term=ti))
            continue
        for k in t.ks:
            for attrs in itertools.combinations(range(len(schema)), k):
                if t.family in BASIC_1D:
                    factors = (t.family,) * k
                elif t.family == "hybrid":
                    factors = tuple("marginal" if schema.kinds[i] == "categorical" else "prefix" for i in attrs)
                else:
                    factors = ()
                views.append(WorkloadView(attrs, t.family, t.weight, factors, t.seed, ti))
    return Workload(schema, terms, tuple(views), custom)
