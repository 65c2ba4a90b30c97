"""Atomic file writes: every output goes to a temporary file in its folder, renamed into place.

A killed run never leaves a half-written file under a final name; temporary files are named
``.{name}.{random}.tmp`` (:func:`clean_stale_temp_files` reclaims those of killed jobs).

>>> import tempfile, os
>>> path = Path(tempfile.mkdtemp()) / "x.json"
>>> write_json(path, {"b": 1, "a": [1.5]})
>>> path.read_text()
'{\\n "a": [\\n  1.5\\n ],\\n "b": 1\\n}\\n'
>>> with atomic_path(path, exclusive=True) as tmp:  # present: left untouched
...     _ = tmp.write_text("other")
>>> json.loads(path.read_text())["b"], sorted(os.listdir(path.parent))
(1, ['x.json'])
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "write_text", "write_json", "clean_stale_temp_files"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, exclusive: bool = False) -> Iterator[Path]:
    """A temporary path beside ``path`` (usual permissions), renamed to ``path`` when the block
    ends without an exception and removed in any case.

    ``exclusive``: publish only if ``path`` does not exist (a hard link, which fails when the target
    exists; on file systems without hard links a rename: last writer wins). For content-addressed
    files, where an existing file has the same content and must keep its mtime."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600
    try:
        yield tmp
        if not exclusive:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
            except OSError:  # no hard links on this file system
                if not path.exists():
                    os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write text atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_json(path: str | os.PathLike, value) -> None:
    """Write JSON (indented, sorted keys; numpy scalars and arrays as numbers and lists) atomically."""
    write_text(path, json.dumps(value, indent=1, sort_keys=True, default=_json_default) + "\n")


def clean_stale_temp_files(root: str | os.PathLike, min_age_seconds: float = 300.0) -> int:
    """Remove temporary files (``.NAME.*.tmp``) left under ``root`` by killed jobs, if older than
    ``min_age_seconds``. They never look like finished outputs; this only reclaims space."""
    now, removed = time.time(), 0
    root = Path(root)
    if not root.is_dir():
        return 0
    for p in root.rglob(".*.tmp"):
        with contextlib.suppress(OSError):
            if now - p.stat().st_mtime >= min_age_seconds:
                p.unlink()
                removed += 1
    return removed
