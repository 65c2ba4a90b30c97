# Config validation and input functions shared by every rule.
#
# Everything that can be wrong in the config fails HERE, while the Snakefile is parsed, before any
# job runs: the JSON schema (config/schema.yaml: unknown keys, types, enums, patterns; it also fills
# in defaults), then querysmasher.pipeline.config.check_config (every schema and workload parses, every
# method has a solver, budgets and data sources are valid), with one line naming the key/value and
# the reason.

import json
import os
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from querysmasher.documents import check_loaded
from querysmasher.errors import InputError
from querysmasher.methods import get_method
from querysmasher.pipeline import datasets, layout
from querysmasher.pipeline.config import (
    check_config,
    format_validation_error,
    read_workflow_config,
    releasable_experiments,
    set_aside_unsupported,
)
from querysmasher.pipeline.fingerprint import library_fingerprint

try:
    # Every config file read again by the project's strict reader (duplicate keys, aliases, nesting,
    # YAML 1.2 scalars) and layered as Snakemake layers them; the result replaces Snakemake's YAML 1.1
    # reading. workflow.configfiles lists the --configfile files, then the Snakefile's configfile:.
    _cs = workflow.config_settings
    _strict = read_workflow_config(
        workflow.configfiles[len(_cs.configfiles) :],
        list(_cs.configfiles),
        dict(_cs.config or {}),
        bool(getattr(_cs, "replace_workflow_config", False)),
    )
    config.clear()
    config.update(_strict)
    # values given with --config (Snakemake's parsing): shared references and deep nesting refused,
    # numbers written 1e-6 become numbers
    check_loaded(config, "config")
except InputError as exc:
    raise WorkflowError(f"invalid config: {exc}") from None

try:
    validate(config, "../config/schema.yaml")
except WorkflowError:
    schema_file = os.path.join(workflow.basedir, "..", "config", "schema.yaml")
    raise WorkflowError(format_validation_error(config, schema_file)) from None

try:
    EXPERIMENTS = check_config(config)
    # experiments whose method cannot plan their workload (HDMM on non-product families): a config
    # error, or -- with `unsupported: skip` -- set aside (the paper's tables print NI for them)
    EXPERIMENTS, UNSUPPORTED = set_aside_unsupported(EXPERIMENTS, config["unsupported"])
except InputError as exc:
    raise WorkflowError(f"invalid config: {exc}") from None

R = layout.RESULTS
# (schema, workload, method) -> one of its experiments: the workload and decompose jobs are the
# problem's, shared by every budget and seed of it (a new budget re-runs allocation onwards only)
PROBLEMS = {}
for _e in EXPERIMENTS.values():
    PROBLEMS.setdefault(_e.problem, _e)


def _releases():
    """Release mode: every release spec of the config, checked now; those whose data file is
    absent are skipped with a warning (like the grid's synthetic fallback, but a release never
    falls back to other records)."""
    from querysmasher.release import parse_release_spec, release_workload
    from querysmasher.schema import parse_schema

    out = {}
    for name, raw in (config.get("releases") or {}).items():
        try:
            layout.check_release_name(name)
            spec = parse_release_spec(raw)
            if not os.path.isfile(spec.data) or not os.path.isfile(spec.domain):
                print(f"warning: release {name!r} skipped: {spec.data} or {spec.domain} is absent", file=sys.stderr)
                continue
            release_workload(spec.tables, parse_schema(spec.domain))  # attribute names, sizes
        except InputError as exc:
            raise WorkflowError(f"invalid config: releases.{name}: {exc}") from None
        out[name] = spec
    return out


RELEASE_SPECS = _releases()


def release_spec(wildcards):
    try:
        return RELEASE_SPECS[wildcards.name]
    except KeyError:
        raise WorkflowError(
            f"release {wildcards.name!r} is not in the config's releases (or its data is absent)"
        ) from None


SOLVE = config["solve"]
RELEASE = bool(config["release"])
# per experiment: whether measure + reconstruct run (HDMM only where its full data vector fits)
MEASURED = {name: RELEASE and ok for name, ok in releasable_experiments(EXPERIMENTS).items()}
CSV_TABLES = bool(config["reconstruct"]["csv"])
STORE_MECHANISMS = bool(config["allocate"]["store_mechanisms"])
REPORT_MAX_VARIANCE = bool(config["allocate"]["max_variance"])


def reports_max_variance(name):
    """Whether experiment ``name``'s allocate reports the largest query variance (left out only of a
    plan-only summary under allocate.max_variance: false)."""
    return REPORT_MAX_VARIANCE or STORE_MECHANISMS or MEASURED.get(name, False)


wildcard_constraints:
    experiment=r"[^/]+__[^/]+__[^/]+__[^/]+__seed\d+(?:__max)?",
    problem=r"[^/]+__[^/]+__[^/]+",
    key=layout.KEY_PATTERN,
    bid=layout.KEY_PATTERN,
    ns=layout.NS_PATTERN,
    name=r"[A-Za-z0-9][A-Za-z0-9._-]*",


# --------------------------------------------------------------------------- grouped submission
# On a cluster every job would be its own submission, a second of Python start-up that
# waits in the queue. Rules carry a `group:` so that profiles/slurm runs about GROUP_JOBS decompose
# jobs or experiment chains per submission (local runs ignore groups). Batches of solve folders
# shared by problems (rp, wff, qs) are not grouped: with this Snakemake, such grouped batches
# running while a later decompose chunk finished crashed the controller (KeyError in
# DAG.update_ready, Table 2 on the test cluster); a batch already holds up to solve.batch_size
# subproblems. Batches of a context solver's folders (rpplus) belong to one problem: grouped.
# A group's members must all be known when it is first formed: Snakemake re-forms groups on every
# DAG update after a checkpoint, and a group that grows after it was submitted is submitted again
# with the jobs it already ran (and --group-components re-merges merged groups,
# snakemake/snakemake#1628). So the chunk is part of the group id and follows the checkpoints:
# the problems are decomposed GROUP_JOBS per job (chunk c), and the experiments that chunk c
# reveals form the groups of chunk c, cut GROUP_JOBS at a time.
GROUP_JOBS = int(config["cluster"]["group_jobs"])
_PROBLEM_CHUNK = {name: i // GROUP_JOBS for i, name in enumerate(sorted(PROBLEMS))}
_EXPERIMENT_GROUP = {}
for _c in sorted(set(_PROBLEM_CHUNK.values())):
    _members = sorted(n for n, e in EXPERIMENTS.items() if _PROBLEM_CHUNK[e.problem] == _c)
    _EXPERIMENT_GROUP.update({n: f"{_c}_{k // GROUP_JOBS}" for k, n in enumerate(_members)})


def _group_id(kind, chunk, tag=""):
    gid = f"{kind}{tag}{chunk}"
    workflow.parent_groupids[gid] = kind  # the profile's group-components KIND=N covers every chunk
    return gid


def prepare_group(wildcards):
    return _group_id("prepare", _PROBLEM_CHUNK.get(wildcards.problem, 0))


def experiment_group(wildcards):
    return _group_id("experiment", _EXPERIMENT_GROUP.get(wildcards.experiment, "0_0"))


def solve_batch_group(wildcards):
    """Batches of a context solver's folder (rpplus: one folder per workload, so one problem):
    all batches of the problems of one decompose chunk, known together when the chunk finishes
    and never shared with another chunk. Batches of shared folders (rp, wff, qs) stay separate
    jobs (see above); None leaves a job ungrouped."""
    if "-c" not in wildcards.ns:
        return None
    workload = solve_entry(wildcards.ns, f"batch-{wildcards.bid}")["workload"]
    if not workload:
        return None
    return _group_id("context_solves", _PROBLEM_CHUNK.get(os.path.basename(os.path.dirname(workload)), 0))


def experiment_of(wildcards):
    try:
        return EXPERIMENTS[wildcards.experiment]
    except KeyError:
        raise WorkflowError(f"experiment {wildcards.experiment!r} is not in the config's grid") from None


def problem_of(wildcards):
    try:
        return PROBLEMS[wildcards.problem]
    except KeyError:
        raise WorkflowError(f"problem {wildcards.problem!r} is not in the config's grid") from None


def problem_path(name, wildcards):
    """A file of the experiment's problem (workload.h5, decomposition.json, manifest.json, ...)."""
    return f"{layout.problem_dir(experiment_of(wildcards).problem)}/{name}"


def solver_options(method):
    return dict(SOLVE["options"].get(method) or {})


_FINGERPRINTS = {}


def lib(stage, method=None):
    """Library version + hash of the code this stage runs for ``method`` (the job's experiment's or
    release's: its solver or planner, its plan kind's operations; a params entry: edits re-run the rule)."""
    if (stage, method) not in _FINGERPRINTS:
        _FINGERPRINTS[(stage, method)] = library_fingerprint(stage, method)
    return _FINGERPRINTS[(stage, method)]


def decompose_mem_mb(wildcards, attempt=1):
    """mem_mb of a decompose job, from its workload (querysmasher.pipeline.cache.decompose_mem_mb):
    random views keep a dense Gram each, so a fixed figure would let the scheduler start jobs
    that together exceed the machine (or a SLURM node's limit). Doubled on a retry."""
    from querysmasher.pipeline.cache import decompose_mem_mb as estimate
    from querysmasher.pipeline.resources import retry

    return retry(estimate(problem_of(wildcards)), attempt)


def release_resource(wildcards, what, attempt=1):
    from querysmasher.pipeline.resources import release_resources, retry

    return retry(release_resources(release_spec(wildcards))[what], attempt)


def decompose_runtime(wildcards, attempt=1):
    """runtime of a decompose job: from the memory it builds (querysmasher.pipeline.resources), doubled on a retry."""
    from querysmasher.pipeline.cache import decompose_mem_mb as estimate
    from querysmasher.pipeline.resources import decompose_runtime_minutes, retry

    return retry(decompose_runtime_minutes(estimate(problem_of(wildcards))), attempt)


_STAGE_RESOURCES = {}


def _manifest_of(name):
    """The manifest of experiment ``name``'s problem (None before its decompose ran), re-read when it changes."""
    path = f"{layout.problem_dir(EXPERIMENTS[name].problem)}/manifest.json"
    try:
        mtime = os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return None, None
    if _MANIFEST_READ.get(path, (None,))[0] != mtime:
        with open(path) as fh:
            _MANIFEST_READ[path] = (mtime, json.load(fh))
    return mtime, _MANIFEST_READ[path][1]


_MANIFEST_READ = {}


def _stage_estimate(stage, name):
    """querysmasher.pipeline.resources.stage_resources of one experiment's job (its problem's
    manifest read when it exists: the solutions its plan holds), cached per manifest version."""
    from querysmasher.pipeline.resources import stage_resources

    mtime, manifest = _manifest_of(name)
    key = (stage, name, mtime)
    if key not in _STAGE_RESOURCES:
        _STAGE_RESOURCES[key] = stage_resources(
            stage,
            EXPERIMENTS[name],
            manifest,
            measured=MEASURED.get(name, False),
            max_variance=reports_max_variance(name),
        )
    return _STAGE_RESOURCES[key]


def stage_resource(stage, what, floor=0):
    """A resource callable (mem_mb or runtime) of a per-experiment rule, from the estimate of what
    its job holds (querysmasher.pipeline.resources), doubled on each retry; ``floor``: a lower bound
    for what the estimate does not model (a whole-workload planner's time)."""

    def inner(wildcards, attempt):
        from querysmasher.pipeline.resources import retry

        return retry(
            max(
                floor(wildcards) if callable(floor) else floor,
                _stage_estimate(stage, experiment_of(wildcards).name)[what],
            ),
            attempt,
        )

    return inner


def stage_threads_of(stage):
    """The threads callable of a per-experiment rule's jobs (querysmasher.pipeline.resources.stage_threads:
    evaluate of a large measured experiment splits its views over several, allocate the variance
    report of a plan with large dense solutions; Snakemake lowers it to --cores when fewer are given)."""

    def inner(wildcards):
        from querysmasher.pipeline.resources import stage_threads

        name = experiment_of(wildcards).name
        return stage_threads(
            stage,
            EXPERIMENTS[name],
            _manifest_of(name)[1],
            measured=MEASURED.get(name, False),
            max_variance=reports_max_variance(name),
        )

    return inner


def grid_resource(stage, what):
    """A resource callable of a whole-grid job (aggregate, paper_table): the largest estimate of the
    stage over the grid's experiments is not needed (these jobs read metrics files only), so the
    estimate of an experiment-free job, doubled on each retry."""

    def inner(wildcards, attempt):
        from querysmasher.pipeline.resources import grid_resources, retry

        return retry(grid_resources(stage, len(EXPERIMENTS))[what], attempt)

    return inner


def exp_path(name, wildcards):
    return f"{R}/{wildcards.experiment}/{name}"


# --------------------------------------------------------------------------- workload inputs


def workload_inputs(wildcards):
    """Files a workload spec reads: a schema file, a workload file and custom query files (if any)."""
    from querysmasher.workload import workload_input_files

    e = problem_of(wildcards)
    files = [e.schema_spec] if os.path.isfile(e.schema_spec) else []
    return files + workload_input_files(e.workload)


# --------------------------------------------------------------------------- after the checkpoint


def manifest_path(wildcards):
    """The experiment's manifest; raises until the decompose checkpoint has run."""
    return checkpoints.decompose.get(problem=experiment_of(wildcards).problem).output.manifest


def experiment_solve_files(wildcards):
    """The solve files (paths) an experiment's plan reads, from its manifest; none for the max
    objective, which re-solves the views under its own query weights in the allocate job."""
    if experiment_of(wildcards).objective != "sum":
        return []
    with open(manifest_path(wildcards)) as fh:
        return json.load(fh)["solve_files"]


def whole_workload(wildcards):
    """Whether the experiment's method plans the whole workload in its allocate job (the method table)."""
    return get_method(experiment_of(wildcards).method).whole_workload


_MANIFESTS = {}


def solve_index():
    """(namespace, file id) -> cost and context, from every existing manifest of the grid
    (re-read when a manifest changes)."""
    index = {}
    for name in PROBLEMS:
        path = f"{layout.problem_dir(name)}/manifest.json"
        try:
            mtime = os.stat(path).st_mtime_ns
        except FileNotFoundError:
            continue
        cached = _MANIFESTS.get(path)
        if cached is None or cached[0] != mtime:
            with open(path) as fh:
                m = json.load(fh)
            entries = {}
            for s in m["subproblems"]:
                if not s["batched"]:
                    entries[(m["namespace"], s["key"])] = {
                        "cost": s["cost"],
                        "workload": m["workload_file"],
                        "method": m["method"],
                    }
            for b in m["batches"]:
                entries[(m["namespace"], b["file_id"])] = {
                    "cost": b["cost"],
                    "workload": m["workload_file"],
                    "method": m["method"],
                }
            cached = _MANIFESTS[path] = (mtime, entries)
        index.update(cached[1])
    return index


def solve_entry(ns, file_id):
    return solve_index().get((ns, file_id), {"cost": {"mem_mb": 1000, "runtime": 60}, "workload": None})


def solve_method(wildcards):
    method = layout.method_of_namespace(wildcards.ns)
    if method not in {e.method for e in EXPERIMENTS.values()}:
        raise WorkflowError(f"solve folder {wildcards.ns!r}: method {method!r} is not in the config's grid")
    return method


def solve_context(file_id):
    """For solvers with prepare(): the (never re-read by mtime) workload file of an experiment of
    this namespace; nothing for context-free solvers (rp, wff, qs)."""

    def inner(wildcards):
        if "-c" not in wildcards.ns:
            return []
        entry = solve_entry(wildcards.ns, file_id(wildcards))
        if not entry["workload"]:
            raise WorkflowError(f"no experiment of the grid uses solve folder {wildcards.ns!r}")
        return [ancient(entry["workload"])]

    return inner


def solve_priority(file_id):
    """A solve job's scheduling priority: its estimated seconds (whole), so that among ready jobs
    the longest solves start first and the grid does not end waiting for one started last."""

    def inner(wildcards):
        return int(solve_entry(wildcards.ns, file_id(wildcards))["cost"].get("seconds", 0))

    return inner


def solve_file_of(wc):
    """The solve rule's file id: the subproblem's content key."""
    return wc.key


def batch_file_of(wc):
    """The solve_batch rule's file id."""
    return f"batch-{wc.bid}"


def solve_resource(file_id, what):
    def inner(wildcards, attempt):
        cost = solve_entry(wildcards.ns, file_id(wildcards))["cost"]
        return int(cost[what] * (2 ** (attempt - 1)))  # a retry gets twice the memory and time

    return inner


def batch_members(wildcards):
    path = layout.batch_path(wildcards.bid)
    if not os.path.exists(path):
        raise WorkflowError(f"{path} is missing: re-run the decompose checkpoints (snakemake -R decompose)")
    with open(path) as fh:
        return [layout.subproblem_path(k) for k in json.load(fh)["keys"]]


# --------------------------------------------------------------------------- data


def experiment_data_inputs(wildcards):
    """The files an experiment's records come from (none for synthetic records)."""
    return datasets.data_inputs(experiment_of(wildcards).data)


def experiment_data_source(wildcards):
    """Where an experiment's records come from (a param of the rule, so a change re-runs it)."""
    return datasets.resolve_data_source(experiment_of(wildcards).data)


# --------------------------------------------------------------------------- targets


PROBLEM_STAGES = ("decompose",)  # shared by a problem's experiments: their files live under the problem


def evaluated_stages(wc):
    """The stages whose benchmark files the evaluate rule reads for an experiment."""
    return ["decompose", "allocate"] + (["measure", "reconstruct"] if MEASURED[wc.experiment] else [])


def evaluate_inputs(wc):
    """Answers and records (release runs only) and the benchmark file of every stage that ran."""
    out = {
        f"bench_{s}": (
            problem_path(f"benchmarks/{s}.tsv", wc)
            if s in PROBLEM_STAGES
            else f"{R}/{wc.experiment}/benchmarks/{s}.tsv"
        )
        for s in evaluated_stages(wc)
    }
    if MEASURED[wc.experiment]:
        out.update(answers=f"{R}/{wc.experiment}/answers.h5", data=experiment_data_inputs(wc))
    return out


def experiment_targets():
    return [f"{R}/{name}/metrics.json" for name in sorted(EXPERIMENTS)]


def release_targets():
    return [layout.release_dir(name) for name in sorted(RELEASE_SPECS)]


# A paper config aggregates into a folder of its own: the tables' grids differ, and one shared
# results/tables would be rebuilt each time another table's config runs (never "nothing to do").
_AGG = f"{R}/paper/table{int(config['paper']['table'])}-grid" if config.get("paper") else R
AGGREGATE_TABLES = [f"{_AGG}/tables/experiments.csv", f"{_AGG}/tables/rmse.csv", f"{_AGG}/tables/resources.csv"]
AGGREGATE_FIGURES = [
    f"{_AGG}/figures/rmse.png",
    f"{_AGG}/figures/time_vs_views.png",
    f"{_AGG}/figures/memory_vs_views.png",
]
