"""File-level stages of the Snakemake workflow (``workflow/Snakefile``): one function per rule.

The workflow's scripts (``scripts/*.py``) only read their ``snakemake`` object and call one function
of this module; everything they do is here, testable without Snakemake.

Layout of ``results/`` (all paths relative to the working directory)::

    results/{experiment}/workload.h5          schema + workload spec (+ custom queries)
    results/{experiment}/decomposition.json   residual views: attrs, names, key, scale
    results/{experiment}/manifest.json        distinct subproblems: key, cells, terms, cost, solve file
    results/subproblems/{key}.h5              unit-trace Gram of one subproblem (content-addressed)
    results/batches/{bid}.json                member keys of a batch of cheap subproblems
    results/solves/{ns}/{key}.h5              solution of one expensive subproblem (shared)
    results/solves/{ns}/batch-{bid}.h5        solutions of a batch of cheap subproblems (shared)
    results/{experiment}/plan.h5, plan.json   the plan and its summary
    results/{experiment}/measurements.h5      the release (the only stage that reads records)
    results/{experiment}/answers.h5           answers and variances (+ tables/ CSV when asked)
    results/{experiment}/metrics.json         predicted vs empirical RMSE, phase times, peak memory
    results/tables/*.csv, results/figures/*.png   the grid, aggregated

An experiment is (schema, workload, method, budget, seed); its folder is
``{schema}__{workload-slug}__{method}__{budget-slug}__seed{seed}`` (:func:`experiment_name`).

Content addressing: a subproblem key is the hash of its unit-trace Gram
(:meth:`SubworkloadGram.canonical`), so equal keys mean equal problems. Subproblem and batch files
are written only if absent (:func:`write_subproblem`): an existing file is never touched, its mtime
never changes, so Snakemake never re-solves it (a solve file is redone only when missing or when the
code of its solver changed: :func:`library_fingerprint`). ``{ns}`` (:func:`solver_namespace`) is the
method, plus a hash of non-default solver options, plus -- only for solvers with ``prepare`` (they
read workload-wide context) -- a hash of the workload, so a solution file is always a function of
its path.

>>> experiment_name("adult", "hybrid:1,2+abs:2@0.5", "qs", 1.0, 3)
'adult__hybrid-1-2_abs-2w0.5__qs__beta1__seed3'
>>> plan_batches(["0" * 19 + "1", "f" * 20], 1)
[['00000000000000000001'], ['ffffffffffffffffffff']]
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import inspect
import json
import math
import os
import re
import sys
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "RESULTS", "Experiment", "slugify", "budget_slug", "parse_budget", "experiment_name", "expand_grid",
    "check_config", "format_validation_error", "library_fingerprint", "solver_namespace", "method_of_namespace",
    "workload_id", "data_source", "data_inputs", "subproblem_path", "batch_path", "solve_path",
    "solve_benchmark_path", "write_workload_file", "read_workload_file", "write_subproblem",
    "read_subproblem", "estimate_cost", "plan_batches", "batch_id", "decompose_to_files", "solve_files",
    "read_solutions", "assemble_plan_from_files", "synthetic_records", "load_dataset", "measure_to_file",
    "reconstruct_to_file", "evaluate", "read_benchmark", "aggregate", "write_json", "clean_stale_temp_files",
    "logged",
]

RESULTS = "results"
DEFAULT_DELTA = 1e-6
KEY_PATTERN = r"[0-9a-f]{20}"
NS_PATTERN = r"[a-z][a-z0-9]*(?:-o[0-9a-f]{8})?(?:-c[0-9a-f]{12})?"
BUDGET_PATTERN = r"^(?:(?:beta|rho|mu)=[0-9.eE+-]+|(?:eps|epsilon)=[0-9.eE+-]+,delta=[0-9.eE+-]+)$"

# Cost model of one subproblem solve (seconds and bytes), calibrated on a 2-core machine (numpy,
# OpenBLAS): a 1-D qs factor of n = 100 takes ~3.5 s, a dense qs view of 400 / 900 / 1,600 cells
# 4-17 s / 45 s / 47 s (capped by the solver's iteration limit), wff on 1,600 dense cells 0.4 s.
QS_FACTOR_SECONDS = 3.5  # per 1-D factor of size 100, scaling as n^2
QS_DENSE_SECONDS = 60.0  # per dense view of 1,000 cells, scaling as c^2
DENSE_BYTES_FACTOR = 16  # working copies of a c x c float64 matrix in a dense solve
BASE_MEM_MB = 400  # Python + numpy + scipy + h5py


# ----------------------------------------------------------------------------- naming


_SLUG_MAP = {":": "-", ",": "-", "+": "_", "@": "w", "[": "", "]": "", "=": "", "/": "-", "\\": "-", " ": ""}


def slugify(text: str, max_len: int = 80) -> str:
    """A folder-safe form of a spec: ``:`` ``,`` ``/`` -> ``-``, ``+`` -> ``_``, ``@`` -> ``w``,
    ``[`` ``]`` ``=`` dropped, anything else outside ``[A-Za-z0-9._-]`` -> ``-``; never ``__`` (the
    experiment separator). Long slugs are cut and end with a hash of the full text.

    >>> slugify("random[seed=3]:1,2"), slugify("prefix:1+affine:2")
    ('randomseed3-1-2', 'prefix-1_affine-2')
    """
    from .linalg import content_hash

    s = "".join(_SLUG_MAP.get(c, c) for c in str(text))
    s = re.sub(r"[^A-Za-z0-9._-]", "-", s)
    s = re.sub(r"-{2,}", "-", s)
    s = re.sub(r"_{2,}", "_", s).strip("-_.")
    if not s or len(s) > max_len:
        s = (s[: max_len - 13].rstrip("-_.") + "-" + content_hash(str(text))[:12]).lstrip("-")
    return s


def parse_budget(value, delta: float = DEFAULT_DELTA):
    """A :class:`Budget` from a config value: a number (beta) or ``beta=B``, ``rho=R``, ``mu=U``,
    ``eps=E,delta=D``. ``delta`` is the delta at which epsilon is reported for the other forms."""
    from .accounting import Budget
    from .errors import InputError

    if isinstance(value, bool):
        raise InputError("budget", value, "must be a number (beta) or beta=B, rho=R, mu=U, eps=E,delta=D")
    if isinstance(value, (int, float)):
        return Budget.from_beta(float(value), delta)
    text = str(value).strip()
    if not re.match(BUDGET_PATTERN, text):
        raise InputError("budget", value, "must be a number (beta) or beta=B, rho=R, mu=U, eps=E,delta=D")
    parts = dict(p.split("=", 1) for p in text.split(","))
    try:
        nums = {k: float(v) for k, v in parts.items()}
    except ValueError:
        raise InputError("budget", value, "holds a value that is not a number") from None
    if "beta" in nums:
        return Budget.from_beta(nums["beta"], delta)
    if "rho" in nums:
        return Budget.from_rho(nums["rho"], delta)
    if "mu" in nums:
        return Budget.from_mu(nums["mu"], delta)
    return Budget.from_epsilon_delta(nums.get("eps", nums.get("epsilon")), nums["delta"])


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


def subproblem_path(key: str) -> str:
    return f"{RESULTS}/subproblems/{key}.h5"


def batch_path(bid: str) -> str:
    return f"{RESULTS}/batches/{bid}.json"


def solve_path(ns: str, file_id: str) -> str:
    """``file_id`` is a subproblem key or ``batch-{bid}``."""
    return f"{RESULTS}/solves/{ns}/{file_id}.h5"


def solve_benchmark_path(ns: str, file_id: str) -> str:
    return f"{RESULTS}/benchmarks/solve/{ns}/{file_id}.tsv"


# ----------------------------------------------------------------------------- config


@dataclass
class Experiment:
    """One point of the grid (what every per-experiment rule needs from the config)."""

    name: str
    schema: str  # the name used in the grid (a key of ``schemas:`` or a schema spec)
    schema_spec: str
    all_numeric: bool
    workload: str
    method: str
    budget: object  # config value: a number (beta) or a string such as "rho=0.5"
    seed: int
    data: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "experiment": self.name, "schema": self.schema, "schema_spec": self.schema_spec, "all_numeric": self.all_numeric,
            "workload": self.workload, "method": self.method, "budget": self.budget, "seed": self.seed,
        }


def expand_grid(config: dict) -> dict[str, Experiment]:
    """Every experiment of the config's grids (a list of schemas x workloads x methods x budgets x
    seeds), by folder name. Two different experiments with the same folder name are an error."""
    from .errors import InputError

    schemas = config.get("schemas") or {}
    default_data = config.get("default_data") or {}
    out: dict[str, Experiment] = {}
    for g, grid in enumerate(config.get("grid") or []):
        for s in grid["schemas"]:
            entry = schemas.get(s, {"spec": s, "all_numeric": False, "data": default_data})
            for w in grid["workloads"]:
                for m in grid["methods"]:
                    for b in grid.get("budgets", [1.0]):
                        for seed in grid.get("seeds", [0]):
                            name = experiment_name(s, w, m, b, seed)
                            e = Experiment(name, s, entry["spec"], bool(entry.get("all_numeric", False)), w, m, b, int(seed), dict(entry.get("data") or default_data))
                            old = out.get(name)
                            if old is not None and old.as_dict() != e.as_dict():
                                raise InputError(f"config grid[{g}]", name, f"two experiments share this folder name ({old.workload!r} and {w!r}); rename a schema or reorder the spec")
                            out[name] = e
    if not out:
        raise InputError("config", "grid", "defines no experiment")
    return out


def check_config(config: dict) -> dict[str, Experiment]:
    """The checks JSON Schema cannot express, before any job runs: every schema and workload
    parses (the library's InputError text), every method has a solver, every budget is valid,
    every data set used by a release has a readable source. Returns :func:`expand_grid`."""
    from .errors import InputError
    from .schema import parse_schema
    from .solvers import SOLVERS
    from .workload import parse_workload

    experiments = expand_grid(config)
    delta = float(config.get("delta", DEFAULT_DELTA))
    parsed: dict[tuple[str, bool], object] = {}
    done: set[tuple] = set()
    for e in experiments.values():
        if e.method not in SOLVERS:
            raise InputError("config grid method", e.method, f"has no solver in this querysmasher (available: {', '.join(sorted(SOLVERS))})")
        sk = (e.schema_spec, e.all_numeric)
        if sk not in parsed:
            try:
                parsed[sk] = parse_schema(e.schema_spec, all_numeric=e.all_numeric)
            except InputError as exc:
                raise InputError(f"config schema {e.schema!r}", e.schema_spec, str(exc)) from None
        if (sk, e.workload) not in done:
            try:
                parse_workload(e.workload, parsed[sk])
            except InputError as exc:
                raise InputError(f"config workload on schema {e.schema!r}", e.workload, str(exc)) from None
            done.add((sk, e.workload))
        try:
            parse_budget(e.budget, delta)
        except InputError as exc:
            raise InputError("config grid budget", e.budget, str(exc)) from None
        if config.get("release", True):
            data_source(e.data)  # raises when no source is usable
    return experiments


def format_validation_error(config: dict, schema_path: str | Path) -> str:
    """One line per problem, naming the config key and the reason, from the JSON schema at
    ``schema_path`` (Snakemake's own validation message is a multi-line dump). Unknown keys are
    listed with the allowed ones."""
    import jsonschema
    import yaml

    schema = yaml.safe_load(Path(schema_path).read_text())
    validator = jsonschema.Draft202012Validator(schema)
    lines = []
    for err in sorted(validator.iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path]):
        path = ".".join(str(p) for p in err.absolute_path)
        sub = err.schema if isinstance(err.schema, dict) else {}
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            allowed = sorted(sub.get("properties", {}))
            for k in sorted(set(err.instance) - set(allowed)):
                if sub.get("additionalProperties") is False:
                    where = f"{path}.{k}" if path else k
                    lines.append(f"config key '{where}': unknown key" + (f" (allowed here: {', '.join(allowed)})" if allowed else ""))
            if lines:
                continue
        desc = sub.get("description")
        lines.append(f"config key '{path or '(top level)'}': {err.message}" + (f" [{desc}]" if desc else ""))
    return "invalid config: " + ("; ".join(lines) if lines else "does not match config/schema.yaml")


# ----------------------------------------------------------------------------- library fingerprint


def _package_root() -> Path:
    return Path(__file__).resolve().parent


def _module_file(root: Path, mod: str) -> tuple[Path, bool] | None:
    parts = mod.split(".")[1:]
    p = root.joinpath(*parts) if parts else root
    if (p / "__init__.py").is_file():
        return p / "__init__.py", True
    if p.with_suffix(".py").is_file():
        return p.with_suffix(".py"), False
    return None


def _imports_of(path: Path, mod: str, is_pkg: bool) -> set[str]:
    """Package-internal modules imported by a module. In a package ``__init__`` only imports outside
    function bodies count (registries import optional solvers lazily, on demand)."""
    tree = ast.parse(path.read_text())
    top = mod.split(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if is_pkg and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name.split(".")[0] == top)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target.split(".")[0] == top:
                    found.add(target)
                    found.update(f"{target}.{a.name}" for a in child.names)
            visit(child)

    visit(tree)
    return found


def _module_closure(modules, root: Path, leaves=()) -> dict[str, Path]:
    """Files of the modules and of every package-internal module they import (recursively); the
    imports of ``leaves`` are not followed (their own file is included)."""
    top = "querysmasher"
    seen: dict[str, Path] = {}
    stack = [top] + list(modules)
    while stack:
        mod = stack.pop()
        if mod in seen:
            continue
        hit = _module_file(root, mod)
        if hit is None:
            continue
        path, is_pkg = hit
        seen[mod] = path
        parts = mod.split(".")
        stack.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages run first
        if mod not in leaves:
            stack.extend(_imports_of(path, mod, is_pkg))
    return seen


def _function_closure(names) -> dict[str, str]:
    """Source of the named functions of this module and of every module-level function, class or
    plain constant they reference (recursively)."""
    g = globals()
    out: dict[str, str] = {}
    stack = list(names)
    while stack:
        n = stack.pop()
        if n in out or n not in g:
            continue
        obj = g[n]
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and getattr(obj, "__module__", None) == __name__:
            src = inspect.getsource(obj)
            out[n] = src
            import textwrap

            stack.extend({node.id for node in ast.walk(ast.parse(textwrap.dedent(src))) if isinstance(node, ast.Name)})
        elif isinstance(obj, (bool, int, float, str, tuple, frozenset, dict)):
            out[n] = repr(obj)
    return out


_STAGES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "workload": (("querysmasher.workload", "querysmasher.io"), ("write_workload_file",)),
    "decompose": (("querysmasher.decompose", "querysmasher.solvers", "querysmasher.io"), ("decompose_to_files",)),
    "solve": (("querysmasher.plan", "querysmasher.io"), ("solve_files",)),
    "allocate": (("querysmasher.plan", "querysmasher.io"), ("assemble_plan_from_files",)),
    "measure": (("querysmasher.measure", "querysmasher.data"), ("measure_to_file",)),
    "reconstruct": (("querysmasher.reconstruct",), ("reconstruct_to_file",)),
    "evaluate": (("querysmasher.reconstruct", "querysmasher.data"), ("evaluate",)),
    "aggregate": ((), ("aggregate",)),
}


def library_fingerprint(stage: str, method: str | None = None, *, root: str | Path | None = None) -> str:
    """``{version}+{hash}`` of exactly the library code a stage runs: the package-internal import
    closure of its modules (plus, for ``solve``, the method's solver module) and the source of its
    functions in this module. Put in a rule's ``params:``, it makes Snakemake re-run the rule when
    that code changes (Snakemake does not see imported modules), and only then.

    ``root`` points at another copy of the package (tests)."""
    from . import __version__

    modules, functions = _STAGES[stage]
    modules, leaves, plugin = list(modules), (), b""
    if stage == "solve" and method:
        from .solvers import get_solver

        solver = get_solver(method)
        modules.append(type(solver).__module__)
        if not type(solver).__module__.startswith("querysmasher."):  # a plugin: its version and solver file count
            from .solvers import plugin_origin

            plugin = plugin_origin(method).encode() + Path(inspect.getfile(type(solver))).read_bytes()
        if not hasattr(solver, "prepare"):
            # A context-free solve reads its Gram from a content-addressed file: the code that builds
            # Grams (families, workload, schema) cannot change its result without changing the key,
            # and of plan.py it runs write_solution only. Their own files count, not their imports.
            leaves = ("querysmasher.decompose", "querysmasher.plan")
    base = Path(root) if root else _package_root()
    h = hashlib.sha256()
    for mod, path in sorted(_module_closure(modules, base, leaves).items()):
        h.update(mod.encode() + b"\0" + path.read_bytes() + b"\0")
    for name, src in sorted(_function_closure(functions).items()):
        h.update(name.encode() + b"\0" + src.encode() + b"\0")
    if method:
        h.update(method.encode() + plugin)
    return f"{__version__}+{h.hexdigest()[:16]}"


# ----------------------------------------------------------------------------- small file helpers


def write_json(path: str | Path, value) -> None:
    """Write JSON (sorted keys) through a temporary file renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    tmp.write_text(json.dumps(value, indent=1, sort_keys=True, default=_json_default) + "\n")
    os.replace(tmp, path)


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _publish_if_absent(tmp: Path, path: Path) -> bool:
    """Move a finished temporary file to ``path`` unless ``path`` exists (atomic: hard link, which
    fails when the target exists). Returns True when this call created ``path``."""
    try:
        os.link(tmp, path)
        created = True
    except FileExistsError:
        created = False
    except OSError:  # no hard links on this file system: a rename (last writer wins, same content)
        created = not path.exists()
        if created:
            os.replace(tmp, path)
    tmp.unlink(missing_ok=True)
    return created


def clean_stale_temp_files(root: str | Path = RESULTS, min_age_seconds: float = 300.0) -> int:
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


@contextlib.contextmanager
def logged(path: str | Path | None):
    """Send stdout, stderr and warnings to a log file for the duration of a stage."""
    if not path:
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh, contextlib.redirect_stdout(fh), contextlib.redirect_stderr(fh), warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda m, c, f, ln, file=None, line=None: print(f"warning: {c.__name__}: {m}", file=fh, flush=True)
        yield


# ----------------------------------------------------------------------------- workload


def write_workload_file(path: str | Path, schema_spec: str, workload_spec: str, *, all_numeric: bool = False) -> dict:
    """Parse a schema and a workload and store them (custom queries included): every later stage
    reads the workload from this file, never from the config."""
    import numpy as np

    from .io import atomic_h5, new_group, put, put_json
    from .schema import parse_schema
    from .workload import parse_workload

    schema = parse_schema(schema_spec, all_numeric=all_numeric)
    w = parse_workload(workload_spec, schema)
    with atomic_h5(path, kind="workload") as f:
        put_json(f, "schema", schema.to_dict())
        f.attrs["schema_spec"] = str(schema_spec)
        f.attrs["workload"] = w.spec
        custom = new_group(f, "custom")
        for i, (p, cq) in enumerate(sorted(w.custom.items())):
            g = new_group(custom, str(i))
            g.attrs["path"] = p
            put(g, "attributes", np.array(cq.attributes, dtype=object))
            put(g, "queries", cq.queries)
    return {"schema": schema.name, "workload": w.spec, "views": len(w.views), "queries": w.query_count()}


def read_workload_file(path: str | Path):
    """The :class:`Workload` stored by :func:`write_workload_file`."""
    from .io import get_json, open_h5
    from .schema import Schema
    from .workload import CustomQueries, parse_workload

    def text(x):
        return x.decode() if isinstance(x, bytes) else str(x)

    with open_h5(path, "workload") as f:
        schema = Schema.from_dict(get_json(f, "schema"))
        custom = {str(g.attrs["path"]): CustomQueries(tuple(text(a) for a in g["attributes"][()]), g["queries"][()]) for g in f["custom"].values()}
        return parse_workload(str(f.attrs["workload"]), schema, custom)


def workload_id(workload) -> str:
    """Content hash of a workload (schema, spec, custom queries): the context of ``prepare``."""
    from .linalg import content_hash

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
    from .linalg import content_hash

    ns = method
    if options:
        ns += "-o" + content_hash(json.dumps(options, sort_keys=True))[:8]
    if context:
        ns += "-c" + context[:12]
    return ns


def method_of_namespace(ns: str) -> str:
    return ns.split("-")[0]


# ----------------------------------------------------------------------------- decompose


def write_subproblem(key: str, gram, store, path: str | Path) -> bool:
    """Store one unit-trace subproblem Gram (its terms and the matrices they reference), only if
    ``path`` does not exist. Returns True when written. Same key = same content, so an existing
    file is left untouched (its mtime too)."""
    import numpy as np

    from .io import atomic_h5, new_group, put

    path = Path(path)
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    with atomic_h5(tmp, kind="subproblem") as f:
        f.attrs["key"] = key
        f.attrs["cells"] = int(gram.cells)
        put(f, "sizes", np.array(gram.sizes, dtype=np.int64))
        put(f, "coef", np.array([t.coef for t in gram.terms], dtype=float))
        put(f, "dense", np.array([t.dense for t in gram.terms], dtype=bool))
        put(f, "factor_offsets", np.concatenate([[0], np.cumsum([len(t.factors) for t in gram.terms])]).astype(np.int64))
        put(f, "factors", np.array([k for t in gram.terms for k in t.factors], dtype=object))
        mats = new_group(f, "matrices")
        for k in sorted({k for t in gram.terms for k in t.factors}):
            put(mats, k, store[k])
    return _publish_if_absent(tmp, path)


def read_subproblem(path: str | Path):
    """(key, SubworkloadGram, MatrixStore) from a subproblem file. The Gram's ``attrs`` are
    positions 0..k-1 (a subproblem is shared by views on different attributes)."""
    from .decompose import GramTerm, SubworkloadGram
    from .io import open_h5
    from .linalg import MatrixStore

    with open_h5(path, "subproblem") as f:
        key = str(f.attrs["key"])
        sizes = tuple(int(x) for x in f["sizes"][()])
        coef, dense, offs = f["coef"][()], f["dense"][()], f["factor_offsets"][()]
        names = [x.decode() if isinstance(x, bytes) else str(x) for x in f["factors"][()]]
        store = MatrixStore()
        for k, ds in f["matrices"].items():
            store.add_normalised(k, ds[()])
    terms = tuple(GramTerm(float(c), tuple(names[offs[i]:offs[i + 1]]), bool(d)) for i, (c, d) in enumerate(zip(coef, dense)))
    return key, SubworkloadGram(tuple(range(len(sizes))), sizes, terms), store


def estimate_cost(sizes, n_terms: int, single_kron: bool, method: str, options: dict | None = None) -> dict:
    """Rough cost of solving one subproblem: ``seconds``, ``mem_mb``, ``runtime`` (minutes, with
    margin, for a cluster's time limit). See the constants at the top of this module.

    >>> estimate_cost((100, 100), 1, True, "rp")["seconds"] < 0.01
    True
    """
    c = math.prod(sizes) if sizes else 1
    dense_mb = 0.0
    if not sizes or method == "rp" or (method == "rpplus" and single_kron):
        seconds = 0.001  # closed form (RP+'s bases are derived once per workload, in prepare)
    elif single_kron:
        per = QS_FACTOR_SECONDS if method == "qs" else 0.05
        seconds = sum(0.01 + per * (n / 100) ** 2 for n in sizes)
        dense_mb = max(sizes) ** 2 * 8 * DENSE_BYTES_FACTOR / 2**20
    else:
        max_dense = int((options or {}).get("max_dense_cells", 2500))
        dense_mb = c * c * 8 * DENSE_BYTES_FACTOR / 2**20
        if method == "qs" and c <= max_dense:
            seconds = 1.0 + QS_DENSE_SECONDS * (c / 1000) ** 2
        else:  # Fourier weights of the dense Gram (wff, and qs's closed-form fallback)
            seconds = 0.1 + c * c * math.log2(max(c, 2)) * 2e-8
    return {"seconds": round(seconds, 3), "mem_mb": int(BASE_MEM_MB + math.ceil(dense_mb)), "runtime": int(max(5, math.ceil(3 * seconds / 60) + 2))}


def batch_id(keys) -> str:
    from .linalg import content_hash

    return content_hash(*sorted(keys))


def plan_batches(keys, batch_size: int, seconds: dict[str, float] | None = None, max_seconds: float | None = None) -> list[list[str]]:
    """Group cheap subproblem keys deterministically: sorted, a batch ends after a key whose hash
    value is 0 modulo ``max(1, batch_size // 2)`` (content-defined boundaries), or when it holds
    ``batch_size`` keys, or when the estimated ``seconds`` of its keys reach ``max_seconds``.
    Content-defined boundaries keep most batches identical when a grid adds or removes a few
    subproblems, so batch solutions are shared between experiments."""
    keys = sorted(set(keys))
    modulus = max(1, int(batch_size) // 2)
    out, cur, total = [], [], 0.0
    for k in keys:
        cur.append(k)
        total += (seconds or {}).get(k, 0.0)
        if len(cur) >= batch_size or (max_seconds and total >= max_seconds) or int(k[-8:], 16) % modulus == 0:
            out.append(cur)
            cur, total = [], 0.0
    if cur:
        out.append(cur)
    return out


def decompose_to_files(
    workload_path: str | Path,
    decomposition_path: str | Path,
    manifest_path: str | Path,
    *,
    method: str,
    options: dict | None = None,
    batch_max_cells: int = 400,
    batch_max_seconds: float = 0.5,
    batch_size: int = 100,
    batch_seconds: float = 300.0,
    experiment: str = "",
) -> dict:
    """The decompose checkpoint: residual views -> ``decomposition.json``; distinct subproblems ->
    ``results/subproblems/{key}.h5`` (if absent) and ``manifest.json``; cheap subproblems
    (single-Kronecker, <= ``batch_max_cells`` cells, or estimated <= ``batch_max_seconds``) are
    grouped by :func:`plan_batches` (at most ``batch_size`` keys and about ``batch_seconds`` of
    estimated work per batch) and listed in ``results/batches/{bid}.json`` (if absent)."""
    from .decompose import decompose
    from .solvers import get_solver

    w = read_workload_file(workload_path)
    d = decompose(w)
    names = w.schema.names
    solver = get_solver(method, **(options or {}))
    context = ""
    if hasattr(solver, "prepare"):
        context = workload_id(w)
        solver.prepare(d)  # fails here, before any solve job, when the workload does not suit the solver
    ns = solver_namespace(method, options, context)
    views = [{"attrs": list(a), "names": [names[i] for i in a], "key": d.keys[a][0], "scale": d.keys[a][1]} for a in d.grams]
    per_key: dict[str, list] = {}
    for a in d.grams:
        per_key.setdefault(d.keys[a][0], []).append(a)
    subs, cheap = {}, []
    for key, g in sorted(d.distinct().items()):
        write_subproblem(key, g, d.store, subproblem_path(key))
        cost = estimate_cost(g.sizes, len(g.terms), g.single_kron, method, options)
        is_cheap = not g.sizes or g.single_kron or g.cells <= batch_max_cells or cost["seconds"] <= batch_max_seconds
        subs[key] = {
            "key": key, "sizes": list(g.sizes), "cells": g.cells, "terms": len(g.terms), "dense_terms": sum(t.dense for t in g.terms),
            "single_kron": g.single_kron, "views": len(per_key[key]), "example_view": [names[i] for i in per_key[key][0]],
            "cost": cost, "batched": bool(is_cheap), "solve_file": solve_path(ns, key),
        }
        if is_cheap:
            cheap.append(key)
    batches = []
    for members in plan_batches(cheap, batch_size, {k: subs[k]["cost"]["seconds"] for k in cheap}, batch_seconds):
        bid = batch_id(members)
        bpath = Path(batch_path(bid))
        if not bpath.exists():
            bpath.parent.mkdir(parents=True, exist_ok=True)
            tmp = bpath.parent / f".{bpath.name}.{uuid.uuid4().hex}.tmp"
            tmp.write_text(json.dumps({"id": bid, "keys": members}, indent=1) + "\n")
            _publish_if_absent(tmp, bpath)
        file_id = f"batch-{bid}"
        for k in members:
            subs[k]["solve_file"] = solve_path(ns, file_id)
        costs = [subs[k]["cost"] for k in members]
        total = sum(c["seconds"] for c in costs)
        batches.append({
            "id": bid, "file_id": file_id, "keys": members, "solve_file": solve_path(ns, file_id),
            "cost": {"seconds": round(total, 3), "mem_mb": max(c["mem_mb"] for c in costs), "runtime": int(max(5, math.ceil(3 * total / 60) + 2))},
        })
    write_json(decomposition_path, {
        "experiment": experiment, "schema": w.schema.name, "workload": w.spec, "seconds": d.seconds,
        "workload_views": len({v.attrs for v in w.views}), "views": views,
    })
    manifest = {
        "experiment": experiment, "method": method, "options": dict(options or {}), "namespace": ns, "context": context,
        "workload_file": str(workload_path), "residual_views": len(views), "distinct": len(subs),
        "subproblems": list(subs.values()), "batches": batches,
        "solve_files": sorted({s["solve_file"] for s in subs.values()}),
    }
    write_json(manifest_path, manifest)
    return {"residual_views": len(views), "distinct": len(subs), "batched": len(cheap), "batches": len(batches)}


# ----------------------------------------------------------------------------- solve


def solve_files(subproblem_paths, out_path: str | Path, *, method: str, options: dict | None = None, workload_path: str | Path | None = None) -> dict:
    """Solve subproblem files with one solver instance (batches share its per-factor caches) and
    write every solution to ``out_path`` (kind ``solve``, one group per key).

    Solvers with ``prepare`` (workload context, e.g. RP+'s per-attribute bases) get the
    decomposition of ``workload_path``, re-run here (deterministic and cheap), and solve its Gram of
    each key -- equal to the file's, but on the real attributes of the workload's first view with
    that key, as :func:`querysmasher.plan.make_plan` does."""
    import numpy as np  # noqa: F401  (after the caller's thread limits)

    from .io import atomic_h5, new_group
    from .plan import write_solution
    from .solvers import get_solver

    solver = get_solver(method, **(options or {}))
    distinct = None
    if hasattr(solver, "prepare"):
        from .decompose import decompose

        if not workload_path:
            raise ValueError(f"method {method!r} reads workload context: give workload_path")
        decomp = decompose(read_workload_file(workload_path))
        solver.prepare(decomp)
        distinct = decomp.distinct()
    results = []
    for p in subproblem_paths:
        key, gram, store = read_subproblem(p)
        if distinct is not None:  # the same Gram, on the attributes of the workload's first view with this key
            if key not in distinct:
                raise ValueError(f"subproblem {key} is not part of the workload {workload_path}")
            gram, store = distinct[key], decomp.store
        t0 = time.perf_counter()
        sol = solver.solve(gram, store)
        results.append((key, sol, time.perf_counter() - t0))
        print(f"solved {key}: {gram.cells} cells, {len(gram.terms)} terms, loss {sol.loss:.6g}, {results[-1][2]:.2f} s ({sol.solver}) {sol.note}", flush=True)
    with atomic_h5(out_path, kind="solve") as f:
        f.attrs["method"] = method
        f.attrs["options"] = json.dumps(options or {}, sort_keys=True)
        g = new_group(f, "solutions")
        for key, sol, secs in sorted(results, key=lambda r: r[0]):
            s = new_group(g, key)
            write_solution(s, sol)
            s.attrs["seconds"] = secs
    return {"solved": len(results), "seconds": sum(r[2] for r in results)}


def read_solutions(paths) -> tuple[dict, dict[str, float]]:
    """({key: ViewSolution}, {key: solve seconds}) from solve files."""
    from .io import open_h5
    from .plan import read_solution

    sols, secs = {}, {}
    for p in paths:
        with open_h5(p, "solve") as f:
            for key, g in f["solutions"].items():
                sols[key] = read_solution(g)
                secs[key] = float(g.attrs.get("seconds", 0.0))
    return sols, secs


# ----------------------------------------------------------------------------- allocate


def assemble_plan_from_files(
    workload_path, decomposition_path, solve_paths, plan_path, plan_json_path, *, method: str, budget, delta: float = DEFAULT_DELTA, experiment: dict | None = None,
) -> dict:
    """Allocate the budget over the residual views of ``decomposition.json`` with the solutions of
    the solve files; write ``plan.h5`` and ``plan.json`` (predicted RMSE, certified bound when
    every view is certified, privacy as beta, rho-zCDP, mu-GDP and (epsilon, delta))."""
    from .decompose import Decomposition, SubworkloadGram
    from .linalg import MatrixStore
    from .plan import assemble_plan, save_plan

    w = read_workload_file(workload_path)
    dj = json.loads(Path(decomposition_path).read_text())
    sizes = w.schema.sizes
    grams, keys = {}, {}
    for v in dj["views"]:
        a = tuple(v["attrs"])
        grams[a] = SubworkloadGram(a, tuple(sizes[i] for i in a), ())  # terms live in the subproblem files
        keys[a] = (v["key"], float(v["scale"]))
    d = Decomposition(w, MatrixStore(), grams, float(dj["seconds"]))
    d.__dict__["keys"] = keys  # the cached property, from the file
    sols, secs = read_solutions(solve_paths)
    missing = sorted({k for k, _ in keys.values()} - set(sols))
    if missing:
        raise ValueError(f"no solution for {len(missing)} subproblem(s), e.g. {missing[0]}")
    used = {k for k, _ in keys.values()}
    plan = assemble_plan(d, sols, method, parse_budget(budget, delta), {"decompose": d.seconds, "solve": sum(secs[k] for k in used)})
    save_plan(plan, plan_path)
    summary = plan.summary()
    summary.update(experiment or {})
    summary["predicted_rmse"] = plan.rmse
    summary["certified"] = plan.certified
    summary["privacy"] = plan.budget.to_dict()
    write_json(plan_json_path, summary)
    return summary


# ----------------------------------------------------------------------------- data


def synthetic_records(schema, records: int, seed: int):
    """Seeded synthetic records over a schema: a mixture of 4 latent classes; per class, numeric
    attributes follow a discretised normal and categorical ones a Dirichlet(0.5) draw, so the
    attributes are correlated. Deterministic in (schema, records, seed)."""
    import numpy as np

    from .data import Records

    rng = np.random.default_rng([int(seed), int(records), len(schema)])
    classes = 4
    z = rng.integers(classes, size=int(records))
    cols = []
    for a in schema.attributes:
        if a.kind == "numeric":
            idx = np.arange(a.size)
            means, sds = rng.uniform(0, a.size, classes), rng.uniform(0.05, 0.3, classes) * a.size + 0.5
            probs = np.exp(-((idx[None, :] - means[:, None]) ** 2) / (2 * sds[:, None] ** 2)) + 1e-3
        else:
            probs = rng.dirichlet(np.full(a.size, 0.5), size=classes) + 1e-9
        probs /= probs.sum(axis=1, keepdims=True)
        u = rng.random(int(records))
        col = np.minimum((u[:, None] > np.cumsum(probs[z], axis=1)).sum(axis=1), a.size - 1)
        cols.append(col)
    codes = np.stack(cols, axis=1).astype(np.int64) if cols else np.zeros((int(records), 0), dtype=np.int64)
    return Records(codes, schema)


def data_source(data: dict) -> dict:
    """Which records a data set config resolves to, now: ``{"kind": "csv", "path", "domain",
    "on_invalid"}`` when its file exists, else its ``synthetic`` fallback ``{"kind": "synthetic",
    "records", "seed"}``. Recorded in the params of the rules that read records, so a file that
    appears (or disappears) re-runs them."""
    from .errors import InputError

    path = data.get("csv")
    if path and Path(path).is_file():
        return {"kind": "csv", "path": str(path), "domain": data.get("domain"), "on_invalid": data.get("on_invalid", "error")}
    syn = data.get("synthetic")
    if syn:
        return {"kind": "synthetic", "records": int(syn.get("records", 10000)), "seed": int(syn.get("seed", 0))}
    if path:
        raise InputError("config data csv", path, "does not exist and the data set has no 'synthetic' fallback")
    raise InputError("config data", data, "needs 'csv' (a file) or 'synthetic' ({records, seed})")


def data_inputs(data: dict) -> list[str]:
    """The files a data set config reads (for a rule's ``input:``)."""
    src = data_source(data)
    if src["kind"] != "csv":
        return []
    return [src["path"]] + ([src["domain"]] if src.get("domain") else [])


def load_dataset(source: dict, schema):
    """Records from a :func:`data_source` result (CSV validated against the schema, or synthetic)."""
    from .data import load_records

    if source["kind"] == "csv":
        return load_records(source["path"], schema, domain_file=source.get("domain"), on_invalid=source.get("on_invalid", "error"))
    return synthetic_records(schema, source["records"], source["seed"])


# ----------------------------------------------------------------------------- measure / reconstruct


def measure_to_file(plan_path, out_path, *, source: dict, seed: int) -> dict:
    """The release: run the plan's mechanisms on the records with a fixed noise seed (experiments
    are explicitly seeded runs; the measurements file is marked ``seeded``)."""
    from .measure import make_rng, measure_iter, plan_digest, save_measurements
    from .plan import load_plan

    plan = load_plan(plan_path)
    records = load_dataset(source, plan.schema)
    if records.dropped:
        print(f"dropped {records.dropped} invalid rows; the privacy guarantee holds for the cleaned data set")
    rng, seeded = make_rng(int(seed))
    print(f"warning: fixed noise seed {seed}: this release is for experiments only", file=sys.stderr)
    save_measurements(out_path, plan, measure_iter(plan, records, rng), seeded=seeded, plan_sha256=plan_digest(plan_path))
    return {"records": len(records), "dropped": records.dropped, "seeded": seeded}


def reconstruct_to_file(plan_path, measurements_path, out_path, *, csv_dir: str | Path | None = None, max_answers: int | None = None) -> dict:
    """Answers (and variances) of every workload query, plus CSV tables when ``csv_dir`` is given."""
    from .measure import load_measurements, plan_digest
    from .plan import load_plan
    from .reconstruct import DEFAULT_MAX_ANSWERS, reconstruct, save_answers, write_csv_tables

    plan = load_plan(plan_path)
    rec = reconstruct(plan, load_measurements(measurements_path, plan_digest(plan_path)))
    info = save_answers(out_path, rec, max_answers=DEFAULT_MAX_ANSWERS if max_answers is None else int(max_answers))
    if csv_dir:
        info["csv_tables"] = len(write_csv_tables(csv_dir, rec))
    return info


# ----------------------------------------------------------------------------- evaluate


def read_benchmark(path: str | Path) -> dict | None:
    """``{"seconds", "max_rss_mb"}`` of a Snakemake benchmark file (None when absent)."""
    p = Path(path)
    if not p.is_file():
        return None
    lines = [ln.split("\t") for ln in p.read_text().splitlines() if ln.strip()]
    if len(lines) < 2:
        return None
    rows = [dict(zip(lines[0], r)) for r in lines[1:]]

    def num(x):
        try:
            return float(x)
        except (TypeError, ValueError):
            return float("nan")

    return {"seconds": max(num(r.get("s")) for r in rows), "max_rss_mb": max(num(r.get("max_rss")) for r in rows)}


def evaluate(plan_path, out_path, *, manifest_path=None, benchmarks: dict | None = None, answers_path=None, source: dict | None = None, experiment: dict | None = None) -> dict:
    """Metrics of one experiment: predicted RMSE (from the plan) and, with ``answers_path``, the
    empirical RMSE of the released answers against the true answers computed from the records
    (an evaluation, not a release: it reads the records, and its output is not private), the mean
    squared standardised error (about 1 when the variances are right), phase times and peak
    memory (Snakemake benchmark files; the solve phase sums every solve file the experiment uses,
    shared ones included)."""
    import numpy as np

    from .data import marginal
    from .io import open_h5
    from .plan import load_plan
    from .reconstruct import view_variances

    plan = load_plan(plan_path)
    s = plan.summary()
    m = dict(experiment or {})
    m.update({
        "predicted_rmse": plan.rmse, "queries": s["queries"], "workload_views": s["views"], "residual_views": s["residual_views"],
        "measured_views": s["measured_views"], "distinct_solves": s["distinct_solves"], "privacy": plan.budget.to_dict(),
        "certified": plan.certified, "lower_bound_rmse": s.get("lower_bound_rmse"), "notes": s["notes"],
    })
    if answers_path:
        records = load_dataset(source, plan.schema)
        sq = wsum = zsum = 0.0
        zn = 0
        with open_h5(answers_path, "answers") as f:
            offs = f["views/table_offsets"][()]
            tables = f["views/tables"]
            for i, v in enumerate(plan.workload.views):  # one view at a time: bounded memory
                released = tables[int(offs[i]):int(offs[i + 1])]
                truth = marginal(records, v.attrs, plan.schema.sizes)
                err = _view_answers(plan, v, released) - _view_answers(plan, v, truth)
                var = view_variances(plan, v)
                sq += v.weight * float(np.sum(err * err))
                wsum += v.weight * err.shape[0]
                ok = var > 0
                zsum += float(np.sum(err[ok] ** 2 / var[ok]))
                zn += int(ok.sum())
        m.update({"empirical_rmse": math.sqrt(sq / wsum) if wsum else 0.0, "mean_squared_z": zsum / zn if zn else None, "records": len(records), "data": source})
    phases: dict[str, dict] = {}
    for stage, path in (benchmarks or {}).items():
        b = read_benchmark(path)
        if b:
            phases[stage] = b
    if manifest_path:
        man = json.loads(Path(manifest_path).read_text())
        found = [read_benchmark(solve_benchmark_path(*_split_solve_file(p))) for p in man["solve_files"]]
        found = [b for b in found if b]
        if found:
            phases["solve"] = {"seconds": sum(b["seconds"] for b in found), "max_rss_mb": max(b["max_rss_mb"] for b in found), "jobs": len(found)}
        m["solve_files"] = len(man["solve_files"])
    m["phases"] = phases
    m["total_seconds"] = sum(p["seconds"] for p in phases.values())
    m["peak_memory_mb"] = max((p["max_rss_mb"] for p in phases.values()), default=None)
    write_json(out_path, m)
    return m


def _view_answers(plan, v, table):
    """Answers to every query of workload view ``v`` from a table over its cells."""
    from .decompose import view_query_matrix
    from .families import query_matrix_1d
    from .linalg import kron_apply

    if v.factors:
        sizes = tuple(plan.schema.sizes[a] for a in v.attrs)
        return kron_apply([query_matrix_1d(f, n) for f, n in zip(v.factors, sizes)], table, sizes)
    return view_query_matrix(plan.workload, v) @ table


def _split_solve_file(path: str) -> tuple[str, str]:
    p = Path(path)
    return p.parent.name, p.stem


# ----------------------------------------------------------------------------- aggregate


def _atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    tmp.write_text(text)
    os.replace(tmp, path)


def aggregate(metrics_paths, tables_dir, figures_dir) -> dict:
    """Tables and figures of the grid: ``experiments.csv`` (one row per experiment), ``rmse.csv``
    (predicted/empirical RMSE by schema, workload and budget x method, mean over seeds),
    ``resources.csv`` (time and peak memory against residual views); ``rmse.png``,
    ``time_vs_views.png``, ``memory_vs_views.png`` (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    rows = []
    for p in metrics_paths:
        m = json.loads(Path(p).read_text())
        row = {k: m.get(k) for k in ("experiment", "schema", "workload", "method", "budget", "seed", "queries", "workload_views", "residual_views", "distinct_solves", "predicted_rmse", "lower_bound_rmse", "empirical_rmse", "mean_squared_z", "total_seconds", "peak_memory_mb", "certified")}
        row["budget"] = budget_slug(row["budget"])
        row.update({f"{k}": m["privacy"][k] for k in ("beta", "rho", "mu", "epsilon", "delta")})
        for stage, ph in m.get("phases", {}).items():
            row[f"{stage}_seconds"] = ph["seconds"]
            row[f"{stage}_max_rss_mb"] = ph["max_rss_mb"]
        rows.append(row)
    df = pd.DataFrame(rows).sort_values(["schema", "workload", "method", "budget", "seed"]).reset_index(drop=True)
    tables_dir, figures_dir = Path(tables_dir), Path(figures_dir)
    _atomic_write_text(tables_dir / "experiments.csv", df.to_csv(index=False))
    values = [c for c in ("predicted_rmse", "empirical_rmse") if c in df and df[c].notna().any()]
    rmse = df.pivot_table(index=["schema", "workload", "budget"], columns="method", values=values, aggfunc="mean")
    rmse.columns = [f"{v}_{meth}" for v, meth in rmse.columns]
    _atomic_write_text(tables_dir / "rmse.csv", rmse.reset_index().to_csv(index=False))
    res_cols = [c for c in ("schema", "workload", "method", "budget", "seed", "workload_views", "residual_views", "distinct_solves", "total_seconds", "peak_memory_mb") if c in df] + sorted(c for c in df if c.endswith("_seconds") and c != "total_seconds")
    _atomic_write_text(tables_dir / "resources.csv", df[res_cols].to_csv(index=False))

    figures_dir.mkdir(parents=True, exist_ok=True)
    methods = sorted(df["method"].unique())
    groups = df.groupby(["schema", "workload", "budget"], sort=True)
    labels = [f"{s}\n{w}\n{b}" for (s, w, b), _ in groups]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(labels) * max(1, len(methods)) / 2), 4.5))
    width = 0.8 / max(1, len(methods))
    for j, meth in enumerate(methods):
        pred = [g[g.method == meth]["predicted_rmse"].mean() for _, g in groups]
        xs = [i + (j - (len(methods) - 1) / 2) * width for i in range(len(labels))]
        ax.bar(xs, pred, width, label=f"{meth} (predicted)")
        if "empirical_rmse" in df and df["empirical_rmse"].notna().any():
            emp = [g[g.method == meth]["empirical_rmse"].mean() for _, g in groups]
            ax.plot(xs, emp, "kx", label="empirical" if j == 0 else None)
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylabel("RMSE")
    ax.set_title("RMSE by method and workload")
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save_png(fig, figures_dir / "rmse.png")
    for col, name, ylabel in (("total_seconds", "time_vs_views.png", "total time (s, benchmarks)"), ("peak_memory_mb", "memory_vs_views.png", "peak memory (MB, max RSS)")):
        fig, ax = plt.subplots(figsize=(6, 4.5))
        for meth in methods:
            g = df[(df.method == meth) & df[col].notna()]
            ax.scatter(g["residual_views"], g[col], label=meth)
        ax.set_xscale("log")
        ax.set_xlabel("residual views")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
        fig.tight_layout()
        _save_png(fig, figures_dir / name)
    plt.close("all")
    return {"experiments": len(df)}


def _save_png(fig, path: Path) -> None:
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    fig.savefig(tmp, format="png", dpi=110)
    os.replace(tmp, path)
