"""Where the workflow's files live: experiment names and slugs, every path under ``results/``, solver namespaces.

Layout of ``results/`` (all paths relative to the working directory)::

    results/problems/{problem}/workload.h5          schema + workload spec (+ custom queries)
    results/problems/{problem}/decomposition.json   residual views: attrs, names, key, scale
    results/problems/{problem}/manifest.json        distinct subproblems: key, cells, terms, cost, solve file
    results/subproblems/{key}.h5              unit-trace Gram of one subproblem (content-addressed)
    results/batches/{bid}.json                member keys of a batch of cheap subproblems
    results/solves/{ns}/{key}.h5              solution of one expensive subproblem (shared)
    results/solves/{ns}/batch-{bid}.h5        solutions of a batch of cheap subproblems (shared)
    results/{experiment}/plan.h5, plan.json   the plan and its summary
    results/{experiment}/measurements.h5      the release (the only stage that reads records)
    results/{experiment}/answers.h5           answers and variances (+ tables/ CSV when asked)
    results/{experiment}/metrics.json         predicted vs empirical RMSE, phase times, peak memory
    results/tables/*.csv, results/figures/*.png   the grid, aggregated
    results/releases/{name}/                  a custodian's release: its published files and nothing else
    results/logs/releases/{name}.log          its log (release.json, no record count)
    results/benchmarks/releases/{name}.tsv    its time and memory: kept with the custodian, not published

An experiment is (schema, workload, method, budget, seed); its folder is
``{schema}__{workload-slug}__{method}__{budget-slug}__seed{seed}`` (:func:`experiment_name`).
Its *problem* -- (schema, workload, method), :func:`problem_name` -- holds what does not depend on
the budget or the seed (the workload file and the decomposition), so experiments that differ only
there share one workload and decompose job: a new budget re-runs allocation and later stages only.
``{ns}`` (:func:`solver_namespace`) is the method, plus a hash of non-default solver options,
plus -- only for solvers with ``prepare`` (they read workload-wide context) -- a hash of the
workload (:func:`workload_id`), so a solution file is always a function of its path.

>>> experiment_name("adult", "hybrid:1,2+abs:2@0.5", "qs", 1.0, 3)
'adult__hybrid-1-2_abs-2w0.5__qs__beta1__seed3'
>>> solve_path("qs", "batch-0123"), split_solve_path("results/solves/qs/batch-0123.h5")
('results/solves/qs/batch-0123.h5', ('qs', 'batch-0123'))
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import InputError

__all__ = [
    "RESULTS",
    "KEY_PATTERN",
    "NS_PATTERN",
    "slugify",
    "budget_slug",
    "experiment_name",
    "problem_name",
    "problem_dir",
    "subproblem_path",
    "batch_path",
    "solve_path",
    "solve_benchmark_path",
    "split_solve_path",
    "workload_id",
    "solver_namespace",
    "method_of_namespace",
    "RESERVED_RELEASE_NAMES",
    "check_release_name",
    "release_dir",
    "release_log_path",
    "release_benchmark_path",
]

RESULTS = "results"
RELEASE_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# Folder names the workflow uses for its own files: a release of that name could be mistaken for
# them (or, with an earlier layout, receive them), so no release is called so.
RESERVED_RELEASE_NAMES = frozenset(
    {"logs", "benchmarks", "tables", "figures", "problems", "subproblems", "batches", "solves", "paper", "releases"}
)


def check_release_name(name) -> str:
    """A release name: a folder name of letters, digits, ``.``, ``_``, ``-`` (not first), at most 100
    characters, not one of the workflow's own folder names; an InputError otherwise.

    >>> check_release_name("census-2026")
    'census-2026'
    >>> check_release_name("logs")
    Traceback (most recent call last):
    ...
    querysmasher.errors.InputError: release name 'logs': is a name the workflow uses for its own folders (batches, benchmarks, figures, logs, paper, problems, releases, solves, subproblems, tables): choose another
    """  # noqa: E501  (a doctest's expected output is one line)
    if not isinstance(name, str) or not RELEASE_NAME_PATTERN.match(name):
        raise InputError(
            "release name", name, "must be 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if name.lower() in RESERVED_RELEASE_NAMES:
        raise InputError(
            "release name",
            name,
            f"is a name the workflow uses for its own folders ({', '.join(sorted(RESERVED_RELEASE_NAMES))}): "
            "choose another",
        )
    return name


def release_dir(name: str) -> str:
    """The published folder of release ``name`` (checked by :func:`check_release_name` when the
    config is read; ``"{name}"`` in the rule): nothing else is ever written under it."""
    return f"{RESULTS}/releases/{name}"


def release_log_path(name: str) -> str:
    return f"{RESULTS}/logs/releases/{name}.log"


def release_benchmark_path(name: str) -> str:
    return f"{RESULTS}/benchmarks/releases/{name}.tsv"


KEY_PATTERN = r"[0-9a-f]{20}"
NS_PATTERN = r"[a-z][a-z0-9]*(?:-o[0-9a-f]{8})?(?:-c[0-9a-f]{12})?"

_SLUG_MAP = {":": "-", ",": "-", "+": "_", "@": "w", "[": "", "]": "", "=": "", "/": "-", "\\": "-", " ": ""}


def slugify(text: str, max_len: int = 80) -> str:
    """A folder-safe form of a spec: ``:`` ``,`` ``/`` -> ``-``, ``+`` -> ``_``, ``@`` -> ``w``,
    ``[`` ``]`` ``=`` dropped, anything else outside ``[A-Za-z0-9._-]`` -> ``-``; never ``__`` (the
    experiment separator). Long slugs are cut and end with a hash of the full text.

    >>> slugify("random[seed=3]:1,2"), slugify("prefix:1+affine:2")
    ('randomseed3-1-2', 'prefix-1_affine-2')
    """
    from ..linalg import content_hash  # loads numpy only where it is used

    s = "".join(_SLUG_MAP.get(c, c) for c in str(text))
    s = re.sub(r"[^A-Za-z0-9._-]", "-", s)
    s = re.sub(r"-{2,}", "-", s)
    s = re.sub(r"_{2,}", "_", s).strip("-_.")
    if not s or len(s) > max_len:
        s = (s[: max_len - 13].rstrip("-_.") + "-" + content_hash(str(text))[:12]).lstrip("-")
    return s


def budget_slug(value) -> str:
    """``beta1``, ``beta0.5``, ``rho0.5``, ``mu2``, ``eps1-delta1e-06``.

    >>> budget_slug(1.0), budget_slug("rho=0.25"), budget_slug("eps=1,delta=1e-6")
    ('beta1', 'rho0.25', 'eps1-delta1e-06')
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"beta{float(value):g}"
    parts = [p.split("=", 1) for p in str(value).replace(" ", "").split(",")]
    return "-".join(("eps" if k == "epsilon" else k) + f"{float(v):g}" for k, v in parts)


def experiment_name(schema: str, workload: str, method: str, budget, seed: int) -> str:
    """The folder name of one experiment of the grid."""
    return "__".join([slugify(schema), slugify(workload), method, budget_slug(budget), f"seed{int(seed)}"])


def problem_name(schema: str, workload: str, method: str) -> str:
    """The folder name of an experiment's problem (its workload file and decomposition).

    >>> problem_name("adult", "hybrid:1,2+abs:2@0.5", "qs")
    'adult__hybrid-1-2_abs-2w0.5__qs'
    """
    return "__".join([slugify(schema), slugify(workload), method])


def problem_dir(problem: str) -> str:
    return f"{RESULTS}/problems/{problem}"


def subproblem_path(key: str) -> str:
    return f"{RESULTS}/subproblems/{key}.h5"


def batch_path(bid: str) -> str:
    return f"{RESULTS}/batches/{bid}.json"


def solve_path(ns: str, file_id: str) -> str:
    """``file_id`` is a subproblem key or ``batch-{bid}``."""
    return f"{RESULTS}/solves/{ns}/{file_id}.h5"


def solve_benchmark_path(ns: str, file_id: str) -> str:
    return f"{RESULTS}/benchmarks/solve/{ns}/{file_id}.tsv"


def split_solve_path(path: str | Path) -> tuple[str, str]:
    """(namespace, file id) of a :func:`solve_path`."""
    p = Path(path)
    return p.parent.name, p.stem


def workload_id(workload) -> str:
    """Content hash of a workload (schema, spec, custom queries): the context of ``prepare``."""
    from ..linalg import content_hash  # loads numpy only where it is used

    parts = [json.dumps(workload.schema.to_dict(), sort_keys=True), workload.spec]
    for p, cq in sorted(workload.custom.items()):
        parts += [p, json.dumps(list(cq.attributes)), cq.queries.astype(float).tobytes()]
    return content_hash(*parts)


def solver_namespace(method: str, options: dict | None = None, context: str = "") -> str:
    """Folder of a method's solution files: ``{method}``, ``-o{hash}`` when solver options are set,
    ``-c{workload id}`` when the solver reads workload context (``prepare``).

    >>> solver_namespace("qs"), solver_namespace("qs", {"target_gap": 1e-3})
    ('qs', 'qs-o3b61a7b5')
    """
    from ..linalg import content_hash  # loads numpy only where it is used

    ns = method
    if options:
        ns += "-o" + content_hash(json.dumps(options, sort_keys=True))[:8]
    if context:
        ns += "-c" + context[:12]
    return ns


def method_of_namespace(ns: str) -> str:
    return ns.split("-")[0]
