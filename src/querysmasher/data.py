"""Reading confidential records: validation, encoding, and marginals.

Records arrive as CSV or Parquet with one column per schema attribute holding integer codes
0..size-1. A domain file may instead list, per attribute, ``categories`` (raw values in order) or
numeric ``bins`` (edges e_0 < ... < e_size; a value v is coded i when e_i <= v < e_{i+1}, the last
bin closed on the right), and then raw values are encoded here.

Bad data never goes through silently: a missing column, a NaN, a non-integer code or a value outside
the domain raises an :class:`InputError` naming the column, the number of offending rows and the
first row numbers (1-based data rows). ``on_invalid="drop"`` is the only way on: offending rows are
dropped and counted, and the privacy guarantee then holds for the cleaned data set.

>>> import pandas as pd
>>> from querysmasher.schema import parse_schema
>>> s = parse_schema("synthetic:n=3,d=2")
>>> r = validate_records(pd.DataFrame({"a0": [0, 2, 1], "a1": [1, 1, 0]}), s)
>>> marginal(r, (1,), s.sizes).tolist()
[1.0, 2.0, 0.0]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .errors import InputError
from .schema import Schema

if TYPE_CHECKING:  # pandas (with pyarrow) is half a second of import: only reading a table pays it
    import pandas as pd

__all__ = ["Records", "load_records", "validate_records", "marginal", "read_encodings", "warn_dropped"]

FIRST_ROWS = 5


@dataclass(frozen=True, eq=False)
class Records:
    """Validated integer codes, one column per schema attribute (schema order)."""

    codes: np.ndarray  # (records, attributes), int64
    schema: Schema
    dropped: int = 0  # rows removed by on_invalid="drop"

    def __len__(self) -> int:
        return self.codes.shape[0]


def warn_dropped(records: Records) -> None:
    """Say that invalid rows were dropped, never how many: the count is derived from the records.

    Logged on the ``querysmasher`` logger, so it lands wherever the release's log goes (a terminal,
    a rule's ``log:`` file); the exact number stays in ``records.dropped`` for the caller.
    """
    if records.dropped:
        import logging

        logging.getLogger("querysmasher").warning(
            "invalid rows were dropped (how many is not logged: it is derived from the records); "
            "the privacy guarantee holds for the cleaned data set")


def read_encodings(path: str | Path, schema: Schema | None = None) -> dict[str, dict]:
    """Per-attribute ``categories`` / ``bins`` from a domain file (attributes without them: {}).

    With ``schema`` (the plan's), every encoding is checked against it, so the data can never be
    mis-encoded: the attribute exists; categories are unique and exactly ``size`` of them; bins are
    ``size + 1`` finite, strictly increasing numbers. Any problem is one InputError naming it.
    """
    from .documents import read_document

    p = Path(path)
    data = read_document(p, "--domain")
    if not isinstance(data, dict) or not data:
        raise InputError("--domain", str(p), "must hold a mapping {attribute: {categories: [...]} or {bins: [...]}}")
    out = {str(k): {kk: vv for kk, vv in v.items() if kk in ("categories", "bins")} if isinstance(v, dict) else {} for k, v in data.items()}
    if schema is not None:
        for name, enc in out.items():
            _check_encoding(name, enc, schema, str(p))
    return out


def _check_encoding(name: str, enc: dict, schema: Schema, path: str) -> None:
    if name not in schema.names:
        raise InputError(f"domain file {path}: attribute", name, f"is not in the plan's schema ({', '.join(schema.names)})")
    size = schema.attributes[schema.index(name)].size
    if "categories" in enc and "bins" in enc:
        raise InputError(f"domain file {path}: attribute {name!r}", "categories+bins", "give categories or bins, not both")
    if "categories" in enc:
        cats = enc["categories"]
        if not isinstance(cats, list):
            raise InputError(f"domain file {path}: categories of {name!r}", cats, "must be a list")
        if len(cats) != size:
            raise InputError(f"domain file {path}: categories of {name!r}", len(cats), f"there must be exactly the plan's size {size}")
        seen: set[str] = set()
        for c in cats:
            if str(c) in seen:
                raise InputError(f"domain file {path}: categories of {name!r}", c, "appears twice (categories must be unique)")
            seen.add(str(c))
    if "bins" in enc:
        bins = enc["bins"]
        try:
            edges = np.asarray(bins, dtype=float)
        except (TypeError, ValueError):
            raise InputError(f"domain file {path}: bins of {name!r}", bins, "must be a list of numbers") from None
        if edges.ndim != 1 or len(edges) != size + 1:
            raise InputError(f"domain file {path}: bins of {name!r}", len(np.atleast_1d(edges)), f"there must be size + 1 = {size + 1} edges for the plan's size {size}")
        if not np.all(np.isfinite(edges)):
            raise InputError(f"domain file {path}: bins of {name!r}", bins, "must be finite numbers")
        if np.any(np.diff(edges) <= 0):
            k = int(np.flatnonzero(np.diff(edges) <= 0)[0])
            raise InputError(f"domain file {path}: bins of {name!r}", f"{edges[k]:g}, {edges[k + 1]:g}", "edges must be strictly increasing")


def _read_table(path: str | Path) -> pd.DataFrame:
    import csv

    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise InputError("data file", str(p), "does not exist")
    try:
        if p.suffix in (".parquet", ".pq"):
            frame = pd.read_parquet(p)
            header = [str(c) for c in frame.columns]
        else:
            header = _csv_header(p)
            frame = pd.read_csv(p, dtype=str, keep_default_na=False, na_values=[""])
    except (ValueError, OSError, pd.errors.ParserError, csv.Error) as exc:
        raise InputError("data file", str(p), f"cannot be read ({exc})") from None
    seen: set[str] = set()
    for name in header:  # pandas renames a second 'age' to 'age.1': which one holds the data?
        if name in seen:
            raise InputError("data file", str(p), f"names the column {name!r} twice")
        seen.add(name)
    return frame


def _csv_header(p: Path) -> list[str]:
    """The column names of a CSV file's first line, as written (pandas would rename duplicates)."""
    import csv

    with open(p, newline="", encoding="utf-8", errors="replace") as f:
        return next(csv.reader(f), [])


def _bad(column: str, mask: np.ndarray, what: str) -> InputError:
    rows = np.flatnonzero(mask)
    first = ", ".join(str(r + 1) for r in rows[:FIRST_ROWS])
    return InputError("data column", column, f"{len(rows)} rows {what} (first data rows: {first})")


def _encode(col: pd.Series, name: str, size: int, enc: dict) -> tuple[np.ndarray, list[tuple[np.ndarray, str]]]:
    """(codes, problems): codes are -1 where invalid; each problem is (row mask, description)."""
    problems = []
    missing = col.isna().to_numpy()
    if missing.any():
        problems.append((missing, "are empty or NaN"))
    if "categories" in enc:
        lookup = {str(c): i for i, c in enumerate(enc["categories"])}
        codes = np.array([lookup.get(str(v), -1) if not m else -1 for v, m in zip(col.tolist(), missing)], dtype=np.int64)
        unknown = (codes < 0) & ~missing
        if unknown.any():
            problems.append((unknown, f"hold a value not in the category list of {name!r}"))
        return codes, problems
    import pandas as pd

    values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
    nonnum = np.isnan(values) & ~missing
    if nonnum.any():
        problems.append((nonnum, "are not numbers"))
    ok = ~np.isnan(values)
    if "bins" in enc:
        edges = np.asarray(enc["bins"], dtype=float)
        codes = np.full(len(values), -1, dtype=np.int64)
        inside = ok & (values >= edges[0]) & (values <= edges[-1])
        codes[inside] = np.clip(np.searchsorted(edges, values[inside], side="right") - 1, 0, size - 1)
        out = ok & ~inside
        if out.any():
            problems.append((out, f"fall outside the bins [{edges[0]:g}, {edges[-1]:g}]"))
        return codes, problems
    frac = ok & (np.floor(values) != values)
    if frac.any():
        problems.append((frac, "are not integer codes"))
    rng = ok & ~frac & ((values < 0) | (values >= size))
    if rng.any():
        problems.append((rng, f"are outside the domain 0..{size - 1}"))
    codes = np.where(ok & ~frac & ~rng, np.nan_to_num(values), -1).astype(np.int64)
    return codes, problems


def validate_records(frame: pd.DataFrame, schema: Schema, *, encodings: dict[str, dict] | None = None, on_invalid: str = "error") -> Records:
    """Check and encode a table against the schema (see the module docstring)."""
    if on_invalid not in ("error", "drop"):
        raise InputError("--on-invalid", on_invalid, "must be 'error' or 'drop'")
    missing = [a for a in schema.names if a not in frame.columns]
    if missing:
        raise InputError("data", f"columns {list(frame.columns)[:20]}", f"missing column(s) {', '.join(repr(m) for m in missing)} of schema {schema.name!r}")
    encodings = encodings or {}
    cols, bad_rows = [], np.zeros(len(frame), dtype=bool)
    for a in schema.attributes:
        codes, problems = _encode(frame[a.name], a.name, a.size, encodings.get(a.name, {}))
        for mask, what in problems:
            if on_invalid == "error":
                raise _bad(a.name, mask, what)
            bad_rows |= mask
        cols.append(codes)
    codes = np.stack(cols, axis=1) if cols else np.zeros((len(frame), 0), dtype=np.int64)
    # Column-major: every marginal reads whole columns, contiguous this way.
    return Records(np.asfortranarray(codes[~bad_rows]), schema, int(bad_rows.sum()))


def load_records(path: str | Path, schema: Schema, *, domain_file: str | Path | None = None, on_invalid: str = "error") -> Records:
    """Read and validate a CSV/Parquet file of records."""
    encodings = read_encodings(domain_file, schema) if domain_file else None
    return validate_records(_read_table(path), schema, encodings=encodings, on_invalid=on_invalid)


def marginal(records: Records, attrs: tuple[int, ...], sizes: tuple[int, ...]) -> np.ndarray:
    """Counts over the cells of the view ``attrs`` (row-major), from the records directly."""
    if not attrs:
        return np.array([float(len(records))])
    # Row-major cell index, built column by column (codes were range-checked on loading).
    flat = records.codes[:, attrs[0]].copy()
    for i in attrs[1:]:
        flat *= sizes[i]
        flat += records.codes[:, i]
    return np.bincount(flat, minlength=int(np.prod([sizes[i] for i in attrs]))).astype(float)
