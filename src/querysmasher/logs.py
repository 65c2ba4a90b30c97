"""Logging and progress bars: the ``querysmasher`` logger, where its lines go, and tqdm bars.

The library never prints. Every module logs to a child of the ``querysmasher`` logger
(``logging.getLogger(__name__)``): one INFO line per finished step (a solved subproblem with its
loss, gap and seconds; views measured; tables reconstructed), details at DEBUG, problems at
WARNING. Nothing derived from records is ever logged (no counts, no answers). A program chooses
where the lines go with :func:`configure`; without it, Python's default applies (warnings and
errors only, on stderr). Long loops are wrapped in :func:`progress`, which draws a tqdm bar only
when a program asked for bars (the CLI does so when stderr is a terminal).

>>> import io
>>> buf = io.StringIO()
>>> _ = configure(buf, "INFO")
>>> logger.info("solved %d subproblems", 3)
>>> logger.warning("fixed noise seed")
>>> print(buf.getvalue(), end="")
querysmasher: solved 3 subproblems
querysmasher: warning: fixed noise seed
>>> list(progress(range(3), desc="views"))  # no bar unless configure(..., progress=True)
[0, 1, 2]
>>> unconfigure()
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterable, Iterator
from typing import IO, TypeVar

__all__ = ["logger", "configure", "configured", "unconfigure", "progress", "level_from_flags"]

logger = logging.getLogger("querysmasher")

T = TypeVar("T")

_state: dict = {"handler": None, "progress": False}


class _Formatter(logging.Formatter):
    """``querysmasher: message``, with the level named for warnings and errors; optionally timed."""

    def __init__(self, timestamps: bool):
        super().__init__("%(asctime)s %(message)s" if timestamps else "%(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else record.levelname.lower() + ": "
        saved = record.msg, record.args
        record.msg, record.args = f"querysmasher: {level}{record.getMessage()}", ()
        try:
            return super().format(record)
        finally:
            record.msg, record.args = saved


class _Handler(logging.StreamHandler):
    """A stream handler that writes through tqdm (bars stay intact) and, when given no stream,
    follows ``sys.stderr`` as it is at each line (so a redirected stderr, such as a Snakemake
    rule's log file, receives the lines)."""

    def __init__(self, stream: IO[str] | None):
        self._follow = stream is None
        super().__init__(stream)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr if self._follow else self._stream

    @stream.setter
    def stream(self, value) -> None:
        self._stream = value

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record)
            if _state["progress"] and "tqdm" in sys.modules:
                from tqdm import tqdm  # optional

                tqdm.write(msg, file=self.stream)
            else:
                self.stream.write(msg + "\n")
            self.flush()
        except Exception:  # logging must never break the work it reports on
            self.handleError(record)


def level_from_flags(verbose: int = 0, quiet: bool = False) -> int:
    """CLI flags to a level: -q ERROR, default WARNING, -v INFO, -vv DEBUG."""
    if quiet:
        return logging.ERROR
    return {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)


def configure(
    target: str | os.PathLike | IO[str] | None = None,
    level: int | str = "INFO",
    *,
    progress: bool = False,
    timestamps: bool | None = None,
) -> logging.Handler:
    """Send the ``querysmasher`` log lines at ``level`` and above to ``target``: a path (appended
    to, with timestamps), an open text stream, or None for whatever ``sys.stderr`` is when a line is
    written. Replaces the handler of a previous call; ``progress`` turns tqdm bars on."""
    unconfigure()
    if isinstance(target, (str, os.PathLike)):
        stream: IO[str] | None = open(target, "a", encoding="utf-8")  # noqa: SIM115 (closed by unconfigure)
        timestamps = True if timestamps is None else timestamps
    else:
        stream = target
    handler = _Handler(stream)
    handler.setFormatter(_Formatter(bool(timestamps)))
    handler.owns_stream = isinstance(target, (str, os.PathLike))
    logger.addHandler(handler)
    logger.setLevel(level if isinstance(level, int) else level.upper())
    logger.propagate = False  # the lines are printed here once, not again by a root handler
    _state.update(handler=handler, progress=bool(progress))
    return handler


def unconfigure() -> None:
    """Remove the handler installed by :func:`configure` (closing a file it opened)."""
    handler = _state["handler"]
    if handler is not None:
        logger.removeHandler(handler)
        if getattr(handler, "owns_stream", False):
            handler.stream.close()
    logger.setLevel(logging.NOTSET)
    logger.propagate = True
    _state.update(handler=None, progress=False)


@contextlib.contextmanager
def configured(
    target: str | os.PathLike | IO[str] | None = None,
    level: int | str = "INFO",
    *,
    progress: bool = False,
    timestamps: bool | None = True,
) -> Iterator[logging.Handler]:
    """:func:`configure` for the duration of a ``with`` block (the workflow's scripts use it inside
    their log-file redirection, so a rule's ``log:`` file receives the INFO lines, timed)."""
    handler = configure(target, level, progress=progress, timestamps=timestamps)
    try:
        yield handler
    finally:
        unconfigure()


def progress(
    items: Iterable[T], *, desc: str, total: int | None = None, unit: str = "view"
) -> Iterator[T] | Iterable[T]:
    """``items`` with a tqdm bar on stderr when bars are on (see :func:`configure`), else as is."""
    if not _state["progress"]:
        return items
    from tqdm import tqdm  # only programs that draw bars pay for the import

    return tqdm(items, desc=desc, total=total, unit=unit, leave=False, dynamic_ncols=True, file=sys.stderr)
