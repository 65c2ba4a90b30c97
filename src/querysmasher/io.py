"""HDF5 files of the project: written atomically and reproducibly, with a format version.

Every file is written to a temporary name in the same folder and renamed into place, so a killed
run never leaves a half-written file under the final name. Datasets and groups are created without
timestamps, so the same content gives byte-identical files (content-addressed caching relies on it).

>>> import tempfile, os, numpy as np
>>> path = os.path.join(tempfile.mkdtemp(), "x.h5")
>>> with atomic_h5(path, kind="example") as f:
...     _ = put(f, "a", np.arange(3))
>>> read_kind(path)
'example'
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np

from . import __version__
from .accounting import PureBudget
from .atomic import atomic_path, check_output
from .errors import InputError
from .h5read import READ_ERRORS, integer
from .workload import CustomQueries

__all__ = [
    "FORMAT_VERSION",
    "atomic_h5",
    "put",
    "new_group",
    "read_kind",
    "open_h5",
    "put_json",
    "get_json",
    "put_budget",
    "put_custom_queries",
    "get_custom_queries",
]

FORMAT_VERSION = 1


def _group_plist() -> h5py.h5p.PropGCID:
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_obj_track_times(False)
    return gcpl


def new_group(parent: h5py.Group, name: str) -> h5py.Group:
    """A child group without timestamps."""
    gid = h5py.h5g.create(parent.id, name.encode(), gcpl=_group_plist())
    return h5py.Group(gid)


def put(group: h5py.Group, name: str, data) -> h5py.Dataset:
    """A dataset without timestamps (strings stored as UTF-8)."""
    arr = np.asarray(data)
    if arr.dtype.kind in "UO":
        arr = np.asarray([str(x) for x in np.ravel(arr)], dtype=h5py.string_dtype()).reshape(arr.shape)
    return group.create_dataset(name, data=arr, track_times=False)


def put_json(group: h5py.Group | h5py.Dataset, name: str, value) -> None:
    group.attrs[name] = json.dumps(value, sort_keys=True)


def put_budget(group: h5py.Group, budget, name: str = "budget") -> None:
    """A plan file's budget record (read back by :func:`querysmasher.h5read.read_budget`): epsilon
    for a pure epsilon-DP budget, else beta, the form it was given in, delta and the neighbours."""
    if isinstance(budget, PureBudget):
        put_json(group, name, {"epsilon": budget.epsilon})
    else:
        put_json(
            group,
            name,
            {"beta": budget.beta, "source": budget.source, "delta": budget.delta, "neighbours": budget.neighbours},
        )


def get_json(group: h5py.Group | h5py.Dataset, name: str):
    return json.loads(group.attrs[name])


class _WriteOnce:
    """The file object HDF5 writes through (h5py's ``fileobj`` driver): the first failed write,
    truncate or flush (a full disk, a quota, a size limit) is recorded and every later one becomes
    a no-op, so HDF5 itself never sees an error. It would not survive one: after a failed flush
    its library crashes the process at exit (a segmentation fault, seen with ENOSPC). The caller
    checks :attr:`error` after closing and throws the file away."""

    def __init__(self, path: Path):
        self._f = open(path, "w+b", buffering=0)  # noqa: SIM115 (closed by atomic_h5)
        self.error: OSError | None = None

    def _guarded(self, fn, arg, default):
        if self.error is None:
            try:
                return fn(arg)
            except OSError as exc:
                self.error = exc
        return default

    def write(self, data) -> int:
        n = memoryview(data).nbytes
        return self._guarded(self._f.write, data, n)

    def truncate(self, size: int) -> int:
        return self._guarded(self._f.truncate, size, size)

    def flush(self) -> None:
        self._guarded(lambda _: self._f.flush(), None, None)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def readinto(self, buffer) -> int:
        return self._f.readinto(buffer)

    def read(self, size: int = -1) -> bytes:
        return self._f.read(size)

    def close(self) -> None:
        self._f.close()


@contextmanager
def atomic_h5(path: str | os.PathLike, *, kind: str, exclusive: bool = False) -> Iterator[h5py.File]:
    """Open ``path`` for writing through a temporary file renamed into place on success
    (:func:`querysmasher.atomic.atomic_path`; ``exclusive``: only if ``path`` is absent).
    An output path that cannot be written is an InputError before anything is created; a write
    that fails on the way (a full disk) is an InputError after it, and no file is left."""
    check_output(path, "output file")
    with atomic_path(path, exclusive=exclusive) as tmp:
        raw = _WriteOnce(tmp)
        try:
            with h5py.File(raw, "w", track_order=False) as f:
                f.attrs["kind"] = kind
                f.attrs["format_version"] = FORMAT_VERSION
                f.attrs["querysmasher_version"] = __version__
                yield f
        finally:
            raw.close()
        if raw.error is not None:  # raised before atomic_path publishes anything
            why = os.strerror(raw.error.errno) if raw.error.errno else str(raw.error)
            raise InputError("output file", str(path), f"could not be written ({why}); nothing was written")


def put_custom_queries(parent: h5py.Group, custom: dict) -> None:
    """Custom query matrices of a workload ({path: CustomQueries}) as group ``custom``."""
    group = new_group(parent, "custom")
    for i, (p, cq) in enumerate(sorted(custom.items())):
        g = new_group(group, str(i))
        g.attrs["path"] = p
        put(g, "attributes", np.array(cq.attributes, dtype=object))
        put(g, "queries", cq.queries)


def get_custom_queries(parent: h5py.Group) -> dict:
    """The {path: CustomQueries} stored by :func:`put_custom_queries`."""

    def text(x):
        return x.decode() if isinstance(x, bytes) else str(x)

    return {
        str(g.attrs["path"]): CustomQueries(tuple(text(a) for a in g["attributes"][()]), g["queries"][()])
        for g in parent["custom"].values()
    }


def open_h5(path: str | os.PathLike, kind: str) -> h5py.File:
    """Open a project file for reading, checking its kind and format version (an InputError naming
    the file otherwise, also when h5py cannot read its header)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{kind} file", str(path), "does not exist")
    try:
        f = h5py.File(path, "r")
    except READ_ERRORS as exc:
        raise InputError(f"{kind} file", str(path), f"is not a readable HDF5 file ({exc})") from None
    try:
        try:
            found = f.attrs.get("kind")
        except READ_ERRORS as exc:
            raise InputError(
                f"{kind} file",
                str(path),
                f"is corrupted: its 'kind' attribute cannot be read ({type(exc).__name__}: {exc})",
            ) from None
        if not isinstance(found, str) or found != kind:
            shown = found if isinstance(found, str) else type(found).__name__
            raise InputError(f"{kind} file", str(path), f"holds a {shown!r}, not a {kind!r}")
        version = integer(f, "format_version", default=-1)
        if version != FORMAT_VERSION:
            raise InputError(
                f"{kind} file", str(path), f"has format version {version}; this querysmasher reads {FORMAT_VERSION}"
            )
    except BaseException:
        f.close()
        raise
    return f


def read_kind(path: str | os.PathLike) -> str:
    """The ``kind`` attribute of a project file (an InputError for anything else)."""
    try:
        with h5py.File(path, "r") as f:
            kind = f.attrs["kind"]
    except READ_ERRORS as exc:
        raise InputError("file", str(path), f"is not a querysmasher HDF5 file ({type(exc).__name__})") from None
    if not isinstance(kind, str):
        raise InputError(
            "file", str(path), f"is not a querysmasher HDF5 file (its kind is a {type(kind).__name__}, not a string)"
        )
    return str(kind)
