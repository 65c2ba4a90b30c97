"""Workloads: unions of weighted query families on attribute subsets.

Grammar: terms joined by ``+``; a term is one of

- ``FAMILY[opts]:K1,K2@WEIGHT``: the family on every K-subset of the schema's attributes;
- ``FAMILY[opts]:(a,b),(c)@WEIGHT``: the family on the named attribute subsets only;
- ``custom:FILE@WEIGHT``: explicit queries from a file.

``[opts]`` and ``@WEIGHT`` are optional; ``[opts]`` is ``key=value`` pairs (``random`` takes
``seed``, default 0). A workload spec may also be the path of a workload file (``.yaml``/``.yml``/
``.json``, :func:`workload_file_spec`): a list of terms, each a mapping with ``family``, ``k`` or
``attributes``, and optional ``weight``, ``options`` (``path`` for ``custom``).

>>> from querysmasher.schema import parse_schema
>>> w = parse_workload("prefix:1+affine:2", parse_schema("synthetic:n=10,d=40"))
>>> w.query_count(), len(w.views)
(15220, 820)
>>> w = parse_workload("hybrid:1+affine:(age,income)+marginal:(sex,age)@2", parse_schema("cps"))
>>> w.spec, w.query_count()
('hybrid:1+affine:(income,age)+marginal:(age,sex)@2', 512)

Views are enumerated (there are at most tens of thousands); queries never are.
"""

from __future__ import annotations

import itertools
import math
import re
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import InputError
from .families import BASIC_1D, FAMILIES, PAIR_FAMILIES, count_1d, pair_count
from .schema import Schema

__all__ = [
    "FamilyTerm",
    "WorkloadView",
    "Workload",
    "parse_workload",
    "CustomQueries",
    "load_custom",
    "WORKLOAD_FILE_SUFFIXES",
    "is_workload_file",
    "workload_file_spec",
    "workload_input_files",
    "MIN_WEIGHT",
    "MAX_WEIGHT",
    "check_weight",
    "format_weight",
    "MAX_CUSTOM_BYTES",
]

_TERM = re.compile(r"^(?P<family>[a-z]+)(?:\[(?P<opts>[^\]]*)\])?:(?P<body>[^@]+?)(?:@(?P<weight>[^@()]+))?$")
_SUBSET = re.compile(r"\(([^()]*)\)")
_NAME_FORBIDDEN = set("(),+@[]")
WORKLOAD_FILE_SUFFIXES: tuple[str, ...] = (".yaml", ".yml", ".json")
_FILE_KEYS = ("family", "k", "attributes", "weight", "options", "path")
# Query weights scale Grams and variances, and enter squared (HDMM's Laplace strategies), as square
# roots and as reciprocals (strategies, the allocation): inside this range all of those stay normal
# floats with room for the Grams' own scales (from 1.5e-154 a square underflows; a weight of 5e-324
# ended in a traceback). Weights are kept exactly: see :func:`format_weight`.
MIN_WEIGHT, MAX_WEIGHT = 1e-100, 1e100


@dataclass(frozen=True)
class CustomQueries:
    """Explicit queries over a named attribute subset (cells row-major in schema order)."""

    attributes: tuple[str, ...]
    queries: np.ndarray


# The most a custom query file may hold, as float64: its arrays are read whole. JSON files are read up
# to this size; an .npz member's header is checked before its array is read (a header claiming
# 10^7 x 10^7 queries asked for 728 TiB, a MemoryError).
MAX_CUSTOM_BYTES = 1 << 30
_NPY_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _check_npz_sizes(z, path: str) -> None:
    """Refuse an .npz whose members' headers claim more than :data:`MAX_CUSTOM_BYTES` (as float64)."""
    for member in z.zip.namelist():
        with z.zip.open(member) as fp:
            reader = _NPY_HEADER_READERS.get(np.lib.format.read_magic(fp))
            if reader is None:
                raise InputError("custom workload file", path, f"member {member!r} is not a .npy array (format 1 or 2)")
            shape, _, dtype = reader(fp)
        claimed = math.prod(shape) * max(dtype.itemsize, 8)
        if claimed > MAX_CUSTOM_BYTES:
            raise InputError(
                "custom workload file",
                path,
                f"member {member!r} claims shape {shape}: {claimed:,} bytes as float64, above {MAX_CUSTOM_BYTES:,}",
            )


def load_custom(path: str) -> CustomQueries:
    """Read a ``custom`` family file: ``.npz`` with arrays ``attributes`` and ``queries``, or JSON
    ``{"attributes": [...], "queries": [[...], ...]}``; either at most :data:`MAX_CUSTOM_BYTES`."""
    p = Path(path)
    if not p.is_file():
        raise InputError("custom workload file", path, "does not exist")
    try:
        if p.suffix == ".npz":
            with np.load(p, allow_pickle=False) as z:
                _check_npz_sizes(z, path)
                attrs, q = tuple(str(a) for a in z["attributes"]), np.asarray(z["queries"], dtype=float)
        else:
            from .documents import parse_json, read_text  # optional

            text = read_text(p, "custom workload file", max_bytes=MAX_CUSTOM_BYTES)
            d = parse_json(text, f"custom workload file {path}")
            attrs, q = tuple(str(a) for a in d["attributes"]), np.asarray(d["queries"], dtype=float)
    except InputError:
        raise
    except (zipfile.BadZipFile, zlib.error) as exc:  # a damaged .npz (neither is an OSError)
        what = f"{type(exc).__name__}: {exc}"
        raise InputError("custom workload file", path, f"is not a readable .npz ({what})") from None
    except (KeyError, ValueError, TypeError, OSError) as exc:
        raise InputError("custom workload file", path, f"needs 'attributes' and 'queries' ({exc})") from None
    if q.ndim != 2 or not np.isfinite(q).all():
        raise InputError("custom workload file", path, "'queries' must be a finite 2-D array (queries x cells)")
    return CustomQueries(attrs, q)


@dataclass(frozen=True)
class FamilyTerm:
    """One ``+``-separated term of a workload spec: a family on every K-subset (``ks``) or on the
    named attribute subsets (``subsets``, names in schema order)."""

    family: str
    ks: tuple[int, ...] = ()
    weight: float = 1.0
    seed: int = 0
    path: str = ""
    subsets: tuple[tuple[str, ...], ...] = ()

    def spec(self) -> str:
        if self.family == "custom":
            s = f"custom:{self.path}"
        else:
            opts = f"[seed={self.seed}]" if self.family == "random" else ""
            body = (
                ",".join(f"({','.join(sub)})" for sub in self.subsets) if self.subsets else ",".join(map(str, self.ks))
            )
            s = f"{self.family}{opts}:{body}"
        return s if self.weight == 1.0 else f"{s}@{format_weight(self.weight)}"


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
    source: str = field(default="", compare=False)  # the workload file it was read from, if any

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


# Errors name the spec, or -- for long specs and workload files -- the term and where it came from.
_Fail = Callable[[str], InputError]


def _failer(spec: str, term: str, where: str = "") -> _Fail:
    if where:
        return lambda reason: InputError(where, term, reason)
    if len(spec) > 120:
        return lambda reason: InputError("workload term", term, reason)
    return lambda reason: InputError("workload", spec, reason)


def _parse_ks(text: str, fail: _Fail, d: int) -> tuple[int, ...]:
    ks = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise fail(f"K must be a positive integer or a list of named subsets such as (a,b), got {part!r}")
        k = int(part)
        if k < 1 or k > d:
            raise fail(f"K = {k} must be between 1 and the number of attributes ({d})")
        ks.append(k)
    return tuple(sorted(set(ks)))


def _parse_subsets(text: str, fail: _Fail, schema: Schema) -> tuple[tuple[str, ...], ...]:
    """``(a,b),(c)`` -> subsets of attribute names in schema order; unknown names fail."""
    groups = _SUBSET.findall(text)
    if not groups or "".join(text.split()) != ",".join("(" + "".join(g.split()) + ")" for g in groups):
        raise fail(f"{text!r} is not a list of attribute subsets such as (a,b),(c,d)")
    subsets: list[tuple[str, ...]] = []
    for g in groups:
        names = [n.strip() for n in g.split(",")]
        if not all(names):
            raise fail(f"subset ({g}) has an empty attribute name")
        for n in names:
            if n not in schema.names:
                raise fail(f"unknown attribute {n!r} (schema {schema.name!r} has: {', '.join(schema.names)})")
        if len(set(names)) != len(names):
            raise fail(f"subset ({g}) names an attribute twice")
        sub = tuple(sorted(names, key=schema.index))
        if sub in subsets:
            raise fail(f"subset ({','.join(sub)}) appears twice")
        subsets.append(sub)
    return tuple(subsets)


def _parse_term(text: str, fail: _Fail, schema: Schema) -> FamilyTerm:
    text = text.strip()
    if text.startswith("custom:"):
        path, _, w = text[len("custom:") :].partition("@")
        return FamilyTerm("custom", (), check_weight(w, fail) if w else 1.0, path=path)
    m = _TERM.match(text)
    if not m:
        raise fail(f"term {text!r} is not FAMILY:K1,K2[@WEIGHT] (e.g. prefix:1,2) or FAMILY:(a,b)[@WEIGHT]")
    family = m.group("family")
    if family not in FAMILIES:
        raise fail(f"unknown family {family!r} (known: {', '.join(FAMILIES)})")
    seed = 0
    if m.group("opts"):
        for opt in m.group("opts").split(","):
            key, _, val = opt.partition("=")
            if family != "random" or key.strip() != "seed":
                raise fail(f"option {opt!r} is not allowed for {family} (random takes seed=INT)")
            if not val.strip().isdigit():
                raise fail(f"option {opt!r}: the seed must be an integer >= 0")
            seed = int(val)
    body = m.group("body").strip()
    weight = check_weight(m.group("weight"), fail) if m.group("weight") else 1.0
    if body.startswith("("):
        subsets = _parse_subsets(body, fail, schema)
        if family in PAIR_FAMILIES and any(len(sub) != 2 for sub in subsets):
            bad = next(sub for sub in subsets if len(sub) != 2)
            raise fail(f"{family} is a two-way family: name two attributes, got ({','.join(bad)})")
        return FamilyTerm(family, (), weight, seed, subsets=subsets)
    ks = _parse_ks(body, fail, len(schema))
    if family in PAIR_FAMILIES and ks != (2,):
        raise fail(f"{family} is a two-way family: write {family}:2")
    return FamilyTerm(family, ks, weight, seed)


def check_weight(value, fail: _Fail) -> float:
    """``value`` -- a number, or text written as one (a term's ``@WEIGHT``, a quoted ``"1e-6"`` in a
    document) -- as a weight in [:data:`MIN_WEIGHT`, :data:`MAX_WEIGHT`]; else ``fail(reason)``.

    >>> check_weight("2.5", ValueError), check_weight(10**6, ValueError)
    (2.5, 1000000.0)
    >>> check_weight("5e-324", ValueError)
    Traceback (most recent call last):
        ...
    ValueError: weight '5e-324' must be a positive number in [1e-100, 1e+100]
    """
    from .documents import NUMBER_PATTERN  # loads yaml only where it is used

    if isinstance(value, str):
        if not NUMBER_PATTERN.match(value.strip()):
            raise fail(f"weight {value!r} is not a number")
        w = float(value)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(f"weight {value!r} is not a number")
    else:
        w = value  # a Python int is compared exactly: one of 400 digits has no float
    if not MIN_WEIGHT <= w <= MAX_WEIGHT:  # nan fails too
        raise fail(f"weight {value!r} must be a positive number in [{MIN_WEIGHT:g}, {MAX_WEIGHT:g}]")
    return float(w)


def format_weight(weight: float) -> str:
    """The shortest text that reads back as exactly ``weight`` (a plan file re-parses its workload
    from its spec), without the grammar's ``+`` (``1e+06`` would split into two terms).

    >>> [format_weight(w) for w in (2.0, 1e6, 1e20, 0.1, 1.23456789, 1e-07)]
    ['2', '1000000', '1e20', '0.1', '1.23456789', '1e-07']
    """
    text = repr(float(weight)).replace("e+", "e")
    return text[:-2] if text.endswith(".0") else text


def _split_terms(spec: str) -> list[str]:
    """Split at ``+`` outside parentheses and brackets."""
    terms, depth, start = [], 0, 0
    for i, c in enumerate(spec):
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "+" and depth == 0:
            terms.append(spec[start:i])
            start = i + 1
    terms.append(spec[start:])
    return terms


# ----------------------------------------------------------------------------- workload files


def is_workload_file(spec: str) -> bool:
    """Whether a workload spec names a workload file (by its suffix; the file may be missing)."""
    text = str(spec).strip()
    return not re.match(r"^[a-z]+(?:\[[^\]]*\])?:", text) and text.lower().endswith(WORKLOAD_FILE_SUFFIXES)


def _file_term(entry: object, where: str, base: Path) -> str:
    """One entry of a workload file as a term of the grammar."""

    def fail(reason: str) -> InputError:
        return InputError(where, entry, reason)

    if not isinstance(entry, dict):
        raise fail("must be a mapping with 'family' and 'k' or 'attributes'")
    unknown = sorted(set(map(str, entry)) - set(_FILE_KEYS) - {"K"})
    if unknown:
        raise fail(f"unknown key {unknown[0]!r} (allowed: {', '.join(_FILE_KEYS)})")
    family = entry.get("family")
    if not isinstance(family, str) or family not in FAMILIES:
        raise fail(f"family {family!r} is not one of {', '.join(FAMILIES)}")
    weight = check_weight(entry.get("weight", 1.0), fail)
    suffix = "" if weight == 1.0 else f"@{format_weight(weight)}"
    options = entry.get("options") or {}
    if not isinstance(options, dict):
        raise fail("options must be a mapping (random takes seed)")
    if family == "custom":
        path = entry.get("path")
        if not isinstance(path, str) or not path or set(entry) - {"family", "path", "weight"}:
            raise fail("a custom term has 'path' (relative to the workload file) and optional 'weight' only")
        p = Path(path)
        return f"custom:{p if p.is_absolute() else base / p}{suffix}"
    if "path" in entry:
        raise fail("only custom terms have a 'path'")
    bad_opts = sorted(set(map(str, options)) - ({"seed"} if family == "random" else set()))
    if bad_opts:
        raise fail(f"option {bad_opts[0]!r} is not allowed for {family} (random takes seed)")
    opts = ""
    if "seed" in options:
        seed = options["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise fail(f"option seed {seed!r} must be an integer >= 0")
        opts = f"[seed={seed}]"
    k = entry.get("k", entry.get("K"))
    attrs = entry.get("attributes")
    if (k is None) == (attrs is None):
        raise fail("give exactly one of 'k' (all K-subsets) and 'attributes' (named subsets)")
    if k is not None:
        ks = k if isinstance(k, list) else [k]
        if not ks or any(isinstance(x, bool) or not isinstance(x, int) for x in ks):
            raise fail(f"k {k!r} must be an integer or a list of integers")
        body = ",".join(map(str, ks))
    else:
        if not isinstance(attrs, list) or not attrs:
            raise fail("attributes must be a list of names or a list of lists of names")
        subsets = attrs if all(isinstance(a, list) for a in attrs) else [attrs]
        for sub in subsets:
            for name in sub:
                if not isinstance(name, str) or not name or _NAME_FORBIDDEN & set(name):
                    raise fail(f"attribute name {name!r} must be a non-empty string without any of ( ) , + @ [ ]")
        body = ",".join(f"({','.join(sub)})" for sub in subsets)
    return f"{family}{opts}:{body}{suffix}"


def _file_entries(path: str) -> list:
    from .documents import read_document  # loads yaml only where it is used

    data = read_document(path, "workload file")
    if isinstance(data, dict) and set(data) <= {"terms", "description"}:
        data = data.get("terms")
    if not isinstance(data, list) or not data:
        raise InputError("workload file", path, "must hold a non-empty list of terms (or a mapping with 'terms')")
    return data


def workload_file_spec(path: str) -> str:
    """The grammar spec of a workload file (each entry checked, errors name the file and entry).

    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
    ...     _ = f.write("- {family: hybrid, k: 1}\\n- {family: affine, attributes: [income, age], weight: 2}\\n")
    >>> workload_file_spec(f.name)
    'hybrid:1+affine:(income,age)@2'
    >>> os.unlink(f.name)
    """
    base = Path(path).parent
    return "+".join(
        _file_term(e, f"workload file {path} term {i + 1}", base) for i, e in enumerate(_file_entries(path))
    )


def workload_input_files(spec: str) -> list[str]:
    """Files a workload spec reads: the workload file itself and every custom query file."""
    files: list[str] = []
    if is_workload_file(spec):
        files.append(str(spec).strip())
        if not Path(files[0]).is_file():
            return files
        spec = workload_file_spec(files[0])
    for term in _split_terms(spec):
        term = term.strip()
        if term.startswith("custom:"):
            files.append(term[len("custom:") :].partition("@")[0])
    return files


def parse_workload(spec: str, schema: Schema, custom: dict[str, CustomQueries] | None = None) -> Workload:
    """Parse a workload spec (or the path of a workload file) against a schema and enumerate its views.

    ``custom`` supplies already-loaded ``custom`` files by path (a plan file carries them). A
    workload file's terms are checked one by one, and errors name the file and the entry.
    """
    if not spec or not str(spec).strip():
        raise InputError("workload", spec, "is empty")
    spec = str(spec).strip()
    source = ""
    if is_workload_file(spec):
        source = spec
        entries = _file_entries(spec)
        base = Path(spec).parent
        texts = [_file_term(e, f"workload file {spec} term {i + 1}", base) for i, e in enumerate(entries)]
        terms = tuple(
            _parse_term(t, _failer("", t, f"workload file {spec} term {i + 1}"), schema) for i, t in enumerate(texts)
        )
    else:
        terms = tuple(_parse_term(t, _failer(spec, t.strip()), schema) for t in _split_terms(spec))
    views: list[WorkloadView] = []
    custom = dict(custom or {})
    for ti, t in enumerate(terms):
        if t.family == "custom":
            cq = custom.setdefault(t.path, load_custom(t.path))
            attrs = tuple(sorted(schema.index(a) for a in cq.attributes))
            if len(set(attrs)) != len(attrs):
                raise InputError("custom workload file", t.path, "names an attribute twice")
            if [schema.names[i] for i in attrs] != list(cq.attributes):
                raise InputError(
                    "custom workload file",
                    t.path,
                    f"attributes must be in schema order: {[schema.names[i] for i in attrs]}",
                )
            cells = math.prod(schema.sizes[i] for i in attrs)
            if cq.queries.shape[1] != cells:
                raise InputError(
                    "custom workload file",
                    t.path,
                    f"queries have {cq.queries.shape[1]} columns, the view has {cells} cells",
                )
            views.append(WorkloadView(attrs, "custom", t.weight, term=ti))
            continue
        if t.subsets:
            subsets = [tuple(schema.index(n) for n in sub) for sub in t.subsets]
        else:
            subsets = [a for k in t.ks for a in itertools.combinations(range(len(schema)), k)]
        for attrs in subsets:
            if t.family in BASIC_1D:
                factors = (t.family,) * len(attrs)
            elif t.family == "hybrid":
                factors = tuple("marginal" if schema.kinds[i] == "categorical" else "prefix" for i in attrs)
            else:
                factors = ()
            views.append(WorkloadView(attrs, t.family, t.weight, factors, t.seed, ti))
    return Workload(schema, terms, tuple(views), custom, source)
