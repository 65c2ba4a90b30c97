"""Resource requests (``mem_mb``, ``runtime``) of the workflow's per-experiment jobs, from what each
job will hold: the data set's size, the workload's view sizes and the plan's solutions.

Solve jobs take theirs from the solver's own estimate (:func:`querysmasher.pipeline.cache.estimate_cost`,
stored in the manifest); decompose jobs from :func:`~querysmasher.pipeline.cache.estimate_decompose_mem_mb`.
Every other job holds, besides its process (``BASE_MEM_MB``):

* the plan: every solution the experiment's manifest lists (``result_mb`` of each subproblem) and,
  when its views are held over their query factor, the decomposition that re-derives them;
* one workload view at a time (measure, reconstruct and evaluate stream views): its table and
  answers, and the query matrix of a non-product view;
* the records (measure, evaluate): an integer table of records x attributes, and pandas with its
  CSV parser when the data set is a file;
* for a whole-workload method (``hdmm``, ``mm``, ``qsplus``, planner plugins): what its planner
  declares, ``resources(workload, stage) -> {"mem_mb", "seconds"}`` (its strategy while planning,
  the full data vector or its operators while measuring and reconstructing); a planner that
  declares nothing is given the rest of this model only.

The coefficients are measured (``bench/requests.py`` over the paper grid's benchmark files: the
band is ``peak <= mem_mb <= 3 x peak + 500 MB``). A job that exceeds its request is retried with
twice as much (``attempt`` in the rules' resource callables, :func:`retry`).

>>> from querysmasher.pipeline.config import Experiment
>>> e = Experiment(
...     "x", "s", "synthetic:n=10,d=3", False, "prefix:1,2", "qs", 1.0, 0, {"synthetic": {"records": 1000, "seed": 0}}
... )
>>> r = stage_resources("measure", e)
>>> BASE_MEM_MB <= r["mem_mb"] < 1000, r["runtime"] >= 5
(True, True)
>>> retry(r["mem_mb"], 2) == 2 * r["mem_mb"]
True
"""

from __future__ import annotations

import math
import os
from functools import lru_cache

from .cache import (
    BASE_MEM_MB,
    DECOMPOSE_HELD_FACTOR,
    STORED_SOLUTIONS_HELD,
    distinct_nonproduct_views,
    estimate_decompose_mem_mb,
    runtime_minutes,
)
from .datasets import resolve_data_source

__all__ = [
    "stage_resources",
    "stage_threads",
    "grid_resources",
    "release_resources",
    "decompose_runtime_minutes",
    "retry",
    "STAGES",
    "records_shape",
]

STAGES = ("allocate", "measure", "reconstruct", "evaluate", "release", "aggregate", "paper")

# bytes per entry held at once (measured; see the module docstring)
VIEW_TABLE_BYTES = 8 * 6  # a view's marginal / table and its working copies (B x, X^+ B^T y, CSV)
ANSWER_BYTES = 8 * 4  # per answer of the largest view: answers, variances and their copies
RECORD_BYTES = 8 * 3  # per record and attribute: the int64 table, a column copy, the encoded cells
CSV_BYTES_FACTOR = 6  # pandas' parse of a CSV file, per byte of the file
PANDAS_MB = 120  # importing pandas and pyarrow (a CSV data set only)
SOLUTION_COPIES = 1.25  # a plan's solutions as read from their files and held by the plan (Table 4's
# random:1,2 over [20]^40: 780 dense 400-cell solutions, 998 MB, allocate peaked at 985 MB)
SECONDS_PER_MB = 0.05  # time limit: per MB touched, on top of the job's start
DECOMPOSE_SECONDS_PER_MB = 0.3  # random:1,2 over [20]^40: 1.35 GB in 30 s alone, 162 s on a loaded machine
MATPLOTLIB_MB = 100  # aggregate and paper_table draw figures
METRICS_MB = 0.05  # per experiment's metrics read by aggregate / paper_table


def retry(value: float, attempt: int) -> int:
    """A request on the given attempt: doubled on each retry (``attempt`` counts from 1)."""
    return int(math.ceil(value * 2 ** (max(int(attempt), 1) - 1)))


def decompose_runtime_minutes(mem_mb: float) -> int:
    """Time limit of a decompose job from its memory estimate (the Grams it builds): its start plus
    ``SECONDS_PER_MB`` per MB built."""
    return runtime_minutes(5.0 + DECOMPOSE_SECONDS_PER_MB * max(mem_mb - BASE_MEM_MB, 0.0))


def records_shape(data: dict) -> tuple[int, float, bool]:
    """(records, file MB, is a CSV file) of an experiment's data set config (its resolved source)."""
    if not data:
        return 0, 0.0, False
    src = resolve_data_source(data)
    if src["kind"] == "csv":
        size = os.path.getsize(src["path"])
        with open(src["path"], "rb") as fh:
            head = fh.read(1 << 16)
        per_row = max(len(head) / max(head.count(b"\n"), 1), 1.0)
        return int(size / per_row) + 1, size / 2**20, True
    return int(src.get("records", 0)), 0.0, False


def _workload(experiment):
    """The experiment's parsed workload (read only here)."""
    return _parsed_workload(experiment.schema_spec, experiment.all_numeric, experiment.workload)


@lru_cache(maxsize=4096)
def _parsed_workload(schema_spec: str, all_numeric: bool, workload: str):
    # parsed once per process: Snakemake asks a rule's threads and resources many times
    from ..schema import parse_schema  # in the body: the stage function's fingerprint follows it
    from ..workload import parse_workload  # loads numpy only where it is used

    return parse_workload(workload, parse_schema(schema_spec, all_numeric=all_numeric))


def _largest_view_mb(workload) -> float:
    """MB of the largest view one streaming stage holds: its table, its answers and, for a
    non-product view, its query matrix (answers x cells)."""
    sizes = workload.schema.sizes
    largest = 0.0
    for v in workload.views:
        cells = math.prod(sizes[i] for i in v.attrs)
        answers = workload.view_count(v)
        held = VIEW_TABLE_BYTES * cells + ANSWER_BYTES * answers + (0 if v.factors else 8.0 * answers * cells)
        largest = max(largest, held)
    return largest / 2**20


def _query_factor_mb(workload) -> float:
    """MB of re-deriving the query factors of a plan's views held over them (non-product views with
    fewer queries than cells, :mod:`querysmasher.queryfactor`): their subquery matrices, as decompose
    builds them (views with as many queries as cells, e.g. random, keep their Grams in the plan)."""
    held = largest = 0.0
    for c, rows, _ in distinct_nonproduct_views(workload):
        if rows < c:  # views with as many queries as cells (random) keep their Grams in the plan
            held += rows * c * 8.0
            largest = max(largest, 3.0 * rows * c * 8.0)
    return (DECOMPOSE_HELD_FACTOR * held + largest) / 2**20


# evaluate (true answers of every query, one view at a time) splits its views over threads when
# the workload has this many queries per thread: the Table 7 n = 40 row (632 million queries,
# 20 s on one thread) was the last job of the grid's critical path on many cores
EVALUATE_QUERIES_PER_THREAD = 100_000_000
MAX_EVALUATE_THREADS = 8
ALLOCATE_MB_PER_THREAD = 5000  # solutions' MB per thread of allocate's variance report (about 2 minutes of it)


def stage_threads(
    stage: str, experiment, manifest: dict | None = None, *, measured: bool = True, max_variance: bool = True
) -> int:
    """Threads of one job of ``stage``: evaluate of a measured experiment with more than
    ``EVALUATE_QUERIES_PER_THREAD`` queries splits its views over up to ``MAX_EVALUATE_THREADS``
    (processes of one BLAS thread); allocate splits its per-query variance report the same way when
    the plan's solutions (its problem's ``manifest``) hold more than ``ALLOCATE_MB_PER_THREAD``
    (the report reads each dense mechanism once and costs about c^3 per view: 106 s for the 4.5 GB of
    Table 4's random:1,2 over [30]^40, about 35 minutes for the 37 GB over [50]^40 on one core;
    ``max_variance=False``: the job leaves that report out, ``allocate.max_variance: false``); every
    other job runs on one.

    >>> from querysmasher.pipeline.config import Experiment
    >>> e = Experiment("x", "s", "synthetic:n=40,d=40", False, "range:1+affine:2+prefix:3", "qs", 1.0, 0, {})
    >>> stage_threads("evaluate", e), stage_threads("measure", e), stage_threads("evaluate", e, measured=False)
    (7, 1, 1)
    >>> big = {"subproblems": [{"cost": {"result_mb": 18.6}}] * 780}  # random:1,2 over [40]^40, qs
    >>> stage_threads("allocate", e, big), stage_threads("allocate", e, {"subproblems": []})
    (4, 1)
    """
    if stage == "allocate":
        from ..methods import get_method  # loads numpy only where it is used

        if get_method(experiment.method).whole_workload or experiment.objective != "sum" or not max_variance:
            return 1
        streamed = SOLUTION_COPIES * sum(_result_mbs(manifest))
        return int(min(MAX_EVALUATE_THREADS, max(1, math.ceil(streamed / ALLOCATE_MB_PER_THREAD))))
    if stage != "evaluate" or not measured:
        return 1
    queries = _workload(experiment).query_count()
    return int(min(MAX_EVALUATE_THREADS, max(1, math.ceil(queries / EVALUATE_QUERIES_PER_THREAD))))


def _result_mbs(manifest: dict | None) -> list[float]:
    """The solutions' sizes (MB) a plan over ``manifest``'s subproblems holds, ascending."""
    return sorted(float(s.get("cost", {}).get("result_mb", 0.0)) for s in (manifest or {}).get("subproblems", []))


def stage_resources(
    stage: str, experiment, manifest: dict | None = None, *, measured: bool = True, max_variance: bool = True
) -> dict:
    """``{"mem_mb", "runtime"}`` of one job of ``stage`` for ``experiment`` (a
    :class:`~querysmasher.pipeline.config.Experiment`), given its problem's manifest when it exists
    (the solutions the plan holds), whether the experiment is measured (released) and whether its
    allocate reports the largest query variance (:func:`stage_threads`)."""
    from ..methods import get_method  # loads numpy only where it is used

    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r} (known: {', '.join(STAGES)})")
    w = _workload(experiment)
    whole = get_method(experiment.method).whole_workload
    mb = 0.0
    # the plan: its solutions, and the decomposition that re-derives query-factor views
    if stage == "evaluate" and not measured:  # plan only: evaluate reads the plan's stored summary
        return {"mem_mb": BASE_MEM_MB, "runtime": runtime_minutes(5.0)}
    streamed = 0.0  # MB read one solution at a time: time, not memory
    seconds = 0.0  # what a whole-workload planner declares for the job
    if whole:
        declared = get_method(experiment.method).declared("resources")
        if declared is not None and (stage == "allocate" or measured):
            need = declared(w, stage)
            mb += float(need.get("mem_mb", 0.0))
            seconds += float(need.get("seconds", 0.0))
    else:
        mb += _query_factor_mb(w)
        subs = (manifest or {}).get("subproblems", [])
        results = _result_mbs(manifest)
        if stage == "allocate" and experiment.objective == "sum":
            # the solve files' solutions are read one at a time (cache.StoredSolutions holds the last
            # few), by the job and by each worker its variance report forks
            workers = stage_threads(stage, experiment, manifest, max_variance=max_variance)
            mb += SOLUTION_COPIES * sum(results[-STORED_SOLUTIONS_HELD:]) * (1 + (workers if workers > 1 else 0))
            streamed = SOLUTION_COPIES * sum(results) / workers
        else:
            mb += SOLUTION_COPIES * sum(results)
        if stage == "allocate" and experiment.objective != "sum":  # the max objective re-solves every view here
            mb += max((float(s.get("cost", {}).get("work_mb", 0.0)) for s in subs), default=0.0)
    if stage == "allocate" or (stage in ("measure", "reconstruct", "evaluate", "release") and measured):
        # one view at a time: allocate's predicted per-query variances too (Table 4's circular:1,2
        # over [50]^40, 6.25 million queries per view: allocate peaked at 289 MB)
        # one view at a time in each of evaluate's workers
        mb += _largest_view_mb(w) * (stage_threads(stage, experiment, measured=measured) if stage == "evaluate" else 1)
    if stage in ("measure", "evaluate", "release") and measured:
        records, file_mb, csv = records_shape(getattr(experiment, "data", None) or {})
        mb += RECORD_BYTES * records * len(w.schema.sizes) / 2**20
        if csv:
            mb += PANDAS_MB + CSV_BYTES_FACTOR * file_mb
    mem = BASE_MEM_MB + mb
    return {
        "mem_mb": int(math.ceil(mem)),
        "runtime": runtime_minutes(5.0 + seconds + SECONDS_PER_MB * max(mb, streamed)),
    }


def grid_resources(stage: str, experiments: int) -> dict:
    """``{"mem_mb", "runtime"}`` of a whole-grid job (``aggregate``, ``paper``): it reads every
    experiment's metrics file and draws figures.

    >>> grid_resources("aggregate", 10)["mem_mb"] < 1000
    True
    """
    if stage not in ("aggregate", "paper"):
        raise ValueError(f"not a whole-grid stage: {stage!r}")
    mb = MATPLOTLIB_MB + METRICS_MB * experiments
    return {"mem_mb": int(math.ceil(BASE_MEM_MB + mb)), "runtime": runtime_minutes(5.0 + 0.05 * experiments)}


def release_resources(spec) -> dict:
    """``{"mem_mb", "runtime"}`` of a ``release`` job (a :class:`querysmasher.release.ReleaseSpec`):
    it plans the spec's tables (their decomposition), reads the custodian's CSV file and streams the
    views as measure and reconstruct do."""
    from ..release import release_workload  # loads yaml, numpy only where it is used
    from ..schema import parse_schema  # in the body: the stage function's fingerprint follows it

    w = release_workload(spec.tables, parse_schema(spec.domain))
    records, file_mb, _ = records_shape({"csv": spec.data})
    mb = (estimate_decompose_mem_mb(w) - BASE_MEM_MB) + _largest_view_mb(w)
    mb += RECORD_BYTES * records * len(w.schema.sizes) / 2**20 + PANDAS_MB + CSV_BYTES_FACTOR * file_mb
    return {"mem_mb": int(math.ceil(BASE_MEM_MB + mb)), "runtime": runtime_minutes(5.0 + SECONDS_PER_MB * mb)}
