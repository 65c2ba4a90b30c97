"""Data schemas: ordered attributes with a domain size and a kind.

Built-in schemas carry the paper's domain sizes (§8.4, §8.5); a schema can also be read from a
YAML/JSON file (``{name: size}`` or ``{name: {size: .., kind: ..}}``) or made synthetic.

>>> s = parse_schema("cps")
>>> s.names
('income', 'age', 'marital', 'race', 'sex')
>>> s.sizes
(50, 100, 7, 4, 2)
>>> parse_schema("synthetic:n=10,d=3").sizes
(10, 10, 10)
"""

from __future__ import annotations

import math
import re
import sys
import unicodedata
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

from .errors import InputError

__all__ = [
    "Attribute",
    "Schema",
    "parse_schema",
    "BUILTIN_SCHEMAS",
    "MAX_ATTRIBUTE_SIZE",
    "check_attribute_sizes",
    "check_attribute_name",
    "check_encoding",
]

# Planning forms n x n matrices per attribute (Grams, mechanism factors): 5,000 is 200 MB each.
MAX_ATTRIBUTE_SIZE = 5000

Kind = Literal["categorical", "numeric"]
KINDS: tuple[str, ...] = ("categorical", "numeric")


# The workload grammar's own characters (``marginal:(a,b)+prefix:(c)@2``): a name holding one would
# be read back as other attributes when a plan file re-parses its workload.
GRAMMAR_CHARACTERS = frozenset("(),+@[]")
MAX_NAME_LENGTH = 200


def check_attribute_name(name) -> None:
    """Refuse (InputError naming it) an attribute name that is not a non-empty string of at most
    :data:`MAX_NAME_LENGTH` printable characters without surrounding spaces or the workload
    grammar's characters ``( ) , + @ [ ]``. Names are data: :mod:`querysmasher.filenames` makes
    file names of them, whatever else (``/``, ``..``) they hold.

    >>> check_attribute_name("income>50K"), check_attribute_name("../x")
    (None, None)
    >>> check_attribute_name("a,b")
    Traceback (most recent call last):
        ...
    querysmasher.errors.InputError: attribute name 'a,b': must not hold any of ( ) , + @ [ ] (the workload grammar's characters)
    """  # noqa: E501  (a doctest's expected output is one line)
    if not isinstance(name, str) or not name:
        raise InputError("attribute name", name, "must be a non-empty string")
    if len(name) > MAX_NAME_LENGTH:
        raise InputError("attribute name", name[:40] + "...", f"is longer than {MAX_NAME_LENGTH} characters")
    if any(unicodedata.category(ch)[0] == "C" for ch in name):
        raise InputError("attribute name", name, "holds a control or invisible character")
    if name != name.strip():
        raise InputError("attribute name", name, "starts or ends with a space")
    if GRAMMAR_CHARACTERS & set(name):
        raise InputError(
            "attribute name", name, "must not hold any of ( ) , + @ [ ] (the workload grammar's characters)"
        )


@dataclass(frozen=True)
class Attribute:
    """One attribute: its name, domain size (values 0..size-1) and kind."""

    name: str
    size: int
    kind: Kind = "numeric"

    def __post_init__(self) -> None:
        check_attribute_name(self.name)
        if not isinstance(self.size, int) or isinstance(self.size, bool) or self.size < 1:
            raise InputError(f"size of attribute {self.name!r}", self.size, "must be an integer >= 1")
        if self.kind not in KINDS:
            raise InputError(f"kind of attribute {self.name!r}", self.kind, f"must be one of {KINDS}")


@dataclass(frozen=True)
class Schema:
    """An ordered tuple of attributes; the order fixes the cell order of every marginal."""

    name: str
    attributes: tuple[Attribute, ...]

    def __post_init__(self) -> None:
        if not self.attributes:
            raise InputError("schema", self.name, "has no attributes")
        seen: set[str] = set()
        for a in self.attributes:
            if a.name in seen:
                raise InputError("schema", self.name, f"attribute {a.name!r} appears twice")
            seen.add(a.name)

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    @cached_property  # read in every inner loop (thousands of views); the dataclass is frozen
    def sizes(self) -> tuple[int, ...]:
        return tuple(a.size for a in self.attributes)

    @cached_property
    def kinds(self) -> tuple[str, ...]:
        return tuple(a.kind for a in self.attributes)

    def __len__(self) -> int:
        return len(self.attributes)

    def index(self, name: str) -> int:
        """Position of attribute ``name``; an InputError names it when unknown."""
        try:
            return self.names.index(name)
        except ValueError:
            raise InputError(
                "attribute", name, f"not in schema {self.name!r} (attributes: {', '.join(self.names)})"
            ) from None

    def domain_cells(self) -> int:
        """Number of cells of the full domain (may be astronomically large; never materialised)."""
        return math.prod(self.sizes)

    def all_numeric(self) -> Schema:
        """The same schema with every attribute numeric (the paper's Table 3 setting)."""
        return Schema(self.name + "+numeric", tuple(Attribute(a.name, a.size, "numeric") for a in self.attributes))

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "attributes": [{"name": a.name, "size": a.size, "kind": a.kind} for a in self.attributes],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Schema:
        return cls(d["name"], tuple(Attribute(a["name"], int(a["size"]), a["kind"]) for a in d["attributes"]))


def check_attribute_sizes(schema: Schema, attrs=None, limit: int = MAX_ATTRIBUTE_SIZE) -> None:
    """Refuse (before anything is allocated) an attribute a workload uses whose size is above
    ``limit``: its n x n per-attribute matrices would not fit (size 100,000 is 74.5 GiB each).

    >>> check_attribute_sizes(parse_schema("cps"))
    """
    for i in range(len(schema)) if attrs is None else sorted(set(attrs)):
        a = schema.attributes[i]
        if a.size > limit:
            raise InputError(
                f"size of attribute {a.name!r}",
                a.size,
                f"is above {limit:,}: planning forms {a.size:,} x {a.size:,} matrices per attribute; "
                "coarsen it (fewer bins)",
            )


def _build(name: str, numeric: list[tuple[str, int]], categorical: list[tuple[str, int]]) -> Schema:
    attrs = [Attribute(n, s, "numeric") for n, s in numeric] + [Attribute(n, s, "categorical") for n, s in categorical]
    return Schema(name, tuple(attrs))


BUILTIN_SCHEMAS: dict[str, Schema] = {
    "cps": _build("cps", [("income", 50), ("age", 100)], [("marital", 7), ("race", 4), ("sex", 2)]),
    "adult": _build(
        "adult",
        [("fnlwgt", 100), ("capital-gain", 100), ("capital-loss", 100), ("hours-per-week", 99), ("age", 85)],
        [
            ("native-country", 42),
            ("education-num", 16),
            ("occupation", 15),
            ("workclass", 9),
            ("marital-status", 7),
            ("relationship", 6),
            ("race", 5),
            ("sex", 2),
            ("income>50K", 2),
        ],
    ),
    "loans": _build(
        "loans",
        [("loan_amnt", 101), ("int_rate", 101), ("annual_inc", 101), ("installment", 101)],
        [
            ("state", 51),
            ("sub_grade", 36),
            ("purpose", 15),
            ("grade", 8),
            ("home_ownership", 6),
            ("loan_status", 5),
            ("settlement_status", 4),
            ("term", 3),
        ],
    ),
}

_SYNTHETIC = re.compile(r"^synthetic:n=(\d+),d=(\d+)$")


def _is_float(x) -> bool:
    """Whether ``x`` is a number (not a boolean) that is a finite float (an int of 400 digits is not)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    return abs(x) <= sys.float_info.max if isinstance(x, int) else math.isfinite(x)


def check_encoding(attr: str, spec: dict, where: str) -> int | None:
    """The size an attribute's ``categories`` or ``bins`` imply (None when it has neither), after
    checking them; an InputError naming ``where``, the attribute and the value otherwise.
    ``categories``: a non-empty list of distinct strings, numbers or booleans (data cells are
    matched by their text, so distinct means distinct as text); ``bins``: at least two finite,
    strictly increasing edges, numbers and not booleans (``true`` would be read as 1).

    >>> check_encoding("age", {"bins": [0, 18, 65, 120]}, "d"), check_encoding("sex", {"categories": ["f", "m"]}, "d")
    (3, 2)
    >>> check_encoding("a", {"bins": 5}, "d")
    Traceback (most recent call last):
        ...
    querysmasher.errors.InputError: d: bins of 'a' 5: must be at least 2 strictly increasing finite numbers (bin edges)
    """
    if "categories" in spec and "bins" in spec:
        raise InputError(f"{where}: attribute {attr!r}", "categories+bins", "give categories or bins, not both")
    if "categories" in spec:
        cats = spec["categories"]
        field = f"{where}: categories of {attr!r}"
        if not isinstance(cats, list) or not cats:
            raise InputError(field, cats, "must be a non-empty list of category values")
        seen: set[str] = set()
        for c in cats:
            if not (isinstance(c, (str, bool)) or _is_float(c)):
                raise InputError(field, c, "must be a string, a finite number or a boolean")
            if str(c) in seen:
                raise InputError(field, c, "appears twice (categories must be distinct)")
            seen.add(str(c))
        return len(cats)
    if "bins" in spec:
        edges = spec["bins"]
        field = f"{where}: bins of {attr!r}"
        reason = "must be at least 2 strictly increasing finite numbers (bin edges)"
        if not isinstance(edges, list) or len(edges) < 2:
            raise InputError(field, edges, reason)
        for e in edges:
            if not _is_float(e):
                raise InputError(field, e, reason)
        for lo, hi in zip(edges, edges[1:]):
            if not lo < hi:
                raise InputError(field, f"{lo}, {hi}", reason)
        return len(edges) - 1
    return None


def _schema_from_mapping(name: str, mapping: object) -> Schema:
    if not isinstance(mapping, dict) or not mapping:
        raise InputError("schema file", name, "must hold a non-empty mapping {name: size} or {name: {size:, kind:}}")
    attrs = []
    for attr, spec in mapping.items():
        if isinstance(spec, dict):
            unknown = set(spec) - {"size", "kind", "categories", "bins"}
            if unknown:
                raise InputError(f"schema file {name}: attribute {attr!r}", sorted(unknown)[0], "unknown key")
            implied = check_encoding(str(attr), spec, f"schema file {name}")
            size = implied if spec.get("size") is None else spec["size"]
            if implied is not None and size != implied:
                given = "categories" if "categories" in spec else "bins"
                raise InputError(
                    f"schema file {name}: size of attribute {attr!r}",
                    size,
                    f"does not match the size {implied} its {given} give",
                )
            kind = spec.get("kind", "categorical" if "categories" in spec else "numeric")
        else:
            size, kind = spec, "numeric"
        if not isinstance(size, int) or isinstance(size, bool):
            raise InputError(f"schema file {name}: size of attribute {attr!r}", size, "must be an integer >= 1")
        attrs.append(Attribute(str(attr), size, kind))
    return Schema(Path(name).stem, tuple(attrs))


def parse_schema(spec: str, *, all_numeric: bool = False) -> Schema:
    """Resolve a schema spec: a built-in name, ``synthetic:n=N,d=D``, or a YAML/JSON file path.

    ``all_numeric`` makes every attribute numeric (used by hybrid workloads, as in the paper's Table 3).
    """
    spec = str(spec).strip()
    if spec in BUILTIN_SCHEMAS:
        schema = BUILTIN_SCHEMAS[spec]
    elif spec.startswith("synthetic"):
        m = _SYNTHETIC.match(spec)
        if not m:
            raise InputError(
                "schema", spec, "synthetic schemas are written synthetic:n=N,d=D (e.g. synthetic:n=10,d=40)"
            )
        n, d = int(m.group(1)), int(m.group(2))
        if n < 1 or d < 1:
            raise InputError("schema", spec, "n and d must be >= 1")
        schema = Schema(spec, tuple(Attribute(f"a{i}", n, "numeric") for i in range(d)))
    else:
        from .documents import read_document  # loads yaml only where it is used

        path = Path(spec)
        if not path.is_file():
            raise InputError(
                "schema",
                spec,
                f"not a built-in schema ({', '.join(BUILTIN_SCHEMAS)}), not synthetic:n=N,d=D, and no such file",
            )
        schema = _schema_from_mapping(spec, read_document(path, "schema file"))
    return schema.all_numeric() if all_numeric else schema
