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
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np

from . import __version__
from .errors import InputError

__all__ = ["FORMAT_VERSION", "atomic_h5", "put", "new_group", "read_kind", "open_h5", "put_json", "get_json"]

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


def get_json(group: h5py.Group | h5py.Dataset, name: str):
    return json.loads(group.attrs[name])


@contextmanager
def atomic_h5(path: str | os.PathLike, *, kind: str) -> Iterator[h5py.File]:
    """Open ``path`` for writing through a temporary file renamed into place on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual permissions
    try:
        with h5py.File(tmp, "w", track_order=False) as f:
            f.attrs["kind"] = kind
            f.attrs["format_version"] = FORMAT_VERSION
            f.attrs["querysmasher_version"] = __version__
            yield f
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def open_h5(path: str | os.PathLike, kind: str) -> h5py.File:
    """Open a project file for reading, checking its kind and format version."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{kind} file", str(path), "does not exist")
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise InputError(f"{kind} file", str(path), f"is not a readable HDF5 file ({exc})") from None
    found = f.attrs.get("kind")
    if found != kind:
        f.close()
        raise InputError(f"{kind} file", str(path), f"holds a {found!r}, not a {kind!r}")
    version = int(f.attrs.get("format_version", -1))
    if version != FORMAT_VERSION:
        f.close()
        raise InputError(f"{kind} file", str(path), f"has format version {version}; this querysmasher reads {FORMAT_VERSION}")
    return f


def read_kind(path: str | os.PathLike) -> str:
    with h5py.File(path, "r") as f:
        return str(f.attrs["kind"])
