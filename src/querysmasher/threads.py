"""The thread budget of a process: how many BLAS/OpenMP threads numerical work may use.

A process declares its budget once and every solver asks :func:`budget` instead of guessing:

* a workflow job: its rule's ``threads``, set by :func:`cap_process` before numpy is imported (the
  environment variables OpenBLAS, OpenMP and MKL read when they load);
* the CLI: ``--threads N`` (default 1); an API call: its ``threads`` argument (default 1), both
  through :func:`limited` for the duration of the call, so a caller's own numpy work is untouched.

Why one thread unless told: on a shared machine OpenBLAS threads that find their cores busy spin.
Measured on 2 cores, the Table 7 row (``querysmasher plan --schema synthetic:n=40,d=40 --workload
range:1+affine:2+prefix:3 --method qs``) took 6.6 s alone with two BLAS threads, 35.0 s beside two
busy single-threaded processes with two BLAS threads and 18.2-19.4 s with one (BENCHMARKS.md,
"Threads"). Where more
threads are given, the planners spend them across views (processes, one BLAS thread each:
:func:`parallel_map`), which does not depend on BLAS's threading of small matrices.

>>> with limited(3):
...     budget()
3
>>> budget()
1
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from .errors import InputError

__all__ = [
    "ENV_VARS",
    "BLAS_THREADED_CELLS",
    "budget",
    "cap_process",
    "limited",
    "at_most",
    "parallel_map",
    "check_threads",
    "available_cores",
    "cap_to_cores",
]

# every variable a BLAS or OpenMP runtime numpy/scipy may load reads for its pool size
ENV_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)

# views of at least this many cells are worth BLAS threads (c x c eigendecompositions and products);
# smaller ones run a thread each, several at a time (below it one thread is as fast, and faster on a
# busy machine: 0.026 s vs 0.045 s for a 397 x 397 eigh, see linalg.eigh_sym)
BLAS_THREADED_CELLS = 1000

log = logging.getLogger(__name__)

_budget = 1  # the process's declared budget (1 unless a face or a job said otherwise)

_controller = None  # the BLAS/OpenMP pools of this process, found once (see _pools)
_controller_modules = -1  # len(sys.modules) when _controller was built


def check_threads(n, field: str = "threads") -> int:
    """``n`` as a positive int, or :class:`~querysmasher.errors.InputError` naming ``field``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(field, n, "must be a whole number of threads, at least 1")
    return n


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity where the OS reports one, else the machine's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on macOS and Windows
        return os.cpu_count() or 1


def cap_to_cores(n: int, field: str = "threads") -> int:
    """``n`` threads, or the cores available when fewer, with one warning naming ``field``: more
    processes and BLAS threads than cores only contend (``--threads 1000000000`` forked a worker per
    view, 41 on 2 cores). A face's own request; :func:`limited` itself takes any budget."""
    cores = available_cores()
    if check_threads(n, field) > cores:
        log.warning("%s %d capped to %d, the cores available", field, n, cores)
        return cores
    return n


def budget() -> int:
    """The threads this process may use for numerical work (BLAS and parallel view solves)."""
    return _budget


def cap_process(n: int) -> None:
    """Declare ``n`` threads for the whole process: the environment of the BLAS/OpenMP runtimes
    (effective when numpy has not been imported yet; a workflow script calls this first) and, when
    numpy is already loaded, its live thread pools."""
    global _budget
    _budget = check_threads(int(n))
    for var in ENV_VARS:
        os.environ[var] = str(_budget)
    if "numpy" in sys.modules:
        _pools().limit(limits=_budget)  # applied now, for the rest of the process


def _pools():
    """The process's thread pools as a ``threadpoolctl.ThreadpoolController``, found again only after
    a module was imported (an extension may bring its own BLAS, as cvxpy's solvers do): finding them
    scans every loaded library, 4 ms a call on 2 cores, where a per-view solve or a measurement takes
    it again and again."""
    global _controller, _controller_modules
    if _controller is None or len(sys.modules) != _controller_modules:
        from threadpoolctl import ThreadpoolController  # import querysmasher.cli stays fast

        _controller = ThreadpoolController()
        _controller_modules = len(sys.modules)
    return _controller


@contextmanager
def limited(n: int) -> Iterator[int]:
    """Run the body with a budget of ``n`` threads (BLAS pools capped at ``n``); restored after."""
    global _budget
    n = check_threads(n)
    previous = _budget
    _budget = n
    try:
        with _pools().limit(limits=n):
            yield n
    finally:
        _budget = previous


def at_most(n: int | None = None):
    """A context capping BLAS at ``min(n, budget())`` threads (``n=None``: the whole budget).

    Inner loops of many small products (40 x 40 against 40 x 1,600) pass 1: OpenBLAS threads cost
    more than they save there (1.3 ms with one thread vs 4.7 ms with two for three mode products on
    64,000 cells, measured idle; far worse when other processes share the cores).
    """
    return _pools().limit(limits=budget() if n is None else max(1, min(n, budget())), user_api="blas")


_parallel_task: Callable | None = None  # the function a forked worker applies (inherited, never pickled)


def _run_task(item):
    return _parallel_task(item)


def _worker_start() -> None:
    global _budget
    _budget = 1
    _pools().limit(limits=1)


def parallel_map(fn: Callable, items: Iterable, *, min_items: int = 2) -> Iterator:
    """``map(fn, items)`` in order, over ``budget()`` forked processes of one BLAS thread each when
    the budget is above 1 and there are at least ``min_items`` items; in this process otherwise.

    ``fn`` and what it closes over reach the workers by fork (nothing is pickled but the items and
    the results), so it may use large shared read-only state. Where fork is unavailable, or in a
    worker (no nested pools), it runs serially.
    """
    global _parallel_task
    items = list(items)
    workers = min(budget(), len(items))
    import multiprocessing as mp  # import querysmasher.cli stays fast

    if (
        workers < 2
        or len(items) < min_items
        or "fork" not in mp.get_all_start_methods()
        or mp.parent_process() is not None
    ):
        yield from map(fn, items)
        return
    from concurrent.futures import ProcessPoolExecutor  # import querysmasher.cli stays fast

    _parallel_task = fn
    try:
        with ProcessPoolExecutor(
            max_workers=workers, mp_context=mp.get_context("fork"), initializer=_worker_start
        ) as pool:
            yield from pool.map(_run_task, items)
    finally:
        _parallel_task = None
