"""Reading confidential records: validation, encoding, and marginals.

Records arrive as CSV (plain, or compressed as pandas infers from the suffix: .gz, .bz2, .zip, .xz,
.zst with zstandard installed) or Parquet, with one column per schema attribute holding integer
codes 0..size-1. A domain file may instead list, per attribute, ``categories`` (raw values in order)
or numeric ``bins`` (edges e_0 < ... < e_size; a value v is coded i when e_i <= v < e_{i+1}, the
last bin closed on the right), and then raw values are encoded here.

Every format goes through one reader and the same checks. The header (a CSV's first non-blank line,
a Parquet file's column names) must name every schema attribute, each once; a first line that looks
like a data record is refused. Bad data never goes through silently: a missing column, a NaN, a
non-integer code or a value outside the domain raises an :class:`InputError` naming the column, the
number of offending rows and the first row numbers (1-based data rows). ``on_invalid="drop"`` is
the only way on: offending rows are dropped and counted, and the privacy guarantee then holds for
the cleaned data set.

Messages end up in tickets and logs, so they never hold a value read from the records: they name
schema attributes (from the domain, not the records), positions, row numbers and counts; a header
cell that is not a schema attribute is named by its position, and a reader's own message is passed
on only when it is known to quote nothing of the file.

>>> import pandas as pd
>>> from querysmasher.schema import parse_schema
>>> s = parse_schema("synthetic:n=3,d=2")
>>> r = validate_records(pd.DataFrame({"a0": [0, 2, 1], "a1": [1, 1, 0]}), s)
>>> marginal(r, (1,), s.sizes).tolist()
[1.0, 2.0, 0.0]
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .errors import InputError
from .schema import Schema, check_encoding

if TYPE_CHECKING:  # pandas (with pyarrow) is half a second of import: only reading a table pays it
    import pandas as pd

__all__ = ["Records", "load_records", "validate_records", "marginal", "read_encodings", "warn_dropped"]

FIRST_ROWS = 5
PARQUET = (".parquet", ".pq")
COMPRESSED = (".gz", ".bz2", ".zip", ".xz", ".zst", ".tar")  # pandas infers these from the suffix


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
        logging.getLogger("querysmasher").warning(
            "invalid rows were dropped (how many is not logged: it is derived from the records); "
            "the privacy guarantee holds for the cleaned data set"
        )


def read_encodings(path: str | Path, schema: Schema | None = None) -> dict[str, dict]:
    """Per-attribute ``categories`` / ``bins`` from a domain file (attributes without them: {}).

    With ``schema`` (the plan's), every encoding is checked against it, so the data can never be
    mis-encoded: the attribute exists; categories are unique and exactly ``size`` of them; bins are
    ``size + 1`` finite, strictly increasing numbers. Any problem is one InputError naming it.
    """
    from .documents import read_document  # loads yaml only where it is used

    p = Path(path)
    data = read_document(p, "--domain")
    if not isinstance(data, dict) or not data:
        raise InputError("--domain", str(p), "must hold a mapping {attribute: {categories: [...]} or {bins: [...]}}")
    out = {
        str(k): {kk: vv for kk, vv in v.items() if kk in ("categories", "bins")} if isinstance(v, dict) else {}
        for k, v in data.items()
    }
    if schema is not None:
        for name, enc in out.items():
            _check_encoding(name, enc, schema, str(p))
    return out


def _check_encoding(name: str, enc: dict, schema: Schema, path: str) -> None:
    """One attribute's encoding against the plan's schema: the checks of every domain file
    (:func:`querysmasher.schema.check_encoding`), then the size the plan has."""
    if name not in schema.names:
        raise InputError(
            f"domain file {path}: attribute", name, f"is not in the plan's schema ({', '.join(schema.names)})"
        )
    size = schema.attributes[schema.index(name)].size
    implied = check_encoding(name, enc, f"domain file {path}")
    if implied is not None and implied != size:
        what = "categories" if "categories" in enc else "bins"
        need = (
            f"exactly the plan's size {size}"
            if what == "categories"
            else f"size + 1 = {size + 1} edges for the plan's size {size}"
        )
        raise InputError(
            f"domain file {path}: {what} of {name!r}",
            implied if what == "categories" else implied + 1,
            f"there must be {need}",
        )


# What a reader said that is worth passing on: library text with line numbers and counts. Any other
# message is replaced by its class name, since some quote the file (gzip: "Not a gzipped file (b'37')").
_SAFE_REASONS = re.compile(
    "|".join(
        (
            r"Expected \d+ fields in line \d+, saw \d+",
            r"EOF inside string starting at row \d+",
            r"Not a gzipped file",
            r"Compressed file ended before the end-of-stream marker was reached",
            r"Error -?\d+ while decompressing data",
            r"Invalid data stream",
            r"Input format not supported by decoder",
            r"Corrupt input data",
            r"File is not a zip file",
            r"(Multiple|Zero) files found in ZIP file",
            r"Parquet magic bytes not found in footer",
            r"Parquet file size is \d+ bytes, smaller than the minimum file footer \(\d+ bytes\)",
        )
    )
)


def _read_table(path: str | Path) -> pd.DataFrame:
    """The records file as written: one column per header cell, labelled by the cell (duplicates kept,
    an empty cell labelled ''), every data row below it.

    One path for every format, so that :func:`validate_records` checks every header alike: a CSV (plain
    or compressed, as pandas infers from the suffix) is parsed with ``header=None`` and its first row,
    after any blank lines, taken as the header; pandas' own header handling would rename a second
    'age' to 'age.1', leaving no way to tell which one holds the data. A Parquet file's column names
    are its header.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError("data file", str(p), "does not exist")
    parquet = p.suffix in PARQUET
    try:
        return _read_parquet(p) if parquet else _read_csv(p)
    # A corrupted file fails in any of a dozen unrelated classes (a decompressor's EOFError, LZMAError,
    # zlib.error, BadZipFile or zstandard's ZstdError; pyarrow's OSError, or KeyError from mangled
    # pandas metadata): each is the file's fault, and one line, not a traceback.
    except Exception as exc:
        kind = "Parquet" if parquet else f"{p.suffix}-compressed CSV" if p.suffix in COMPRESSED else "CSV"
        raise InputError("data file", str(p), f"cannot be read as {kind} ({_unreadable(exc)})") from None


def _read_csv(p: Path) -> pd.DataFrame:
    import pandas as pd  # loads pandas only where it is used

    rows = pd.read_csv(p, header=None, dtype=str, keep_default_na=False, na_values=[""])
    frame = rows.iloc[1:].reset_index(drop=True)
    frame.columns = ["" if pd.isna(c) else c for c in rows.iloc[0]]
    return frame


def _read_parquet(p: Path) -> pd.DataFrame:
    # pyarrow directly, as pandas.read_parquet does, since that one refuses a name written twice with a
    # message quoting it: here the duplicate reaches the header check, which quotes only attributes.
    import pyarrow.parquet as pq  # loads pyarrow only where it is used

    with pq.ParquetFile(p) as f:
        return f.read(use_pandas_metadata=True).to_pandas()


def _unreadable(exc: Exception) -> str:
    """Why a reader failed, in words holding nothing of the file."""
    import pandas as pd  # loads pandas only where it is used

    if isinstance(exc, pd.errors.EmptyDataError):
        return "it holds no header line"
    if isinstance(exc, UnicodeDecodeError):
        return "it is not UTF-8 text"
    if isinstance(exc, ImportError):  # pandas' own words on a missing optional package (zstandard)
        return str(exc)
    said = _SAFE_REASONS.search(str(exc))
    return said.group() if said else type(exc).__name__


_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")  # a header cell that is a number is a value


def _check_header(columns: pd.Index, schema: Schema) -> None:
    """Refuse a header that does not say which column holds which attribute.

    The header's cells come from the records file: a cell that is not a schema attribute's name may
    be a value (a headerless file's first record), so it is named by its position, never quoted.
    """
    names = [str(c) for c in columns]
    where = ("data header", f"{len(names)} columns")
    missing = [a for a in schema.names if a not in names]
    if len(missing) == len(schema.names):
        numbers = sum(bool(_NUMBER.fullmatch(n.strip())) for n in names)
        if numbers or len(names) == len(schema.names):
            looks = f"{numbers} of its {len(names)} cells are numbers" if numbers else "it has one cell per attribute"
            raise InputError(
                *where,
                f"is not a header: no cell names a schema attribute ({_listed(schema.names)}) "
                f"and {looks}: is the header line missing, or are the columns named otherwise?",
            )
    first: dict[str, int] = {}
    for i, name in enumerate(names, 1):
        if name in first:  # pandas would rename the second one: which one holds the data?
            if name in schema.names:
                raise InputError(*where, f"names the column {name!r} twice")
            raise InputError(*where, f"columns {first[name]} and {i} have the same name (not a schema attribute)")
        first[name] = i
    if missing:
        others = sum(n not in schema.names for n in names)
        besides = f" (the header's other {others} columns are not schema attributes)" if others else ""
        listed = ", ".join(repr(m) for m in missing)
        raise InputError(*where, f"missing column(s) {listed} of schema {schema.name!r}{besides}")


def _listed(names: tuple[str, ...], shown: int = 5) -> str:
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


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
        codes = np.array(
            [lookup.get(str(v), -1) if not m else -1 for v, m in zip(col.tolist(), missing)], dtype=np.int64
        )
        unknown = (codes < 0) & ~missing
        if unknown.any():
            problems.append((unknown, f"hold a value not in the category list of {name!r}"))
        return codes, problems
    import pandas as pd  # loads pandas only where it is used

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


def validate_records(
    frame: pd.DataFrame, schema: Schema, *, encodings: dict[str, dict] | None = None, on_invalid: str = "error"
) -> Records:
    """Check and encode a table against the schema (see the module docstring)."""
    if on_invalid not in ("error", "drop"):
        raise InputError("--on-invalid", on_invalid, "must be 'error' or 'drop'")
    _check_header(frame.columns, schema)
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


def load_records(
    path: str | Path, schema: Schema, *, domain_file: str | Path | None = None, on_invalid: str = "error"
) -> Records:
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
