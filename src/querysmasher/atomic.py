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
import glob
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import InputError

__all__ = [
    "atomic_path",
    "atomic_folder",
    "terminate_as_exit",
    "write_text",
    "write_json",
    "clean_stale_temp_files",
    "check_output",
    "FOLDER_TMP_SUFFIX",
]


def _is_same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same target after symlinks, or the same inode (hard links)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # either is absent: not the same existing file
        return False


def check_output(path: str | os.PathLike, field: str = "--out", *, inputs=(), folder: bool = False) -> None:
    """The one output guard of every command: refuse (InputError), before any record is read, an
    output path that

    * is (symlinks resolved, hard links included) one of the command's ``inputs``, or -- for a
      ``folder`` output, where ``.csv`` and ``.json`` files are written -- holds such an input file;
    * is a symbolic link: outputs are renamed into place, which would replace the link, not write
      where it points;
    * exists and is neither a regular file nor a folder (a device, a FIFO, a socket);
    * is an existing folder where a file is written, or an existing file where a folder is;
    * is an existing folder that is not empty, for a ``folder`` output (a folder is published whole,
      never written into: a published release's files are never replaced);
    * cannot be written: its nearest existing folder is not a writable folder.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); (d / "t.csv").write_text("x")
    1
    >>> check_output(d, "--csv", folder=True)
    Traceback (most recent call last):
    ...
    querysmasher.errors.InputError: --csv '...': exists and is not an empty folder (a folder output is never written into)
    """  # noqa: E501  (a doctest's expected output is one line)
    p = Path(path)
    for given in inputs:
        if given is None:
            continue
        q = Path(given)
        if _is_same_file(p, q):
            raise InputError(field, str(p), f"is the input {str(q)!r}: an output never overwrites an input")
        if folder and q.suffix.lower() in (".csv", ".json"):
            inside = os.path.realpath(q)
            if os.path.commonpath([os.path.realpath(p), inside]) == os.path.realpath(p):
                raise InputError(
                    field, str(p), f"holds the input {str(q)!r}, which a table could overwrite: choose another folder"
                )
    if p.is_symlink():
        raise InputError(
            field, str(p), "is a symbolic link: give the path it points to (an output replaces what is at its path)"
        )
    if p.exists() and not (p.is_file() or p.is_dir()):
        raise InputError(
            field, str(p), "is not a regular file or folder (a device, FIFO or socket): outputs are written to files"
        )
    if folder and p.exists() and not p.is_dir():
        raise InputError(field, str(p), "is a file, not a folder")
    if folder and p.is_dir() and any(p.iterdir()):
        raise InputError(field, str(p), "exists and is not an empty folder (a folder output is never written into)")
    if not folder and p.is_dir():
        raise InputError(field, str(p), "is a folder, not a file path")
    parent = p if folder and p.is_dir() else p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(field, str(p), f"cannot be written (folder {str(parent)!r} is not writable)")


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
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600
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
    import numpy as np  # loads numpy: import querysmasher.cli stays fast

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_json(path: str | os.PathLike, value) -> None:
    """Write JSON (indented, sorted keys; numpy scalars and arrays as numbers and lists) atomically."""
    write_text(path, json.dumps(value, indent=1, sort_keys=True, default=_json_default) + "\n")


FOLDER_TMP_SUFFIX = ".folder-tmp"


def clean_stale_temp_files(root: str | os.PathLike, min_age_seconds: float = 300.0) -> int:
    """Remove temporary files (``.NAME.*.tmp``) and folders (``.NAME.*.folder-tmp``: a killed
    release's partial noisy tables, never to be published) left under ``root`` by killed jobs, if
    older than ``min_age_seconds``. Returns how many were removed."""
    now, removed = time.time(), 0
    root = Path(root)
    if not root.is_dir():
        return 0
    for p in [*root.rglob(".*.tmp"), *root.rglob(f".*{FOLDER_TMP_SUFFIX}")]:
        with contextlib.suppress(OSError):
            if now - p.lstat().st_mtime >= min_age_seconds:
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                else:
                    p.unlink()
                removed += 1
    return removed


@contextlib.contextmanager
def terminate_as_exit() -> Iterator[None]:
    """SIGTERM (a cancelled job, ``kill``) and SIGHUP raise SystemExit inside the block, so its
    clean-up runs; outside the main thread (where handlers cannot be set) nothing changes."""
    import signal  # import querysmasher.cli stays fast
    import threading  # import querysmasher.cli stays fast

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike, field: str = "--out") -> Iterator[Path]:
    """A new folder published whole or not at all: the block fills a temporary folder beside
    ``path`` (``.{name}.{random}.folder-tmp``), which is renamed to ``path`` when the block ends
    without an exception, and removed otherwise (SIGTERM and SIGHUP included).

    ``path`` must be absent or an empty folder; it is never replaced once it holds anything, so of
    two writers at once one wins and the other gets an InputError. While the block runs a lock
    (``.{name}.lock``) makes a second writer fail at once. Temporary folders of ``path`` left by a
    killed writer are removed when the lock is taken: they are never published.
    """
    import fcntl  # import querysmasher.cli stays fast

    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise InputError(field, str(path), "exists and is not an empty folder (it is never overwritten)")
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = path.parent / f".{path.name}.lock"
    with open(lock_path, "a") as lock, terminate_as_exit():
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise InputError(field, str(path), "another writer is writing it now") from None
        try:
            if path.exists() and (not path.is_dir() or any(path.iterdir())):  # again, under the lock
                raise InputError(field, str(path), "exists and is not an empty folder (it is never overwritten)")
            for stale in path.parent.glob(f".{glob.escape(path.name)}.*{FOLDER_TMP_SUFFIX}"):
                shutil.rmtree(stale, ignore_errors=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=FOLDER_TMP_SUFFIX, dir=path.parent))
            try:
                yield tmp
                os.chmod(tmp, 0o777 & ~_umask())
                if path.exists():
                    try:
                        path.rmdir()  # empty (checked above); fails if another writer filled it
                    except OSError:
                        raise InputError(
                            field, str(path), "was written by another writer meanwhile; this one is discarded"
                        ) from None
                try:
                    os.rename(tmp, path)  # never replaces a folder that holds anything
                except OSError:
                    raise InputError(
                        field, str(path), "was written by another writer meanwhile; this one is discarded"
                    ) from None
            except OSError as exc:
                raise InputError(
                    field, str(path), f"could not be completed ({exc.strerror or exc}); nothing was published"
                ) from None
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        finally:
            with contextlib.suppress(OSError):
                lock_path.unlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
