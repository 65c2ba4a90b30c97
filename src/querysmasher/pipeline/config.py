"""The workflow's config: the grid of experiments (:class:`Experiment`, expansion), budgets, and
validation against ``config/schema.yaml``.

>>> e = expand_grid(
...     {"grid": [{"schemas": ["cps"], "workloads": ["prefix:1"], "methods": ["rp", "qs"], "budgets": ["rho=0.5"]}]}
... )
>>> sorted(e)
['cps__prefix-1__qs__rho0.5__seed0', 'cps__prefix-1__rp__rho0.5__seed0']
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

from ..accounting import parse_budget
from ..errors import InputError
from .datasets import resolve_data_source
from .layout import experiment_name, problem_name

__all__ = [
    "Experiment",
    "expand_grid",
    "check_config",
    "set_aside_unsupported",
    "releasable_experiments",
    "format_validation_error",
    "read_workflow_config",
    "merge_config",
]


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
    objective: str = "sum"  # "sum" or "max" (querysmasher.maxvar)
    neighbours: str = "add-remove"  # the neighbouring relation the budget is for

    @property
    def problem(self) -> str:
        """The folder of what does not depend on the budget or seed (workload file, decomposition)."""
        return problem_name(self.schema, self.workload, self.method)

    def as_dict(self) -> dict:
        return {
            "experiment": self.name,
            "schema": self.schema,
            "schema_spec": self.schema_spec,
            "all_numeric": self.all_numeric,
            "workload": self.workload,
            "method": self.method,
            "budget": self.budget,
            "seed": self.seed,
            "objective": self.objective,
            "neighbours": self.neighbours,
        }


def merge_config(base: dict, over: dict) -> dict:
    """``over`` merged into ``base`` in place as Snakemake layers config files: mappings merge key by
    key, anything else replaces. Returns ``base``.

    >>> merge_config({"a": {"b": 1, "c": 2}, "d": [1]}, {"a": {"c": 3}, "d": [2]})
    {'a': {'b': 1, 'c': 3}, 'd': [2]}
    """
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge_config(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def read_workflow_config(
    workflow_files, cli_files, cli_config: dict | None, replace_workflow_config: bool = False
) -> dict:
    """The workflow's config as Snakemake layers it -- the Snakefile's ``configfile:`` files
    (``workflow_files``, left out under ``--replace-workflow-config``), then every ``--configfile``
    in order, then ``--config`` values -- but every file read by the project's strict reader
    (:func:`querysmasher.documents.read_document`: duplicate keys, aliases and deep nesting refused,
    scalars by YAML 1.2), never by Snakemake's YAML 1.1 loader, which keeps the last of two
    ``budget:`` keys and reads ``1:30`` as 90. An InputError naming the file otherwise."""
    from ..documents import read_document  # loads yaml only where it is used

    config: dict = {}
    files = [*([] if replace_workflow_config else workflow_files), *cli_files]
    for path in files:
        tree = read_document(path, "config file")
        if tree is None:
            continue  # an empty file adds nothing (as for Snakemake)
        if not isinstance(tree, dict):
            raise InputError("config file", str(path), "must be a mapping of keys to values")
        merge_config(config, tree)
    return merge_config(config, cli_config or {})


def expand_grid(config: dict) -> dict[str, Experiment]:
    """Every experiment of the config's grids (a list of schemas x workloads x methods x budgets x
    seeds), by folder name. Two different experiments with the same folder name are an error."""
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
                            objective = grid.get("objective", "sum")
                            neighbours = grid.get("neighbours", "add-remove")
                            name = (
                                experiment_name(s, w, m, b, seed)
                                + ("__max" if objective == "max" else "")
                                + ("__replace" if neighbours == "replace" else "")
                            )
                            e = Experiment(
                                name,
                                s,
                                entry["spec"],
                                bool(entry.get("all_numeric", False)),
                                w,
                                m,
                                b,
                                int(seed),
                                dict(entry.get("data") or default_data),
                                objective,
                                neighbours,
                            )
                            old = out.get(name)
                            if old is not None and old.as_dict() != e.as_dict():
                                raise InputError(
                                    f"config grid[{g}]",
                                    name,
                                    f"two experiments share this folder name ({old.workload!r} and {w!r}); "
                                    "rename a schema or reorder the spec",
                                )
                            out[name] = e
    if not out:
        raise InputError("config", "grid", "defines no experiment")
    problems: dict[str, Experiment] = {}
    for e in out.values():  # experiments of one problem share its workload and decompose jobs
        old = problems.setdefault(e.problem, e)
        if (old.schema_spec, old.all_numeric, old.workload) != (e.schema_spec, e.all_numeric, e.workload):
            raise InputError(
                "config grid",
                e.problem,
                f"two problems share this folder name ({old.workload!r} and {e.workload!r}); "
                "rename a schema or reorder the spec",
            )
    return out


def check_config(config: dict) -> dict[str, Experiment]:
    """The checks JSON Schema cannot express, before any job runs: every schema and workload
    parses (the library's InputError text), every method has a solver, every budget is valid,
    every data set used by a release has a readable source. Returns :func:`expand_grid`."""
    from ..methods import get_method  # loads numpy only where it is used
    from ..schema import parse_schema  # in the body: the stage function's fingerprint follows it
    from ..workload import parse_workload  # loads numpy only where it is used

    experiments = expand_grid(config)
    for name, opts in ((config.get("solve") or {}).get("options") or {}).items():
        try:  # the ranges the method declares (the command line's --option uses the same), then its factory
            method = get_method(name)
            method.build(**method.check_options(opts or {}))
        except InputError as exc:
            raise InputError(f"config solve.options.{name}: {exc.field}", exc.value, exc.reason) from None
    delta = config.get("delta")
    delta = None if delta is None else float(delta)
    parsed: dict[tuple[str, bool], object] = {}
    done: set[tuple] = set()
    for e in experiments.values():
        try:
            get_method(e.method).check(objective=e.objective, neighbours=e.neighbours)
        except InputError as exc:
            raise InputError(f"config grid {exc.field}", exc.value, exc.reason) from None
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
            parse_budget(e.budget, delta, e.neighbours)
        except InputError as exc:
            raise InputError("config grid budget", e.budget, str(exc)) from None
        if config.get("release", True):
            resolve_data_source(e.data)  # raises when no source is usable
    return experiments


def _parsed(e: Experiment, cache: dict):
    from ..schema import parse_schema  # in the body: the stage function's fingerprint follows it
    from ..workload import parse_workload  # loads numpy only where it is used

    key = (e.schema_spec, e.all_numeric, e.workload)
    if key not in cache:
        schema = parse_schema(e.schema_spec, all_numeric=e.all_numeric)
        cache[key] = (schema, parse_workload(e.workload, schema))
    return cache[key]


def set_aside_unsupported(experiments: dict, policy: str = "error") -> tuple[dict, dict]:
    """Split a grid (name -> experiment) into those whose method can plan their workload and those
    it cannot (name -> the experiment's dict plus ``reason``; the method table says which:
    :meth:`querysmasher.methods.Method.unsupported`). With ``policy="error"`` an unsupported
    experiment is a config error naming it (one line); with ``"skip"`` it is set aside (the
    paper's tables print NI for it).

    >>> e = expand_grid(
    ...     {"grid": [{"schemas": ["synthetic:n=4,d=3"], "workloads": ["affine:2"], "methods": ["qs", "hdmm"]}]}
    ... )
    >>> ok, skipped = set_aside_unsupported(e, "skip")
    >>> sorted(ok), [s["reason"] for s in skipped.values()]
    (['synthetic-n4-d3__affine-2__qs__beta1__seed0'], ['hdmm does not support non-product families (affine, abs, random, custom): affine:2'])
    """  # noqa: E501  (a doctest's expected output is one line)
    from ..methods import get_method  # loads numpy only where it is used

    cache: dict = {}
    ok, skipped = {}, {}
    for name, e in experiments.items():
        why = get_method(e.method).unsupported(_parsed(e, cache)[1])
        if not why:
            ok[name] = e
        elif policy == "skip":
            skipped[name] = {**e.as_dict(), "schema_spec": e.schema_spec, "reason": why}
        else:
            raise InputError("config grid", name, f"{why} (set 'unsupported: skip' to leave such experiments out)")
    if not ok:
        raise InputError("config", "grid", "no experiment of the grid is supported by its method")
    return ok, skipped


def releasable_experiments(experiments: dict) -> dict[str, bool]:
    """Name -> whether the experiment's plans can be measured on its schema (HDMM: the full data
    vector must fit; :meth:`querysmasher.methods.Method.measurable`)."""
    from ..methods import get_method  # loads numpy only where it is used

    cache: dict = {}
    return {name: get_method(e.method).measurable(_parsed(e, cache)[0]) for name, e in experiments.items()}


def format_validation_error(config: dict, schema_path: str | Path) -> str:
    """One line per problem, naming the config key and the reason, from the JSON schema at
    ``schema_path`` (Snakemake's own validation message is a multi-line dump). Unknown keys are
    listed with the allowed ones."""
    import jsonschema  # loads jsonschema only where it is used
    import yaml  # loads yaml only where it is used

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
                    lines.append(
                        f"config key '{where}': unknown key"
                        + (f" (allowed here: {', '.join(allowed)})" if allowed else "")
                    )
            if lines:
                continue
        desc = sub.get("description")
        lines.append(f"config key '{path or '(top level)'}': {err.message}" + (f" [{desc}]" if desc else ""))
    return "invalid config: " + ("; ".join(lines) if lines else "does not match config/schema.yaml")
