"""Publishable table files: the CSV format every plan kind's tables and answers are written in.

:func:`write_table_files` takes what a reconstruction of any plan kind gives -- one (attrs, cell
estimates or None, their variances or None, why omitted) per table, one (workload view, callable ->
(answers, variances)) per workload view, the estimated total -- and writes (see
:mod:`querysmasher.reconstruct` for which tables are given):

* ``<attrs>.csv``: per-cell ``estimate``, ``std_error`` and the confidence interval's ``lower`` and
  ``upper`` bounds (:mod:`querysmasher.intervals`: exact under Gaussian noise); a table given as
  None gets no file, and ``tables.json`` says why; ``tables.json`` also gives the confidence, what
  the coverage is, and per table the multiplier of its simultaneous interval (every cell at once:
  :mod:`querysmasher.simultaneous`) and how it was found;
* ``answers/<family>__<attrs>.csv``: every workload query's ``answer``, ``std_error``, ``lower`` and
  ``upper``, queries numbered per attribute for product families, each file's simultaneous interval
  in ``tables.json`` as for a table;
* ``postprocessed/<attrs>.csv`` (optional, clearly labelled): per-cell estimates made non-negative and
  integer, each table rescaled to the same estimated total. Biased; for display only.
* ``consistent/<attrs>.csv`` (optional, clearly labelled): non-negative tables that agree on every
  shared margin, estimated from the measurements (:mod:`querysmasher.consistent`). Biased.

File names come from attribute names (data): never a path, never shared. Every file is written to a
temporary name and renamed into place.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .atomic import atomic_path, write_json
from .errors import InputError
from .families import count_1d
from .filenames import distinct_file_names
from .intervals import DEFAULT_CONFIDENCE, bounds, check_confidence, interval_kind, is_gaussian, multiplier
from .simultaneous import bound, multipliers
from .workload import WorkloadView

__all__ = ["write_table_files", "simultaneous_multipliers", "MAX_ANSWERS", "VALUE_COLUMNS", "check_table_columns"]

# Columns the table files add beside the attributes' own (a cell table's estimate, standard error
# and interval, a postprocessed table's count, an answer file's query number and answer).
VALUE_COLUMNS = ("estimate", "std_error", "lower", "upper", "count", "query", "answer")

MAX_ANSWERS = 1_000_000  # the most queries of one answer file


def check_table_columns(schema, field: str = "domain") -> None:
    """Refuse (InputError) a schema with an attribute named like a table file's value column: its
    column would be overwritten by (or be read as) the estimate. Called before any record is read.

    >>> from querysmasher.schema import parse_schema, _schema_from_mapping
    >>> check_table_columns(parse_schema("synthetic:n=2,d=2"))
    >>> check_table_columns(_schema_from_mapping("d", {"age": 3, "estimate": 2}))
    Traceback (most recent call last):
    ...
    querysmasher.errors.InputError: domain attribute 'estimate': is the name of a column of the table files (estimate, std_error, lower, upper, count, query, answer): rename the attribute
    """  # noqa: E501  (a doctest's expected output is one line)
    for name in schema.names:
        if name in VALUE_COLUMNS:
            raise InputError(
                f"{field} attribute",
                name,
                f"is the name of a column of the table files ({', '.join(VALUE_COLUMNS)}): rename the attribute",
            )


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


def _cell_frame(plan, attrs) -> pd.DataFrame:
    names, sizes = plan.schema.names, plan.schema.sizes
    shape = tuple(sizes[a] for a in attrs)
    idx = np.indices(shape).reshape(len(attrs), -1) if attrs else np.zeros((0, 1), dtype=int)
    return pd.DataFrame({names[a]: idx[k] for k, a in enumerate(attrs)})


def _postprocess(table: np.ndarray, total: float) -> np.ndarray:
    """Non-negative integers summing to round(max(total, 0)) (largest remainders)."""
    x = np.clip(table, 0, None)
    target = int(round(max(total, 0.0)))
    if x.sum() <= 0 or target == 0:
        return np.zeros(len(x), dtype=np.int64)
    x = x * (target / x.sum())
    base = np.floor(x).astype(np.int64)
    extra = target - int(base.sum())
    if extra > 0:
        base[np.argsort(-(x - base), kind="stable")[:extra]] += 1
    return base


def _with_interval(frame: pd.DataFrame, column: str, values, variances, z: float) -> pd.DataFrame:
    """``values`` as ``column``, then ``std_error`` and the interval ``lower``, ``upper`` (+- z std_error)."""
    frame[column] = values
    frame["std_error"], frame["lower"], frame["upper"] = bounds(values, variances, z)
    return frame


def _answers_frame(plan, v: WorkloadView, answers: np.ndarray, variances: np.ndarray, z: float) -> pd.DataFrame:
    names, sizes = plan.schema.names, plan.schema.sizes
    if v.factors:
        counts = tuple(count_1d(f, sizes[a]) for f, a in zip(v.factors, v.attrs))
        idx = np.indices(counts).reshape(len(counts), -1)
        frame = pd.DataFrame({f"{names[a]}_{f}_query": idx[k] for k, (a, f) in enumerate(zip(v.attrs, v.factors))})
    else:
        frame = pd.DataFrame({"query": np.arange(len(answers))})
    return _with_interval(frame, "answer", np.asarray(answers), variances, z)


def simultaneous_multipliers(
    plan, tables, views, *, confidence: float = DEFAULT_CONFIDENCE, max_answers: int = MAX_ANSWERS
) -> dict:
    """{("table", attrs) or ("answers", k): (z, how)} of the simultaneous intervals of the files
    :func:`write_table_files` writes for the tables ``tables`` (attribute tuples) and the workload
    views ``views`` (the workload's, in order; a view of more than ``max_answers`` queries has no
    file), from the plan alone (:func:`querysmasher.simultaneous.multipliers`): a release finds them
    before any record is read, so nothing that fails here fails after the noise is drawn."""
    confidence = check_confidence(confidence)
    written = [(k, v) for k, v in enumerate(views) if plan.workload.view_count(v) <= max_answers]
    return multipliers(plan, tables, written, confidence)


def write_table_files(
    folder: str | Path,
    plan,
    tables,
    view_answers,
    *,
    total: float | None,
    postprocessed: bool = False,
    max_answers: int = MAX_ANSWERS,
    confidence: float = DEFAULT_CONFIDENCE,
    consistent: dict | None = None,
    simultaneous: dict | None = None,
) -> dict:
    """The publishable files of a plan of any kind: ``tables`` is one (attrs, cell
    estimates or None, their variances or None, why omitted) per table, ``view_answers`` one
    (workload view, callable -> (answers, variances)) per workload view in the workload's order
    (computed only for views that are written), ``total`` the estimated total the postprocessed
    tables are rescaled to (None: no postprocessed tables); ``confidence``: the intervals' level;
    ``consistent``: {attrs: non-negative consistent cell estimates} to write beside them (None: none);
    ``simultaneous``: the files' simultaneous multipliers, as :func:`simultaneous_multipliers` gives
    them (None: found here)."""
    folder = Path(folder)
    check_table_columns(plan.schema)
    confidence = check_confidence(confidence)
    gaussian = is_gaussian(plan)
    z = multiplier(confidence, gaussian=gaussian)
    index: dict = {
        "confidence": confidence,
        "interval": interval_kind(gaussian),
        "z": z,
        "tables": [],
        "answers": [],
        "postprocessed": [],
    }
    names = plan.schema.names
    views = [attrs for attrs, *_ in tables]
    # file names from attribute names (data read from a domain file): never a path, never shared
    table_files = dict(zip(views, distinct_file_names([names[a] for a in attrs] for attrs in views)))
    view_answers = list(view_answers)
    answer_files = distinct_file_names(
        (v.family, *(names[a] for a in v.attrs), *((str(k),) if v.family == "custom" else ()))
        for k, (v, _) in enumerate(view_answers)
    )
    counts = [plan.workload.view_count(v) for v, _ in view_answers]
    if simultaneous is None:
        measured = [attrs for attrs, table, var, _ in tables if table is not None and var is not None]
        answered = [v for v, _ in view_answers]
        simultaneous = simultaneous_multipliers(
            plan, measured, answered, confidence=confidence, max_answers=max_answers
        )
    for attrs, table, var, why in tables:
        entry = {"view": [names[a] for a in attrs]}
        if table is None or var is None:
            entry.update(file=None, omitted=why)
        else:
            frame = _with_interval(_cell_frame(plan, attrs), "estimate", np.asarray(table), var, z)
            path = folder / f"{table_files[attrs]}.csv"
            _write_csv(frame, path)
            # every cell of the table at once: estimate +- simultaneous_z std_error
            z_all, how = simultaneous.get(("table", attrs)) or bound(plan, confidence, len(frame))
            entry.update(file=path.name, simultaneous_z=z_all, simultaneous=how)
            if postprocessed and total is not None:
                pp = _cell_frame(plan, attrs)
                pp["count"] = _postprocess(table, total)
                pp_path = folder / "postprocessed" / f"{table_files[attrs]}.csv"
                _write_csv(pp, pp_path)
                index["postprocessed"].append(str(pp_path.relative_to(folder)))
        if consistent is not None and attrs in consistent:
            agreed = _cell_frame(plan, attrs)
            agreed["estimate"] = consistent[attrs]
            agreed_path = folder / "consistent" / f"{table_files[attrs]}.csv"
            _write_csv(agreed, agreed_path)
            entry["consistent"] = str(agreed_path.relative_to(folder))
        index["tables"].append(entry)
    for k, (v, compute) in enumerate(view_answers):
        name = answer_files[k]
        if counts[k] > max_answers:
            index["answers"].append({"view": name, "file": None, "omitted": f"{counts[k]} queries > {max_answers}"})
            continue
        path = folder / "answers" / f"{name}.csv"
        answers, variances = compute()
        _write_csv(_answers_frame(plan, v, answers, variances, z), path)
        entry = {"view": name, "file": str(path.relative_to(folder)), "weight": v.weight}
        if variances is not None:  # every answer of the file at once: answer +- simultaneous_z std_error
            z_all, how = simultaneous.get(("answers", k)) or bound(plan, confidence, counts[k])
            entry.update(simultaneous_z=z_all, simultaneous=how)
        index["answers"].append(entry)
    if consistent is not None:
        index["consistent_note"] = (
            "non-negative tables that agree on every shared margin, the least-squares fit to the noisy "
            "measurements under those constraints; biased (no standard errors); the unbiased estimates "
            "with standard errors and intervals are the tables above"
        )
    if postprocessed:
        index["postprocessed_note"] = (
            "non-negative integer counts, each table rescaled to the estimated total; biased, "
            "for display only; the unbiased estimates with standard errors are the tables above"
        )
    write_json(folder / "tables.json", index)
    return index
