"""Command line: ``querysmasher plan | measure | reconstruct | release`` (also ``python -m querysmasher``).

Bad input prints one line ``querysmasher: error: <field> <value>: <reason>`` and exits with code 2;
no output file is written in that case. Results go to stdout; log lines go to stderr: warnings by
default, ``-v`` adds one line per solved subproblem and step, ``-vv`` the solvers' iterations, ``-q``
only errors. On a terminal, progress bars show the solves, views measured and tables reconstructed.
Numerical work uses one thread unless ``--threads N`` gives more (:mod:`querysmasher.threads`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from collections.abc import Sequence

from .accounting import DEFAULT_REPORT_DELTA, MIN_DELTA, Budget, PureBudget, make_budget
from .atomic import check_output, terminate_as_exit
from .errors import InputError
from .logs import configure, level_from_flags, unconfigure
from .threads import cap_to_cores, check_threads, limited

__all__ = ["main", "build_parser"]

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report an interrupted command

log = logging.getLogger("querysmasher.cli")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints the whole usage otherwise)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _budget(args: argparse.Namespace) -> Budget | PureBudget:
    return make_budget(
        beta=args.beta,
        rho=args.rho,
        mu=args.mu,
        epsilon=args.epsilon,
        delta=args.delta,
        neighbours=args.neighbours,
        noise=args.noise,
        prefix="--",
    )


def _add_budget(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("privacy budget (one of; default --beta 1)")
    g.add_argument("--beta", type=float, help="privacy cost: max diagonal of sum B^T Sigma^-1 B")
    g.add_argument("--rho", type=float, help="rho-zCDP (beta = 2 rho)")
    g.add_argument("--mu", type=float, help="mu-Gaussian DP (beta = mu^2)")
    g.add_argument("--epsilon", type=float, help="(epsilon, delta)-DP; needs --delta")
    g.add_argument(
        "--delta",
        type=float,
        help=f"delta of (epsilon, delta), in [{MIN_DELTA:g}, 1); with the other forms, the delta at which "
        f"epsilon is reported (default {DEFAULT_REPORT_DELTA:g})",
    )
    g.add_argument(
        "--neighbours",
        choices=("add-remove", "replace"),
        default="add-remove",
        help="neighbouring data sets: one record added or removed (default), or one record replaced "
        "(the record count is then public)",
    )


def _output_flags() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_mutually_exclusive_group()
    g.add_argument("-v", "--verbose", action="count", default=0, help="log each step (-vv: solver iterations too)")
    g.add_argument("-q", "--quiet", action="store_true", help="print only the result (and errors)")
    common.add_argument(
        "--threads",
        type=_thread_count,
        default=1,
        metavar="N",
        help="threads for numerical work (default 1: BLAS threads spin when other processes hold the cores); "
        "with N > 1, views are solved N at a time and large ones use N BLAS threads",
    )
    return common


def _thread_count(text: str) -> int:
    try:
        return check_threads(int(text), "--threads")
    except (ValueError, InputError):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a whole number of threads, at least 1") from None


def build_parser() -> argparse.ArgumentParser:
    from .methods import builtin_method_names  # the method table (numpy): when a command runs, not on import

    parser = _Parser(
        prog="querysmasher",
        description="Optimal scalable matrix mechanisms for linear counting queries under differential privacy.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    common = _output_flags()
    p = sub.add_parser("plan", parents=[common], help="optimise the mechanism for a workload and predict its error")
    p.add_argument("--schema", required=True, help="cps | adult | loans | synthetic:n=N,d=D | a YAML/JSON domain file")
    p.add_argument("--workload", required=True, help="e.g. 'prefix:1,2', 'range:1+affine:2+prefix:3', 'hybrid:1,2,3'")
    p.add_argument(
        "--method",
        default="qs",
        help=" | ".join(builtin_method_names()) + " or an installed plugin's name (default qs); "
        "mm: the exact matrix mechanism over the full domain (small domains)",
    )
    p.add_argument(
        "--objective",
        choices=("sum", "max"),
        default="sum",
        help="minimise the total weighted variance (sum, default) or the largest weighted query variance "
        "(max; qs, wff, rp)",
    )
    p.add_argument("--all-numeric", action="store_true", help="treat every attribute as numeric")
    p.add_argument("--out", help="write the plan (HDF5) here")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("--target-gap", type=float, default=None, help="qs: relative duality gap to certify (default 1e-4)")
    p.add_argument(
        "--max-dense-cells",
        type=int,
        default=None,
        help="qs: largest several-term view given the certified solve (default: no limit)",
    )
    p.add_argument(
        "--memory-budget-mb",
        type=float,
        default=None,
        help="qs: memory one view's certified solve may use, else it falls back "
        "(default a quarter of the machine's memory)",
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the method (repeatable; the value is read as a YAML scalar), checked against its "
        "range before any work; the built-in methods' options and ranges: docs/solvers.md",
    )
    p.add_argument(
        "--noise",
        choices=("gaussian", "laplace"),
        default="gaussian",
        help="hdmm only: gaussian (default; zCDP) or laplace "
        "(pure epsilon-DP, HDMM as its paper defines it; give --epsilon only)",
    )
    _add_budget(p)

    m = sub.add_parser(
        "measure", parents=[common], help="run the plan's mechanisms on the records (the only step that reads data)"
    )
    m.add_argument("--plan", required=True, help="plan file from 'querysmasher plan --out'")
    m.add_argument("--data", required=True, help="records: CSV or Parquet, one column per attribute")
    m.add_argument("--schema", help="schema of the data (default: the plan's); must match the plan")
    m.add_argument("--domain", help="domain file with per-attribute 'categories' or 'bins' to encode raw values")
    m.add_argument(
        "--on-invalid",
        choices=("error", "drop"),
        default="error",
        help="invalid rows: fail (default) or drop them and report how many",
    )
    m.add_argument(
        "--seed",
        type=int,
        help="fixed noise seed, for experiments only (numpy sampler; the output is marked as seeded)",
    )
    m.add_argument(
        "--sampler",
        choices=("discrete", "opendp", "numpy"),
        help="Gaussian sampler: discrete (default without --seed: exact discrete Gaussian, OS entropy), "
        "opendp (OpenDP's, exact, slower) or numpy (fast, not floating-point safe; the only one with --seed)",
    )
    m.add_argument("--out", required=True, help="measurements file (HDF5): the release")

    r = sub.add_parser("reconstruct", parents=[common], help="answer every workload query, with its variance")
    r.add_argument("--plan", required=True)
    r.add_argument("--measurements", required=True)
    r.add_argument("--out", required=True, help="answers file (HDF5): per-view tables, answers and variances")
    r.add_argument("--csv", help="also write one CSV table per workload view into this folder")
    r.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="level of the CSV tables' confidence intervals (default 0.95; exact under Gaussian noise)",
    )
    r.add_argument(
        "--max-answers",
        type=int,
        default=None,
        help="write full answer vectors only up to this many queries (default 10,000,000)",
    )

    rel = sub.add_parser(
        "release",
        parents=[common],
        help="publish named tables from a release spec (plan, measure with OpenDP noise, reconstruct)",
    )
    rel.add_argument("spec", help="release spec (YAML): data, domain, tables, budget, neighbours, method")
    rel.add_argument("--out", required=True, help="new folder for the publishable tables (must not exist or be empty)")
    return parser


def _release(args: argparse.Namespace) -> int:
    from .release import load_release_spec, run_release  # loads yaml, numpy: import querysmasher.cli stays fast

    print(json.dumps(run_release(load_release_spec(args.spec), args.out)))
    return 0


def _solver_options(args: argparse.Namespace) -> dict:
    from .documents import parse_yaml  # loads yaml: import querysmasher.cli stays fast
    from .methods import get_method  # loads numpy: import querysmasher.cli stays fast

    opts = {}
    for flag in ("target_gap", "max_dense_cells", "memory_budget_mb"):  # each against the range its method declares
        if getattr(args, flag) is not None:
            try:
                opts.update(get_method(args.method).check_options({flag: getattr(args, flag)}))
            except InputError as exc:
                raise InputError("--" + flag.replace("_", "-"), getattr(args, flag), exc.reason) from None
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise InputError("--option", item, "must be KEY=VALUE with KEY a solver option name")
        name = key.strip()
        parsed = parse_yaml(value, f"--option {name}")
        try:  # each option against the range its method declares, named in the error
            opts.update(get_method(args.method).check_options({name: parsed}))
        except InputError as exc:
            raise InputError("--option", item, f"{name} {exc.reason}") from None
    if opts:  # the method's own check of its options, before any work
        try:
            get_method(args.method).build(**opts)
        except InputError as exc:
            raise InputError("--option", ",".join(args.option) or ",".join(opts), exc.reason) from None
    return opts


def _plan(args: argparse.Namespace) -> int:
    from .allocation import is_certified  # numpy, like what follows: only when planning (import time of the CLI)
    from .methods import get_method  # numpy and the solvers: only when planning (import time of the CLI)
    from .planfiles import save_any_plan  # loads h5py, numpy: import querysmasher.cli stays fast
    from .planning import make_plan  # loads numpy: import querysmasher.cli stays fast
    from .workload import workload_input_files  # loads numpy: import querysmasher.cli stays fast

    m = get_method(args.method)  # unknown methods, objectives, noises and relations: before any work
    m.check(objective=args.objective, noise=args.noise, neighbours=args.neighbours, prefix="--")
    budget = _budget(args)
    if args.out:
        check_output(args.out, inputs=[args.schema, *workload_input_files(args.workload)])
    opts = _solver_options(args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = make_plan(
            args.schema,
            args.workload,
            args.method,
            budget,
            all_numeric=args.all_numeric,
            options=opts,
            objective=args.objective,
        )
    for w in caught:
        log.warning("%s", w.message)
    if args.out:
        save_any_plan(plan, args.out)
    s = plan.summary()
    if args.json:
        print(json.dumps(s))
    else:
        views = f"{s['views']} views" + (
            f", {s['residual_views']} residual views, {s['distinct_solves']} distinct solves"
            if "residual_views" in s
            else ""
        )
        print(
            f"{s['method']} on {s['workload']} over {s['schema']}: RMSE {s['rmse']:.6g} "
            f"({s['queries']:.0f} queries, {views}, {s['seconds']:.2f} s)"
        )
        if is_certified(s):
            print(
                f"certified lower bound on RMSE {s['lower_bound_rmse']:.6g} (relative gap in variance {s['gap']:.2e})"
            )
        if "max_variance" in s:
            q = s["max_variance_query"]
            print(
                f"max variance {s['max_variance']:.6g} "
                f"(query {q['index']} of {q['family']} on {','.join(q['view']) or 'the total'})"
                + (
                    f"; certified lower bound {s['max_variance_lower_bound']:.6g} "
                    f"(relative gap {s['max_variance_gap']:.2e})"
                    if "max_variance_lower_bound" in s
                    else ""
                )
            )
        if "svd_bound" in s:
            print(f"SVD bound on RMSE (any Gaussian mechanism) {s['svd_bound_rmse']:.6g}")
        if s.get("noise") == "laplace":
            print(f"privacy: pure epsilon-DP, epsilon {s['epsilon']:.6g} (Laplace noise)")
        else:
            print(
                f"privacy: beta {s['beta']:.6g} = rho-zCDP {s['rho']:.6g} = mu-GDP {s['mu']:.6g} = "
                f"({s['epsilon']:.6g}, {s['delta']:g})-DP, {s.get('neighbours', 'add-remove')} neighbours"
            )
    return 0


def _measure(args: argparse.Namespace) -> int:
    from .data import load_records, warn_dropped  # loads numpy: import querysmasher.cli stays fast
    from .h5read import probe  # loads h5py, numpy: import querysmasher.cli stays fast
    from .measure import (  # loads h5py, numpy: import querysmasher.cli stays fast
        check_plan,
        measure_plan_to_file,
        plan_digest,
    )
    from .noise import make_noise  # loads numpy: import querysmasher.cli stays fast
    from .planfiles import load_any_plan  # loads h5py, numpy: import querysmasher.cli stays fast
    from .schema import parse_schema  # import querysmasher.cli stays fast

    check_output(args.out, inputs=[args.plan, args.data, args.domain, args.schema])
    probe(args.plan, "--plan")  # HDF5 crashes or hangs on some corrupted files: a child reads it first
    plan = load_any_plan(args.plan)  # every field checked
    check_plan(plan)  # the privacy cost of what will be applied, before any record is read
    noise = make_noise(args.seed, args.sampler)  # bad --seed/--sampler before any record is read
    if args.schema:
        given = parse_schema(args.schema)
        if given.names != plan.schema.names or given.sizes != plan.schema.sizes:
            raise InputError("--schema", args.schema, f"does not match the plan's schema {plan.schema.name!r}")
    records = load_records(args.data, plan.schema, domain_file=args.domain, on_invalid=args.on_invalid)
    warn_dropped(records)
    if noise.seeded:
        log.warning("fixed noise seed: this release is for experiments only")
    measure_plan_to_file(plan, records, noise, args.out, plan_sha256=plan_digest(args.plan))
    return 0


def _reconstruct(args: argparse.Namespace) -> int:
    from .h5read import probe  # loads h5py, numpy: import querysmasher.cli stays fast
    from .measure import plan_digest  # loads h5py, numpy: import querysmasher.cli stays fast
    from .planfiles import load_any_plan  # loads h5py, numpy: import querysmasher.cli stays fast
    from .reconstruct import reconstruct_plan_to_file  # loads h5py, numpy: import querysmasher.cli stays fast

    if args.max_answers is not None and args.max_answers < 0:
        raise InputError("--max-answers", args.max_answers, "must be >= 0")
    inputs = [args.plan, args.measurements]
    check_output(args.out, inputs=inputs)
    if args.csv:
        check_output(args.csv, "--csv", inputs=inputs + [args.out], folder=True)
    probe(args.plan, "--plan")  # HDF5 crashes or hangs on some corrupted files: a child reads them first
    probe(args.measurements, "--measurements")
    plan = load_any_plan(args.plan)
    info = reconstruct_plan_to_file(
        plan,
        args.measurements,
        args.out,
        plan_sha256=plan_digest(args.plan),
        csv_dir=args.csv,
        max_answers=args.max_answers,
        confidence=args.confidence,
    )
    print(json.dumps(info))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = level_from_flags(args.verbose, args.quiet)
    configure(None, level, progress=not args.quiet and sys.stderr.isatty())
    try:
        # a killed command (SIGTERM) still removes its temporary files
        with terminate_as_exit(), limited(cap_to_cores(args.threads, "--threads")):
            return {"plan": _plan, "measure": _measure, "reconstruct": _reconstruct, "release": _release}[args.command](
                args
            )
    except InputError as exc:
        print(f"querysmasher: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:  # the file system failed us (a full disk, a folder gone): one line too
        where = f" {exc.filename!r}" if exc.filename else ""
        print(f"querysmasher: error: file{where}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # Ctrl-C: temporary files and folders were removed on the way out
        print("querysmasher: interrupted: nothing was published", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        unconfigure()


if __name__ == "__main__":
    sys.exit(main())
