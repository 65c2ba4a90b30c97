"""Release specs: what a data custodian writes to publish named tables from confidential records.

A release spec is one YAML file::

    data: adult.csv                 # CSV or Parquet, one column per attribute (paths: relative to the spec)
    domain: adult-domain.json       # the schema ({name: size} or {name: {size, kind, categories|bins}})
    tables:                         # named attribute subsets, each with its query family and weight
      - marginal: [age, sex]
      - prefix: [capital-gain, age]
        weight: 2
    budget: {rho: 0.5}              # one of beta | rho | mu | epsilon (+ delta); delta alone sets the report delta
    neighbours: add-remove          # or replace
    method: qs                      # qs (default), or any method whose plan kind releases tables (qsplus too; not hdmm)
    on_invalid: error               # or drop
    postprocess: false              # true: also non-negative integer tables; consistent: also non-negative
                                    #   tables agreeing on every shared margin (both labelled, biased)
    confidence: 0.95                # the level of every published interval (exact under Gaussian noise)

:func:`run_release` plans, re-checks the privacy cost, measures with OpenDP's sampler (OS entropy,
no seed), reconstructs and writes the publishable tables into a new folder, atomically (a
temporary folder renamed into place): per-cell tables with standard errors where estimable, every
workload answer with its standard error, and ``release.json`` (budget in its four forms, relation,
sampler, method, workload, predicted RMSE). Nothing else derived from the records is written: no
record count, no true answer, no empirical error.

>>> spec = parse_release_spec(
...     {"data": "d.csv", "domain": "dom.yaml", "tables": [{"marginal": ["a"]}], "budget": {"rho": 0.5}}
... )
>>> spec.method, spec.neighbours, spec.budget.beta
('qs', 'add-remove', 1.0)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from . import data as record_data  # its functions looked up when called (tests check that none reads records)
from .accounting import BUDGET_FORMS, NEIGHBOURS, Budget, make_budget
from .atomic import atomic_folder, check_output, write_json
from .documents import as_number, read_document
from .errors import InputError
from .families import PAIR_FAMILIES, PRODUCT_FAMILIES
from .intervals import DEFAULT_CONFIDENCE, check_confidence
from .methods import get_method
from .noise import make_noise
from .plankinds import kind_of, plan_kind
from .planning import make_plan
from .schema import Schema, check_attribute_sizes, parse_schema
from .workload import Workload, check_weight, format_weight, parse_workload

__all__ = ["ReleaseSpec", "TableSpec", "parse_release_spec", "load_release_spec", "release_workload", "run_release"]
TABLE_FAMILIES: tuple[str, ...] = PRODUCT_FAMILIES + PAIR_FAMILIES
_KEYS = ("data", "domain", "tables", "budget", "neighbours", "method", "on_invalid", "postprocess", "confidence")
_BUDGET_KEYS = (*BUDGET_FORMS, "delta")


@dataclass(frozen=True)
class TableSpec:
    """One requested table: a query family on named attributes, with a weight."""

    family: str
    attributes: tuple[str, ...]
    weight: float = 1.0

    def term(self) -> str:
        """The table in the workload grammar's named-attribute form, e.g. ``prefix:(income,age)@2``."""
        w = "" if self.weight == 1.0 else f"@{format_weight(self.weight)}"
        return f"{self.family}:({','.join(self.attributes)}){w}"


@dataclass(frozen=True)
class ReleaseSpec:
    data: str
    domain: str
    tables: tuple[TableSpec, ...]
    budget: Budget
    method: str = "qs"
    on_invalid: str = "error"
    postprocess: bool = False
    consistent: bool = False
    confidence: float = DEFAULT_CONFIDENCE
    source: str = ""  # the spec file it was read from (an input no output may overwrite)

    @property
    def neighbours(self) -> str:
        return self.budget.neighbours


def _number(field: str, value) -> float:
    return as_number(value, field)


def _budget(raw, neighbours: str) -> Budget:
    if not isinstance(raw, dict) or not raw:
        raise InputError("release spec: budget", raw, "must be a mapping with one of beta, rho, mu, epsilon (+ delta)")
    for k in raw:
        if k not in _BUDGET_KEYS:
            raise InputError("release spec: budget", k, f"unknown field (known: {', '.join(_BUDGET_KEYS)})")
    nums = {k: _number(f"release spec: budget.{k}", v) for k, v in raw.items()}
    if not any(k in nums for k in BUDGET_FORMS):
        raise InputError("release spec: budget", "none", "give exactly one of beta, rho, mu, epsilon")
    return make_budget(**nums, neighbours=neighbours, prefix="release spec: budget.")


def _table(i: int, raw) -> TableSpec:
    where = f"release spec: tables[{i}]"
    if not isinstance(raw, dict):
        raise InputError(where, raw, "must be a mapping like {marginal: [age, sex]} (optionally with weight)")
    families = [k for k in raw if k != "weight"]
    if len(families) != 1:
        raise InputError(where, sorted(map(str, raw)), "needs exactly one query family key (and optionally weight)")
    family = str(families[0])
    if family not in TABLE_FAMILIES:
        raise InputError(where, family, f"unknown query family (known: {', '.join(TABLE_FAMILIES)})")
    attrs = raw[family]
    if isinstance(attrs, str):
        attrs = [attrs]
    if not isinstance(attrs, list) or not attrs or not all(isinstance(a, str) for a in attrs):
        raise InputError(f"{where}.{family}", attrs, "must be a non-empty list of attribute names")
    if len(set(attrs)) != len(attrs):
        raise InputError(f"{where}.{family}", attrs, "names an attribute twice")
    if family in PAIR_FAMILIES and len(attrs) != 2:
        raise InputError(f"{where}.{family}", attrs, f"{family} is a two-way family: name exactly two attributes")
    raw_weight = raw.get("weight", 1.0)
    weight = check_weight(raw_weight, lambda reason: InputError(f"{where}.weight", raw_weight, reason))
    return TableSpec(family, tuple(attrs), weight)


def parse_release_spec(raw, base: str | Path = ".") -> ReleaseSpec:
    """Validate a release spec mapping (paths resolved against ``base``); errors name the field."""
    if not isinstance(raw, dict):
        raise InputError("release spec", type(raw).__name__, "must be a mapping with data, domain, tables, budget")
    for k in raw:
        if k not in _KEYS:
            raise InputError("release spec", k, f"unknown field (known: {', '.join(_KEYS)})")
    for k in ("data", "domain", "tables", "budget"):
        if k not in raw:
            raise InputError("release spec", k, "is required")
    for k in ("data", "domain"):
        if not isinstance(raw[k], str) or not raw[k]:
            raise InputError(f"release spec: {k}", raw[k], "must be a file path")
    if "seed" in raw:  # unreachable (not in _KEYS) but explicit: a release takes no seed
        raise InputError("release spec", "seed", "a release is never seeded")
    tables = raw["tables"]
    if not isinstance(tables, list) or not tables:
        raise InputError("release spec: tables", tables, "must be a non-empty list")
    neighbours = raw.get("neighbours", "add-remove")
    if neighbours not in NEIGHBOURS:
        raise InputError("release spec: neighbours", neighbours, f"must be one of {', '.join(NEIGHBOURS)}")
    method = raw.get("method", "qs")
    try:
        m = get_method(method)
        m.check(noise="gaussian", neighbours=neighbours)
    except InputError as exc:
        raise InputError("release spec: method", method, exc.reason) from None

    kind = plan_kind(m.declared("plan_kind", "plan"))
    if kind is None or not kind.per_view_tables:
        raise InputError(
            "release spec: method",
            method,
            "makes plans without per-view tables (answers only): a release publishes tables",
        )
    on_invalid = raw.get("on_invalid", "error")
    if on_invalid not in ("error", "drop"):
        raise InputError("release spec: on_invalid", on_invalid, "must be error or drop")
    post = raw.get("postprocess", False)
    if not (isinstance(post, bool) or post == "consistent"):
        raise InputError("release spec: postprocess", post, "must be true, false or consistent")
    confidence = check_confidence(raw.get("confidence", DEFAULT_CONFIDENCE), "release spec: confidence")
    base = Path(base)
    parsed = tuple(_table(i, t) for i, t in enumerate(tables))
    seen: dict[tuple, int] = {}
    for i, t in enumerate(parsed):  # a table named twice would be measured (and spend budget) twice
        j = seen.setdefault((t.family, frozenset(t.attributes)), i)
        if j != i:
            raise InputError(
                f"release spec: tables[{i}]",
                f"{t.family}: {list(t.attributes)}",
                f"is the same table as tables[{j}]: name each table once (use weight to give it more accuracy)",
            )
    return ReleaseSpec(
        str(base / raw["data"]),
        str(base / raw["domain"]),
        parsed,
        _budget(raw["budget"], neighbours),
        method,
        on_invalid,
        post is True,
        post == "consistent",
        confidence,
    )


def load_release_spec(path: str | Path) -> ReleaseSpec:
    p = Path(path)
    return replace(parse_release_spec(read_document(p, "release spec"), p.parent), source=str(p))


def release_workload(tables, schema: Schema) -> Workload:
    """The workload of a release: one view per named table, in the workload grammar's
    named-attribute terms (``marginal:(age,sex)+prefix:(income,age)@2``); an unknown attribute is an
    InputError naming it, and attributes too large to plan are refused before anything is allocated.
    """
    for t in tables:
        check_attribute_sizes(schema, [schema.index(a) for a in t.attributes])
    return parse_workload("+".join(t.term() for t in tables), schema)


def run_release(spec: ReleaseSpec, out: str | Path) -> dict:
    """Plan, check, measure (OpenDP sampler), reconstruct and write the release folder ``out``."""
    from .measure import check_plan  # loads h5py only where it is used
    from .reconstruct import release_tables, table_attrs  # loads h5py, numpy only where it is used
    from .tablefiles import (  # loads pandas, pyarrow, numpy only where it is used
        check_table_columns,
        simultaneous_multipliers,
        write_table_files,
    )

    out = Path(out)
    check_output(out, inputs=[spec.source, spec.data, spec.domain], folder=True)
    if not Path(spec.data).is_file():
        raise InputError("release spec: data", spec.data, "does not exist")
    schema = parse_schema(spec.domain)
    check_table_columns(schema)
    workload = release_workload(spec.tables, schema)
    plan = make_plan(schema, workload, spec.method, spec.budget)
    kind = kind_of(plan)
    if not kind.per_view_tables:
        raise InputError(
            "release spec: method",
            spec.method,
            "makes plans without per-view tables (answers only): a release publishes tables",
        )
    cost = check_plan(plan)  # before any record is read
    # from the plan alone, before any record is read: nothing here can fail after the noise is drawn
    simultaneous = simultaneous_multipliers(plan, table_attrs(plan), plan.workload.views, confidence=spec.confidence)
    noise = make_noise(None, "discrete")
    # the lock is taken before any record is read: a second release into the same folder fails now
    with atomic_folder(out) as tmp:
        records = record_data.load_records(spec.data, schema, domain_file=spec.domain, on_invalid=spec.on_invalid)
        record_data.warn_dropped(records)  # that rows were dropped, never how many
        tables, view_answers, total, consistent = release_tables(plan, records, noise, consistent=spec.consistent)
        del records
        index = write_table_files(
            tmp,
            plan,
            tables,
            view_answers,
            total=total,
            postprocessed=spec.postprocess,
            confidence=spec.confidence,
            consistent=consistent,
            simultaneous=simultaneous,
        )
        info = {
            "workload": plan.workload.spec,
            "method": plan.method,
            "budget": plan.budget.to_dict(),
            "privacy_cost_checked": cost,
            "sampler": noise.sampler,
            "seeded": False,
            "predicted_rmse": plan.rmse,
            "tables": sum(1 for t in index["tables"] if t["file"]),
            "tables_omitted": sum(1 for t in index["tables"] if not t["file"]),
            "private": "every file here is computed from the noisy measurements only",
        }
        write_json(tmp / "release.json", info)
    return info
