"""Project a finished workflow run onto K cores or a cluster: wall time and critical path.

Reads the job graph and each job's duration from Snakemake's own records of a finished run
(``.snakemake/metadata``: per output file its rule, inputs, start and end time, job hash), and
simulates the same jobs on K cores: a job starts when every job that wrote one of its inputs has
ended and a core is free (ready jobs longest first, as the workflow's solve priorities do), plus a
fixed per-job overhead (``--overhead``: Snakemake's own scheduling between jobs, measured from the
run by ``--calibrate``) and, on a cluster, a per-submission latency (``--latency``: queueing and
start-up of a batch job; jobs of one group, ``--grouped``, pay it once per group).

    python bench/makespan.py WORKDIR --cores 1 2 16 64 128            # projections
    python bench/makespan.py WORKDIR --cores 128 --latency 30         # a cluster, 30 s per submission
    python bench/makespan.py WORKDIR --calibrate 2                   # the per-job overhead of a --cores 2 run
    python bench/makespan.py WORKDIR --cores 1 --overhead 0.2 --startup 10   # with another run's calibration
    python bench/makespan.py WORKDIR WORKDIR2 --cores 128             # several runs (tables) as one grid
    python bench/makespan.py WORKDIR --between START END --cores 1 2   # the jobs of one table of a grid run

It prints, per K, the projected wall time, the busy fraction, and the critical path (the longest
chain of dependent jobs, with its jobs), which bounds the wall time however many cores there are.
Jobs are Snakemake rule instances that produced files (local rules that write nothing, like
``all``, are free). Durations are end minus start as Snakemake recorded them (process start-up
included).
"""

from __future__ import annotations

import argparse
import base64
import heapq
import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Job:
    key: tuple
    rule: str
    start: float
    end: float
    outputs: list[str] = field(default_factory=list)
    inputs: set[str] = field(default_factory=set)
    parents: set[tuple] = field(default_factory=set)

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 0.0)


SIDE_EFFECT_RULES = ("decompose",)  # rules that write inputs of later jobs beside their declared outputs


def read_jobs(workdirs: list[Path], side_effect_rules=SIDE_EFFECT_RULES) -> dict[tuple, Job]:
    """Every job of the runs in ``workdirs`` (their ``.snakemake/metadata`` records), with the jobs
    that wrote their inputs as parents. Outputs are keyed by absolute path, so runs sharing files
    (a content-addressed solve of another table) share the job that wrote them. An input no job
    declared (the decompose checkpoint's subproblem and batch files) belongs to the jobs of
    ``side_effect_rules`` running when it was last modified."""
    jobs: dict[tuple, Job] = {}
    writer: dict[str, tuple] = {}
    for wd in workdirs:
        meta = wd / ".snakemake" / "metadata"
        if not meta.is_dir():
            raise SystemExit(f"{meta} does not exist: run the workflow in {wd} first")
        for f in meta.iterdir():
            try:
                rec = json.loads(f.read_text())
                name = base64.b64decode(f.name.replace("@", "/") + "=" * (-len(f.name) % 4)).decode()
            except (ValueError, OSError):
                continue
            if rec.get("incomplete") or rec.get("starttime") is None:
                continue
            out = str((wd / name).resolve())
            key = (str(wd), rec["rule"], rec.get("job_hash"))  # one job, whatever number of outputs
            job = jobs.get(key)
            if job is None:
                job = jobs[key] = Job(key, rec["rule"], float(rec["starttime"]), float(rec["endtime"]))
            job.start, job.end = min(job.start, float(rec["starttime"])), max(job.end, float(rec["endtime"]))
            job.outputs.append(out)
            raw = rec.get("input") or []
            inputs = raw if isinstance(raw, list) else _parse_list(raw)
            job.inputs.update(str((wd / i).resolve()) for i in inputs)
            writer[out] = key
    # files a job wrote beside its declared outputs (the decompose checkpoint's subproblem and batch
    # files, content-addressed) belong to the job that was running when they were last modified
    by_start = sorted((j for j in jobs.values() if j.rule in side_effect_rules), key=lambda j: j.start)
    for job in jobs.values():
        for i in job.inputs:
            parents = [writer[i]] if i in writer else _side_effect_writers(i, by_start)
            job.parents.update(p for p in parents if p != job.key)
    return jobs


def _side_effect_writers(path: str, by_start: list[Job]) -> list[tuple]:
    """The jobs running when ``path`` was last modified (all of them when several were: the file
    exists once each has ended)."""
    if (
        "/benchmarks/" in path
    ):  # a job's benchmark file: written by Snakemake after the job, whose outputs are inputs too
        return []
    try:
        mtime = Path(path).stat().st_mtime
    except OSError:
        return []
    return [j.key for j in by_start if j.start - 1e-3 <= mtime <= j.end + 1e-3]


def _parse_list(text: str) -> list[str]:
    import ast

    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else []


def critical_path(jobs: dict[tuple, Job], overhead: float = 0.0) -> tuple[float, list[Job]]:
    """The longest chain of dependent jobs (seconds, jobs in order)."""
    order = _topological(jobs)
    best: dict[tuple, float] = {}
    via: dict[tuple, tuple | None] = {}
    for k in order:
        j = jobs[k]
        prev = max(j.parents, key=lambda p: best[p], default=None)
        best[k] = (best[prev] if prev else 0.0) + j.seconds + overhead
        via[k] = prev
    end = max(best, key=best.get)
    chain = []
    k: tuple | None = end
    while k is not None:
        chain.append(jobs[k])
        k = via[k]
    return best[end], chain[::-1]


def _topological(jobs: dict[tuple, Job]) -> list[tuple]:
    children = defaultdict(list)
    indeg = {k: 0 for k in jobs}
    for k, j in jobs.items():
        for p in j.parents:
            children[p].append(k)
            indeg[k] += 1
    ready = [k for k, d in indeg.items() if d == 0]
    out = []
    while ready:
        k = ready.pop()
        out.append(k)
        for c in children[k]:
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    if len(out) != len(jobs):
        raise SystemExit("the job graph has a cycle (metadata of several runs over the same files?)")
    return out


def simulate(
    jobs: dict[tuple, Job], cores: int, *, overhead: float = 0.0, latency: float = 0.0, grouped: set[str] = frozenset()
) -> float:
    """The wall time of the jobs on ``cores`` cores (one core per job): list scheduling, ready jobs
    longest first; each job costs ``overhead`` more, and ``latency`` more unless its rule is in
    ``grouped`` and a job of the same rule started the same submission (grouped jobs pay it once
    per wave)."""
    children = defaultdict(list)
    waiting = {k: len(j.parents) for k, j in jobs.items()}
    for k, j in jobs.items():
        for p in j.parents:
            children[p].append(k)
    ready = [(-jobs[k].seconds, k) for k, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    running: list[tuple[float, tuple]] = []
    now, free, paid = 0.0, cores, set()
    while ready or running:
        while ready and free > 0:
            _, k = heapq.heappop(ready)
            j = jobs[k]
            wait = latency
            if j.rule in grouped:
                wave = (j.rule, round(now, 6))
                wait = 0.0 if wave in paid else latency
                paid.add(wave)
            heapq.heappush(running, (now + wait + overhead + j.seconds, k))
            free -= 1
        now, k = heapq.heappop(running)
        free += 1
        for c in children[k]:
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, (-jobs[c].seconds, c))
    return now


def slowed(jobs: dict[tuple, Job], factor: float) -> dict[tuple, Job]:
    """The same jobs, each ``factor`` times as long (the graph unchanged)."""
    return {
        k: Job(j.key, j.rule, j.start, j.start + factor * j.seconds, j.outputs, j.inputs, j.parents)
        for k, j in jobs.items()
    }


def measured_wall(jobs: dict[tuple, Job]) -> float:
    return max(j.end for j in jobs.values()) - min(j.start for j in jobs.values())


def calibrate(jobs: dict[tuple, Job], cores: int) -> float:
    """The per-job overhead that makes the simulation on ``cores`` reproduce this run's wall time
    (bisection; the run must have been made with ``--cores cores``)."""
    target = measured_wall(jobs)
    lo, hi = 0.0, max(1.0, target / max(len(jobs), 1))
    while simulate(jobs, cores, overhead=hi) < target:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if simulate(jobs, cores, overhead=mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workdirs", nargs="+", type=Path, help="folders of finished runs (each holds .snakemake/metadata)")
    p.add_argument("--cores", type=int, nargs="*", default=[1, 2, 16, 64, 128])
    p.add_argument("--overhead", type=float, default=0.0, help="seconds added to every job (scheduling between jobs)")
    p.add_argument(
        "--startup",
        type=float,
        default=0.0,
        help="seconds added once: Snakemake building the job graph before the first job and after checkpoints "
        "(a run's wall time minus its jobs' span)",
    )
    p.add_argument(
        "--slowdown",
        type=float,
        default=1.0,
        help="job durations times this on more than one core (jobs side by side share memory bandwidth and caches "
        "with each other and with Snakemake's own process; on this 2-vCPU machine the job time of a K = 2 run over "
        "a K = 1 run was 1.26 and 0.89 on 2026-12-03 and 0.99 and 1.01 on 2026-12-04: the host, not a constant; "
        "BENCHMARKS.md)",
    )
    p.add_argument("--latency", type=float, default=0.0, help="seconds per cluster submission (queue and start-up)")
    p.add_argument("--grouped", nargs="*", default=[], help="rules whose jobs share a submission per wave")
    p.add_argument(
        "--calibrate",
        type=int,
        metavar="K",
        help="print the per-job overhead that reproduces a run made with --cores K",
    )
    p.add_argument(
        "--between",
        type=float,
        nargs=2,
        metavar=("START", "END"),
        help="only the jobs that started between these epoch seconds "
        "(one table of a grid run table by table in one folder)",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    jobs = read_jobs([w.resolve() for w in args.workdirs])
    if args.between:
        lo, hi = args.between
        jobs = {k: j for k, j in jobs.items() if lo <= j.start <= hi}
        for j in jobs.values():
            j.parents &= jobs.keys()  # a file written before the window is an input, not a job
    if not jobs:
        raise SystemExit("no finished job in the metadata")
    if args.calibrate:
        total = sum(j.seconds for j in jobs.values())
        print(
            f"{len(jobs)} jobs, {total:.1f} s of job time; per-job overhead reproducing the jobs' measured span of "
            f"{measured_wall(jobs):.1f} s on {args.calibrate} cores: {calibrate(jobs, args.calibrate):.3f} s"
        )
        return 0
    total = sum(j.seconds for j in jobs.values())
    cp, chain = critical_path(jobs, args.overhead)
    rows = []
    for k in args.cores:
        on_k = jobs if k == 1 or args.slowdown == 1.0 else slowed(jobs, args.slowdown)
        wall = args.startup + simulate(on_k, k, overhead=args.overhead, latency=args.latency, grouped=set(args.grouped))
        rows.append(
            {
                "cores": k,
                "seconds": wall,
                "busy": (sum(j.seconds for j in on_k.values()) + len(jobs) * args.overhead)
                / ((wall - args.startup) * k)
                if wall > args.startup
                else 0.0,
            }
        )
    by_rule = defaultdict(lambda: [0, 0.0])
    for j in jobs.values():
        by_rule[j.rule][0] += 1
        by_rule[j.rule][1] += j.seconds
    out = {
        "jobs": len(jobs),
        "job_seconds": total,
        "measured_wall": measured_wall(jobs),
        "critical_path_seconds": cp,
        "critical_path": [
            f"{j.rule} {j.seconds:.1f} s {Path(j.outputs[0]).relative_to(Path(j.outputs[0]).parents[2]) if len(Path(j.outputs[0]).parents) > 2 else j.outputs[0]}"  # noqa: E501
            for j in chain
        ],
        "projections": rows,
        "by_rule": {r: {"jobs": n, "seconds": s} for r, (n, s) in sorted(by_rule.items())},
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{len(jobs)} jobs, {total:.1f} s of job time; measured wall time of the run(s) {out['measured_wall']:.1f} s")
    for r in rows:
        print(f"  {r['cores']:>4} cores: {r['seconds']:9.1f} s projected ({r['busy']:.0%} busy)")
    print(f"critical path {cp:.1f} s ({len(chain)} jobs):")
    for line in out["critical_path"]:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
