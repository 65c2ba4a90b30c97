"""Requested resources against measured use, per job and per rule, of finished workflow runs.

Reads Snakemake's log of each run (``.snakemake/log/*.snakemake.log``: every job it started, with
its rule, benchmark file and the ``resources:`` it requested, ``mem_mb`` and ``runtime``) and each
job's benchmark file (``max_rss`` in MB, ``s`` in seconds; Snakemake samples RSS every 0.5 s for the
first 15 s of a job, then every 30 s). A job run more than once (a retry, or a later run) counts
with its last request and the benchmark file as it is now.

The acceptance band of the memory requests (issue 23): ``peak <= mem_mb <= 3 x peak + 500``.
Runtime requests (minutes) must cover the measured seconds.

    python bench/requests.py WORKDIR                      # the newest log of WORKDIR
    python bench/requests.py WORKDIR --all-logs           # every log of WORKDIR (several runs, tables)
    python bench/requests.py --log L1 --log L2 -C WORKDIR # given logs, paths relative to WORKDIR
    python bench/requests.py WORKDIR --jobs               # also one line per job
    python bench/requests.py WORKDIR --check              # exit 1 when a job is outside the band
    python bench/requests.py WORKDIR --recompute config/paper/table4.yaml   # today's estimates instead

``--recompute CONFIG [CONFIG ...]`` (run from the repo root with ``PYTHONPATH=src``; the CONFIGs
layered over ``config/config.yaml`` in order, as Snakemake's ``--configfile`` does) replaces the
logged request of every per-experiment, decompose and whole-grid job by what the current code estimates for it
(``querysmasher.pipeline.resources``, ``cache.decompose_mem_mb``, with the run's manifests), so
estimates changed after a run can be checked against its measured peaks without running it again;
solve jobs keep their logged request (theirs is stored in the run's manifests).

It prints per rule: jobs, measured peak (min-max), requested mem_mb (min-max), the smallest and
largest ratio requested / peak, the jobs under their peak and the jobs above 3 x peak + 500 MB,
and the largest measured seconds against the smallest runtime request; then the worst job overall.
Jobs without a benchmark file (rules without a ``benchmark:`` directive, e.g. ``all``) are counted
as "unmeasured", and so are jobs whose recorded peak is below :data:`UNSAMPLED_MB` (a job that
ended before Snakemake's first sample of its process: it records a few MB).
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

BAND_FACTOR = 3.0
BAND_SLACK_MB = 500.0
# below this a benchmark's max_rss is not the job's process: Python importing numpy alone holds 28 MB
# (measured, `/usr/bin/time python -c "import numpy"`); Table 4's n = 50 circular allocates ran 0.2-0.5 s
# and recorded 0-3 MB
UNSAMPLED_MB = 20.0

_HEAD = re.compile(r"^(?:local)?(?:rule|checkpoint) (\S+):$")
_FIELD = re.compile(r"^\s{4}(\w+): (.*)$")


@dataclass
class Job:
    rule: str
    benchmark: str | None
    mem_mb: float | None
    runtime: float | None  # minutes
    wildcards: str = ""
    attempts: int = 1
    peak_mb: float | None = None
    seconds: float | None = None

    @property
    def sampled(self) -> bool:
        """Whether the benchmark caught the job's process: a peak below :data:`UNSAMPLED_MB` is a
        sample taken before (or after) the Python process that does the work."""
        return self.peak_mb is not None and self.peak_mb >= UNSAMPLED_MB

    @property
    def ratio(self) -> float | None:
        if self.mem_mb is None or not self.sampled:
            return None
        return self.mem_mb / self.peak_mb

    @property
    def under(self) -> bool:
        return self.sampled and self.mem_mb is not None and self.mem_mb < self.peak_mb

    @property
    def over(self) -> bool:
        return self.sampled and self.mem_mb is not None and self.mem_mb > BAND_FACTOR * self.peak_mb + BAND_SLACK_MB

    @property
    def short_runtime(self) -> bool:
        return self.seconds is not None and self.runtime is not None and self.seconds > 60 * self.runtime


def _resources(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(", "):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def parse_log(path: Path) -> list[Job]:
    """Every job block of a Snakemake log, in order (a retried job appears once per attempt)."""
    jobs: list[Job] = []
    cur: dict | None = None

    def flush():
        if cur is not None and cur.get("rule"):
            res = _resources(cur.get("resources", ""))
            mem = float(res["mem_mb"]) if "mem_mb" in res else None
            rt = float(res["runtime"]) if "runtime" in res else None
            jobs.append(Job(cur["rule"], cur.get("benchmark"), mem, rt, cur.get("wildcards", "")))

    for line in path.read_text(errors="replace").splitlines():
        m = _HEAD.match(line)
        if m:
            flush()
            cur = {"rule": m.group(1)}
            continue
        if cur is None:
            continue
        f = _FIELD.match(line)
        if f:
            cur[f.group(1)] = f.group(2)
        elif line.strip():  # the block ended
            flush()
            cur = None
    flush()
    return jobs


def read_benchmark(path: Path) -> tuple[float | None, float | None]:
    """(max_rss MB, seconds) of a benchmark file's last row (None where absent or NA)."""
    try:
        with open(path) as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
    except FileNotFoundError:
        return None, None
    if not rows:
        return None, None
    row = rows[-1]

    def num(key):
        try:
            v = float(row.get(key, "NA"))
        except ValueError:
            return None
        return v if math.isfinite(v) else None

    return num("max_rss"), num("s")


def collect(logs: list[Path], workdir: Path) -> list[Job]:
    """Jobs of the given logs, one per benchmark file (the last request, attempts counted), with
    their measured peak and seconds; jobs without a benchmark file are kept once per occurrence."""
    by_bench: dict[str, Job] = {}
    unmeasured: list[Job] = []
    for log in logs:
        for job in parse_log(log):
            if not job.benchmark:
                unmeasured.append(job)
                continue
            prev = by_bench.get(job.benchmark)
            if prev is not None:
                job.attempts = prev.attempts + 1
            by_bench[job.benchmark] = job
    for job in by_bench.values():
        job.peak_mb, job.seconds = read_benchmark(workdir / job.benchmark)
    return list(by_bench.values()) + unmeasured


def _merged_config(paths: list[str]) -> dict:
    """config/config.yaml with ``paths`` layered over it in order (as Snakemake's --configfile)."""
    import yaml

    base = yaml.safe_load(Path("config/config.yaml").read_text())
    for path in paths:
        over = yaml.safe_load(Path(path).read_text()) or {}
        for k, v in over.items():
            if isinstance(v, dict) and isinstance(base.get(k), dict):
                base[k] = {**base[k], **v}
            else:
                base[k] = v
    return base


def recompute(jobs: list[Job], config_paths: list[str], workdir: Path) -> int:
    """Replace the logged mem_mb of the jobs the current estimates cover; returns how many."""
    import json

    from snakemake.utils import validate

    from querysmasher.pipeline.cache import decompose_mem_mb
    from querysmasher.pipeline.config import check_config, releasable_experiments, set_aside_unsupported
    from querysmasher.pipeline.layout import problem_dir
    from querysmasher.pipeline.resources import grid_resources, stage_resources

    config = _merged_config(config_paths)
    validate(config, str(Path("config/schema.yaml").resolve()))
    experiments, _ = set_aside_unsupported(check_config(config), config["unsupported"])
    measured = {n: bool(config["release"]) and ok for n, ok in releasable_experiments(experiments).items()}
    problems = {}
    for e in experiments.values():
        problems.setdefault(e.problem, e)
    done = 0
    for j in jobs:
        wc = dict(part.split("=", 1) for part in j.wildcards.split(", ") if "=" in part)
        est = None
        if j.rule in ("allocate", "measure", "reconstruct", "evaluate") and wc.get("experiment") in experiments:
            e = experiments[wc["experiment"]]
            mpath = workdir / problem_dir(e.problem) / "manifest.json"
            manifest = json.loads(mpath.read_text()) if mpath.exists() else None
            report = bool(
                config["allocate"]["max_variance"] or config["allocate"]["store_mechanisms"] or measured[e.name]
            )
            est = stage_resources(j.rule, e, manifest, measured=measured[e.name], max_variance=report)["mem_mb"]
        elif j.rule == "decompose" and wc.get("problem") in problems:
            est = decompose_mem_mb(problems[wc["problem"]])
        elif j.rule in ("aggregate", "paper_table"):
            est = grid_resources("aggregate" if j.rule == "aggregate" else "paper", len(experiments))["mem_mb"]
        if est is not None:
            j.mem_mb = float(est)
            done += 1
    return done


def _fmt_range(vals: list[float], fmt: str = "{:.0f}") -> str:
    if not vals:
        return "-"
    lo, hi = min(vals), max(vals)
    return fmt.format(lo) if lo == hi else f"{fmt.format(lo)}-{fmt.format(hi)}"


def report(jobs: list[Job], *, per_job: bool = False, out=sys.stdout) -> int:
    """Print the per-rule table; returns the number of jobs outside the band."""
    rules: dict[str, list[Job]] = {}
    for j in jobs:
        rules.setdefault(j.rule, []).append(j)
    head = (
        "rule",
        "jobs",
        "unmeasured",
        "peak MB",
        "mem_mb",
        "min ratio",
        "max ratio",
        "under",
        "over band",
        "max s",
        "min runtime",
        "runtime short",
    )
    rows = []
    for rule in sorted(rules):
        js = rules[rule]
        m = [j for j in js if j.peak_mb is not None and j.mem_mb is not None]
        ratios = [j.ratio for j in m if j.ratio is not None]
        secs = [j.seconds for j in js if j.seconds is not None]
        rts = [j.runtime for j in js if j.runtime is not None]
        rows.append(
            (
                rule,
                str(len(js)),
                str(len(js) - len(m)),
                _fmt_range([j.peak_mb for j in m]),
                _fmt_range([j.mem_mb for j in m]),
                f"{min(ratios):.2f}" if ratios else "-",
                f"{max(ratios):.2f}" if ratios else "-",
                str(sum(j.under for j in m)),
                str(sum(j.over for j in m)),
                f"{max(secs):.1f}" if secs else "-",
                f"{min(rts):.0f}" if rts else "-",
                str(sum(j.short_runtime for j in js)),
            )
        )
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)), file=out)
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)), file=out)
    measured = [j for j in jobs if j.ratio is not None]
    bad = [j for j in measured if j.under or j.over]
    print(
        f"\n{len(jobs)} jobs, {len(measured)} measured; "
        f"band peak <= mem_mb <= {BAND_FACTOR:g} x peak + {BAND_SLACK_MB:g} MB: "
        f"{len(bad)} outside ({sum(j.under for j in measured)} under their peak, "
        f"{sum(j.over for j in measured)} over the band)",
        file=out,
    )
    if measured:
        worst = max(measured, key=lambda j: j.ratio)
        least = min(measured, key=lambda j: j.ratio)
        print(
            f"largest ratio {worst.ratio:.2f} ({worst.rule} {worst.benchmark}: "
            f"{worst.mem_mb:.0f} MB for {worst.peak_mb:.0f} MB)",
            file=out,
        )
        print(
            f"smallest ratio {least.ratio:.2f} ({least.rule} {least.benchmark}: "
            f"{least.mem_mb:.0f} MB for {least.peak_mb:.0f} MB)",
            file=out,
        )
    if per_job or bad:
        print("\n" + ("jobs:" if per_job else "jobs outside the band:"), file=out)
        for j in sorted(jobs if per_job else bad, key=lambda j: (j.rule, j.benchmark or "")):
            flag = "UNDER" if j.under else "OVER" if j.over else ""
            peak = f"{j.peak_mb:.0f}" if j.peak_mb is not None else "NA"
            ratio = f"{j.ratio:.2f}" if j.ratio is not None else "-"
            secs = f"{j.seconds:.1f}" if j.seconds is not None else "NA"
            print(
                f"  {j.rule:12s} peak {peak:>6s} MB  mem_mb {j.mem_mb or 0:>7.0f}  ratio {ratio:>6s}  "
                f"{secs:>7s} s / {j.runtime or 0:.0f} min  "
                f"x{j.attempts}  {flag:5s} {j.benchmark or j.wildcards}",
                file=out,
            )
    return len(bad)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workdir", nargs="?", default=".", help="the run's working directory (default .)")
    ap.add_argument("-C", "--chdir", help="resolve benchmark paths here (default: workdir)")
    ap.add_argument(
        "--log",
        action="append",
        default=[],
        help="a Snakemake log (repeatable; default: the newest of WORKDIR/.snakemake/log)",
    )
    ap.add_argument("--all-logs", action="store_true", help="every log of WORKDIR/.snakemake/log, oldest first")
    ap.add_argument("--jobs", action="store_true", help="one line per job")
    ap.add_argument("--check", action="store_true", help="exit 1 when a job is outside the band")
    ap.add_argument(
        "--recompute",
        metavar="CONFIG",
        nargs="+",
        help="today's estimates for the run's jobs of CONFIG (several: layered in order; from the repo root)",
    )
    args = ap.parse_args(argv)
    workdir = Path(args.chdir or args.workdir)
    logs = [Path(p) for p in args.log]
    if not logs:
        found = sorted((Path(args.workdir) / ".snakemake" / "log").glob("*.snakemake.log"))
        if not found:
            print(f"no Snakemake log under {args.workdir}/.snakemake/log", file=sys.stderr)
            return 2
        logs = found if args.all_logs else found[-1:]
    jobs = collect(logs, workdir)
    print(f"logs: {', '.join(str(p) for p in logs)}")
    if args.recompute:
        print(
            f"requests recomputed by today's estimates for {recompute(jobs, args.recompute, workdir)} jobs "
            "(solve jobs: as logged)"
        )
    bad = report(jobs, per_job=args.jobs)
    return 1 if (args.check and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
