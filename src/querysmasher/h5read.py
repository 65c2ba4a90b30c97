"""Checked reads of the fields of the project's HDF5 files (plans, measurements, HDMM plans).

Every field a loader uses is read through one of these functions, which checks its presence, type,
shape and range before anything is derived from it, and raises the project's one error type,
:class:`~querysmasher.errors.InputError`, naming the file, the field and the value:

    plan file 'p.h5' field 'views/sigma2' nan: must be a number, not NaN (entry 3)

A dataset is never read before its declared shape is checked, and never when it declares more
bytes than the file holds (a bit flipped in a dataspace can claim terabytes). h5py's own errors on
corrupted metadata (OSError, RuntimeError, KeyError, ... from its C layer) while a field is read
become an InputError for that field; :func:`h5py_errors` converts the few that can escape elsewhere
(iterating a corrupted group) into one naming the file — and only errors raised inside h5py.

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "x.h5")
>>> with h5py.File(path, "w") as f:
...     f.attrs["kind"] = "example"
...     f["v"] = np.array([1.0, np.nan])
>>> with h5py.File(path, "r") as f:
...     try:
...         array(f, "v", kind="f", shape=(2,))
...     except InputError as exc:
...         print(str(exc).replace(path, "x.h5"))
example file 'x.h5' field 'v' nan: must be a number, not NaN (entry 1)
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import h5py
import numpy as np

from .accounting import NEIGHBOURS, Budget, PureBudget
from .errors import InputError
from .schema import Schema
from .workload import CustomQueries

__all__ = [
    "READ_ERRORS",
    "PROBE_SECONDS",
    "probe",
    "bad",
    "missing",
    "raised_by_h5py",
    "h5py_errors",
    "child",
    "members",
    "indexed_members",
    "text",
    "integer",
    "number",
    "flag",
    "json_attr",
    "array",
    "strings",
    "has",
    "finite_vector",
    "custom_queries",
    "json_number",
    "json_text",
    "read_schema",
    "read_budget",
]

# What h5py raises from its C layer on corrupted metadata (and numpy/UTF-8 decoding on bad bytes).
READ_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError)
_MISSING = object()
_ABSENT = object()
_KINDS = {"f": "a float", "i": "an integer", "n": "a numeric"}


def _label(obj) -> str:
    try:
        kind = obj.file.attrs.get("kind")
        filename = obj.file.filename
    except READ_ERRORS:
        return "HDF5 file"
    shown = kind.replace("-", " ") if isinstance(kind, str) and kind.isprintable() and len(kind) < 40 else "HDF5"
    return f"{shown} file {filename!r}"


def _field(obj, name: str, attr: bool) -> str:
    base = (obj.name or "/").strip("/")
    if attr:
        return f"{base}@{name}"
    return "/".join(p for p in (base, name) if p) or "/"


def bad(obj, name: str, value, reason: str, *, attr: bool = False) -> InputError:
    """The InputError for field ``name`` of ``obj`` (an attribute when ``attr``)."""
    return InputError(f"{_label(obj)} field {_field(obj, name, attr)!r}", _shown(value), reason)


def missing(obj, name: str, reason: str, *, attr: bool = False) -> InputError:
    """The InputError for a field that is absent or cannot be read at all (no value to show)."""
    return InputError(f"{_label(obj)} field", _field(obj, name, attr), reason)


def _shown(value):
    """A short, printable form of a value for one error line."""
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value)[:40]
    if isinstance(value, np.ndarray):
        return f"array of shape {value.shape} ({value.dtype})"
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, str) and len(value) > 60:
        return value[:60] + "..."
    if isinstance(value, (list, dict)):
        s = json.dumps(value, default=str)
        return s if len(s) <= 60 else s[:60] + "..."
    return value


def raised_by_h5py(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside h5py (its innermost frame is h5py's code)."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return str(tb.tb_frame.f_globals.get("__name__", "")).startswith("h5py.")


@contextmanager
def h5py_errors(path, what: str) -> Iterator[None]:
    """Last resort for a corrupted file: h5py's own low-level errors (only those raised inside h5py)
    become one InputError naming the file; every other exception passes unchanged."""
    try:
        yield
    except READ_ERRORS as exc:
        if isinstance(exc, InputError) or not raised_by_h5py(exc):
            raise
        raise InputError(what, str(path), f"is corrupted: h5py cannot read it ({type(exc).__name__}: {exc})") from None


def child(parent, name: str, *, group: bool):
    """The group (``group``) or dataset ``name`` of ``parent``: present, readable, of that type."""
    try:
        obj = parent.get(name)
    except READ_ERRORS as exc:
        raise missing(parent, name, f"cannot be read ({type(exc).__name__}: {exc})") from None
    want = h5py.Group if group else h5py.Dataset
    if obj is None:
        raise missing(parent, name, f"is missing (a {'group' if group else 'dataset'})")
    if not isinstance(obj, want):
        raise bad(parent, name, type(obj).__name__, f"must be a {'group' if group else 'dataset'}")
    return obj


def has(parent, name: str) -> bool:
    """Whether ``parent`` has a member ``name`` (a corrupted link table is an InputError)."""
    try:
        return name in parent
    except READ_ERRORS as exc:
        raise missing(parent, name, f"cannot be read ({type(exc).__name__}: {exc})") from None


def members(group) -> list[str]:
    """The names in a group."""
    try:
        return list(group.keys())
    except READ_ERRORS as exc:
        raise missing(group, "", f"cannot be listed ({type(exc).__name__}: {exc})") from None


def indexed_members(group, what: str) -> list[str]:
    """The members of a group named "0", "1", ..., in order (at least one); ``what`` says what
    they hold, for the message."""
    names = members(group)
    want = [str(i) for i in range(len(names))]
    if not names or sorted(names, key=lambda n: (len(n), n)) != want:
        raise bad(group, "", sorted(names)[:5], f"must hold {what} named 0, 1, ...")
    return want


def _attr(obj, name: str, default=_MISSING):
    try:
        if name not in obj.attrs:
            if default is _MISSING:
                raise missing(obj, name, "is missing", attr=True)
            return default
        return obj.attrs[name]
    except InputError:
        raise
    except READ_ERRORS as exc:
        raise missing(obj, name, f"cannot be read ({type(exc).__name__}: {exc})", attr=True) from None


def text(obj, name: str, *, choices=None, default=_MISSING) -> str:
    """A string attribute (one of ``choices`` when given; ``default`` when absent)."""
    value = _attr(obj, name, _MISSING if default is _MISSING else _ABSENT)
    if value is _ABSENT:
        return default
    if not isinstance(value, str):
        raise bad(obj, name, value, "must be a string", attr=True)
    if choices is not None and value not in choices:
        raise bad(obj, name, value, f"must be one of {', '.join(map(repr, choices))}", attr=True)
    return str(value)


def _scalar(obj, name: str, value, what: str):
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(obj, name, value, f"must be {what}", attr=True)
    return value


def integer(obj, name: str, *, lo: int | None = None, hi: int | None = None, default=_MISSING) -> int:
    """An integer attribute in [lo, hi]."""
    value = _scalar(obj, name, _attr(obj, name, default), "an integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise bad(obj, name, value, "must be an integer", attr=True)
        value = int(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise bad(obj, name, value, f"must be an integer in [{lo}, {hi if hi is not None else 'inf'}]", attr=True)
    return int(value)


def number(
    obj,
    name: str,
    *,
    lo: float | None = None,
    positive: bool = False,
    nan: bool = False,
    inf: bool = False,
    default=_MISSING,
) -> float:
    """A real attribute: finite unless ``inf``/``nan`` allow those, >= lo (> 0 with ``positive``)."""
    value = float(_scalar(obj, name, _attr(obj, name, default), "a number"))
    reason = _number_problem(value, lo=lo, positive=positive, nan=nan, inf=inf)
    if reason:
        raise bad(obj, name, value, reason, attr=True)
    return value


def _number_problem(value: float, *, lo=None, positive=False, nan=False, inf=False) -> str:
    if math.isnan(value):
        return "" if nan else "must be a number, not NaN"
    if math.isinf(value) and not inf:
        return "must be finite"
    if positive and not value > 0:
        return "must be > 0"
    if lo is not None and not value >= lo:
        return f"must be >= {lo}"
    return ""


def flag(obj, name: str, default=_MISSING) -> bool:
    """A boolean attribute (h5py stores numpy booleans)."""
    value = _attr(obj, name, default)
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if not isinstance(value, (bool, np.bool_)):
        raise bad(obj, name, value, "must be true or false", attr=True)
    return bool(value)


def json_attr(obj, name: str, kind: type = dict):
    """A JSON attribute holding a ``kind`` (dict or list)."""
    raw = text(obj, name)
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise bad(obj, name, raw, f"is not valid JSON ({exc})", attr=True) from None
    if not isinstance(value, kind):
        raise bad(obj, name, value, f"must hold a JSON {'object' if kind is dict else 'list'}", attr=True)
    return value


def json_number(
    obj, name: str, doc: dict, key: str, *, lo=None, hi=None, positive=False, integral=False, default=_MISSING
):
    """``doc[key]`` of JSON attribute ``name``: a number (an integer with ``integral``), finite, in
    [lo, hi] (> 0 with ``positive``)."""
    if key not in doc:
        if default is _MISSING:
            raise missing(obj, f"{name}.{key}", "is missing", attr=True)
        return default
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integral and not isinstance(value, int)):
        raise bad(obj, f"{name}.{key}", value, f"must be {'an integer' if integral else 'a number'}", attr=True)
    reason = _number_problem(float(value), lo=lo, positive=positive) or (
        f"must be < {hi}" if hi is not None and not value < hi else ""
    )
    if reason:
        raise bad(obj, f"{name}.{key}", value, reason, attr=True)
    return value


def json_text(obj, name: str, doc: dict, key: str, *, choices=None, default=_MISSING) -> str:
    """``doc[key]`` of JSON attribute ``name``: a string (one of ``choices``)."""
    value = doc.get(key, default)
    if value is _MISSING:
        raise missing(obj, f"{name}.{key}", "is missing", attr=True)
    if not isinstance(value, str) or (choices is not None and value not in choices):
        raise bad(
            obj,
            f"{name}.{key}",
            value,
            "must be a string" + (f", one of {', '.join(map(repr, choices))}" if choices else ""),
            attr=True,
        )
    return value


def _dataset(parent, name: str, shape, ndim: int | None):
    ds = child(parent, name, group=False)
    try:
        dshape, dtype = tuple(ds.shape) if ds.shape is not None else None, ds.dtype
        size = os.path.getsize(parent.file.filename)
    except READ_ERRORS as exc:
        raise missing(parent, name, f"cannot be read ({type(exc).__name__}: {exc})") from None
    if dshape is None:
        raise bad(parent, name, "empty dataspace", "holds no array")
    if ndim is not None and len(dshape) != ndim:
        raise bad(parent, name, f"shape {dshape}", f"must be a {ndim}-D array")
    if shape is not None and (
        len(dshape) != len(shape) or any(w is not None and w != d for w, d in zip(shape, dshape))
    ):
        want = "(" + ", ".join("*" if w is None else str(w) for w in shape) + ")"
        raise bad(parent, name, f"shape {dshape}", f"must have shape {want}")
    if math.prod(dshape) * dtype.itemsize > size:
        raise bad(parent, name, f"shape {dshape}", f"claims more bytes than the file holds ({size})")
    return ds, dtype


def array(
    parent,
    name: str,
    *,
    kind: str,
    shape: tuple | None = None,
    ndim: int | None = None,
    lo: float | None = None,
    hi: float | None = None,
    positive: bool = False,
    finite: bool = True,
    nan: bool = False,
) -> np.ndarray:
    """A numeric dataset: ``kind`` "f" (float), "i" (integer) or "n" (any real number, as float);
    its shape (``None`` entries: any length) or ``ndim`` checked before it is read; then every entry
    finite (unless ``finite`` is False: +-inf allowed; ``nan``: NaN allowed), >= lo, <= hi, > 0
    with ``positive``. Returns float64 or int64."""
    ds, dtype = _dataset(parent, name, shape, ndim if shape is None else None)
    ok = {"f": "f", "i": "iu", "n": "iuf"}[kind]
    if dtype.kind not in ok:
        found = "strings" if dtype.kind in "SUO" else f"{dtype} values"
        raise bad(parent, name, found, f"must hold {_KINDS[kind]} array")
    try:
        values = np.asarray(ds[()])
    except READ_ERRORS as exc:
        raise missing(parent, name, f"cannot be read ({type(exc).__name__}: {exc})") from None
    if kind == "i" and dtype.kind == "u" and values.size and int(values.max()) > np.iinfo(np.int64).max:
        raise bad(parent, name, int(values.max()), "holds an integer too large")
    values = values.astype(np.int64 if kind == "i" else np.float64)
    _check_entries(parent, name, values, lo=lo, hi=hi, positive=positive, finite=finite, nan=nan)
    return values


def _check_entries(parent, name, values: np.ndarray, *, lo, hi, positive, finite, nan) -> None:
    flat = values.reshape(-1)
    checks = []
    if values.dtype.kind == "f" and not nan:
        checks.append((np.isnan(flat), "must be a number, not NaN"))
    if values.dtype.kind == "f" and finite:
        checks.append((np.isinf(flat), "must be finite"))
    with np.errstate(invalid="ignore"):
        if positive:
            checks.append((flat <= 0, "must be > 0"))
        if lo is not None:
            checks.append((flat < lo, f"must be >= {lo}"))
        if hi is not None:
            checks.append((flat > hi, f"must be <= {hi}"))
    for mask, reason in checks:
        where = np.flatnonzero(mask)
        if where.size:
            i = int(where[0])
            index = tuple(int(k) for k in np.unravel_index(i, values.shape)) if values.ndim > 1 else i
            raise bad(parent, name, flat[i].item(), f"{reason} (entry {index})")


def strings(parent, name: str, *, length: int | None = None) -> list[str]:
    """A 1-D dataset of UTF-8 strings (of ``length`` entries when given)."""
    ds, dtype = _dataset(parent, name, None if length is None else (length,), 1)
    if h5py.check_string_dtype(dtype) is None:
        raise bad(parent, name, f"{dtype} values", "must hold strings")
    try:
        return [str(s) for s in ds.asstr()[()]]
    except READ_ERRORS as exc:
        raise missing(parent, name, f"cannot be read as UTF-8 strings ({type(exc).__name__}: {exc})") from None


def read_schema(obj, name: str = "schema"):
    """The :class:`~querysmasher.schema.Schema` of JSON attribute ``name``, every part checked."""
    doc = json_attr(obj, name, dict)
    json_text(obj, name, doc, "name")
    attrs = doc.get("attributes")
    if not isinstance(attrs, list) or not attrs:
        raise bad(obj, f"{name}.attributes", attrs, "must be a non-empty list", attr=True)
    for i, a in enumerate(attrs):
        if not isinstance(a, dict):
            raise bad(obj, f"{name}.attributes[{i}]", a, "must be an object with name, size and kind", attr=True)
        json_text(obj, f"{name}.attributes[{i}]", a, "name")
        json_text(obj, f"{name}.attributes[{i}]", a, "kind")
        json_number(obj, f"{name}.attributes[{i}]", a, "size", lo=1, integral=True)
    return Schema.from_dict(doc)


def finite_vector(parent, name: str, length: int | None = None, *, chunk: int = 1 << 22) -> h5py.Dataset:
    """A 1-D float dataset (of ``length`` entries when given) whose entries are all finite, checked
    in chunks (a release can be gigabytes); returns the dataset, for reads on demand."""
    ds, dtype = _dataset(parent, name, None if length is None else (length,), 1)
    if dtype.kind != "f":
        raise bad(parent, name, "strings" if dtype.kind in "SUO" else f"{dtype} values", "must hold a float array")
    for lo in range(0, ds.shape[0], chunk):
        try:
            part = np.asarray(ds[lo : lo + chunk], dtype=np.float64)
        except READ_ERRORS as exc:
            raise missing(parent, name, f"cannot be read ({type(exc).__name__}: {exc})") from None
        bad_at = np.flatnonzero(~np.isfinite(part))
        if bad_at.size:
            i = int(bad_at[0])
            raise bad(
                parent,
                name,
                part[i].item(),
                f"must be finite: NaN or infinite values are not measurements (entry {lo + i})",
            )
    return ds


def custom_queries(parent) -> dict:
    """The {path: CustomQueries} a plan or workload file carries (group ``custom``), each checked:
    attribute names as strings, queries a finite 2-D float array."""
    group = child(parent, "custom", group=True)
    out = {}
    for name in members(group):
        g = child(group, name, group=True)
        path = text(g, "path")
        attributes = tuple(strings(g, "attributes"))
        queries = array(g, "queries", kind="f", ndim=2)
        out[path] = CustomQueries(attributes, queries)
    return out


PROBE_SECONDS = 60.0  # reading a file's structure takes well under a second; HDF5 loops forever on some corruptions
_PROBE_FULL_BYTES = 64 << 20  # numeric datasets up to this size are read whole by the probe


def _touch(obj) -> None:
    for name in obj.attrs:
        obj.attrs[name]
    if isinstance(obj, h5py.Dataset) and obj.shape is not None:
        nbytes = math.prod(obj.shape) * obj.dtype.itemsize
        if nbytes > os.path.getsize(obj.file.filename):
            return  # the checked read refuses it without reading
        if h5py.check_string_dtype(obj.dtype) is not None or nbytes <= _PROBE_FULL_BYTES or not obj.shape:
            obj[()]
        else:
            obj[(0,) * len(obj.shape)], obj[tuple(n - 1 for n in obj.shape)]


def _walk(path) -> None:
    with h5py.File(path, "r") as f:
        _touch(f)
        f.visititems(lambda name, obj: _touch(obj))


def probe(path, what: str, seconds: float | None = None) -> None:
    """Read an HDF5 file's structure (every attribute, every dataset's strings and small arrays)
    in a forked child process before the checked reads: HDF5's C library crashes or loops forever
    on some corrupted metadata, which no check in Python can catch. A child killed by a signal, or
    still reading after ``seconds`` (default :data:`PROBE_SECONDS`), makes the file an InputError naming it; any error
    the child meets is left to the checked reads that follow (they name the field). POSIX only: elsewhere,
    and for a path that is not a file, nothing is probed. For command-line use (it forks)."""
    if not hasattr(os, "fork") or not os.path.isfile(path):
        return
    seconds = PROBE_SECONDS if seconds is None else seconds
    read_end, write_end = os.pipe()  # closed by the child's exit, however it ends: wakes the parent at once
    pid = os.fork()
    if pid == 0:  # the child: no output, no cleanup of the parent's state, only the exit status
        try:
            import faulthandler  # optional

            os.close(read_end)
            faulthandler.disable()
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            _walk(path)
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        finished, _, _ = select.select([read_end], [], [], seconds)
    finally:
        os.close(read_end)
    if not finished:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise InputError(
            what, str(path), f"is corrupted: the HDF5 library was still reading its structure after {seconds:g} s"
        )
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise InputError(
            what,
            str(path),
            f"is corrupted: the HDF5 library crashed reading it ({signal.Signals(os.WTERMSIG(status)).name})",
        )


def read_budget(
    obj, name: str = "budget", *, pure: bool = False, neighbours: tuple[str, ...] = NEIGHBOURS
) -> Budget | PureBudget:
    """A plan file's budget record (written by :func:`querysmasher.io.put_budget`), every key
    checked: ``{"epsilon"}`` for a pure epsilon-DP plan (``pure``), else ``{"beta", "source",
    "delta"}`` and optionally ``"neighbours"`` (one of ``neighbours``; add-remove when absent)."""
    b = json_attr(obj, name)
    if pure:
        if set(b) != {"epsilon"}:
            raise bad(obj, name, sorted(b), "must hold epsilon only (pure epsilon-DP)", attr=True)
        return PureBudget(float(json_number(obj, name, b, "epsilon", positive=True)))
    if set(b) - {"neighbours"} != {"beta", "source", "delta"}:
        raise bad(obj, name, sorted(b), "must hold beta, source, delta and optionally neighbours", attr=True)
    return Budget(
        float(json_number(obj, name, b, "beta", positive=True)),
        json_text(obj, name, b, "source"),
        float(json_number(obj, name, b, "delta", positive=True, hi=1)),
        json_text(obj, name, b, "neighbours", choices=neighbours, default="add-remove"),
    )
