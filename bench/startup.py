"""The per-job start-up of the workflow: what a job costs before its first line of work.

Runs tiny Snakemake workflows of N jobs each in a temporary folder, ``snakemake --cores 1`` one
after another, and reports per job (wall time of the run minus that of a run with nothing to do,
over N; median of ``--repeats`` runs):

* ``shell``: a ``shell: "touch {output}"`` job -- Snakemake's own dispatch of a job (scheduling,
  the job's shell, output checks, metadata);
* ``script``: a ``script:`` job that only writes its output -- plus a Python process and
  Snakemake's script preamble (the pickled ``snakemake`` object);
* ``stage``: what every stage script of ``scripts/`` does before its work -- the thread cap and
  ``from querysmasher.pipeline import steps`` (numpy, h5py, the library);
* ``stage+scipy``: a stage that also loads ``scipy.linalg`` (solves and allocate do).

Then the import of ``querysmasher.pipeline.steps`` in one process, split by top-level package
(``python -X importtime``, median of the repeats). Usage::

    python bench/startup.py                 # 30 jobs per workflow, 5 repeats
    python bench/startup.py --jobs 60 --repeats 3 --json

Timings depend on the load: run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

KINDS = {
    "shell": None,
    "script": 'open(snakemake.output[0], "w").close()\n',
    "stage": (
        "from querysmasher.threads import cap_process\n"
        "cap_process(snakemake.threads)\n"
        "from querysmasher.pipeline import steps\n"
        'open(snakemake.output[0], "w").close()\n'
    ),
    "stage+scipy": (
        "from querysmasher.threads import cap_process\n"
        "cap_process(snakemake.threads)\n"
        "from querysmasher.pipeline import steps\n"
        "import scipy.linalg\n"
        'open(snakemake.output[0], "w").close()\n'
    ),
}


def _snakefile(n: int) -> str:
    rules = [f"rule all:\n    input: expand('{{k}}/{{i}}.txt', k={list(KINDS)!r}, i=range({n}))\n"]
    for k, body in KINDS.items():
        name = k.replace("+", "_")
        if body is None:
            rules.append(f"rule {name}:\n    output: '{k}/{{i}}.txt'\n    shell: 'touch {{output}}'\n")
        else:
            rules.append(f"rule {name}:\n    output: '{k}/{{i}}.txt'\n    threads: 1\n    script: '{name}.py'\n")
    return "\n".join(rules)


def _run(folder: Path, targets: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", *targets],
        cwd=folder,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0


def _clean(folder: Path) -> None:
    for k in KINDS:
        for f in (folder / k).glob("*.txt"):
            f.unlink()


def per_job(n: int, repeats: int) -> dict[str, float]:
    """Seconds per job of each kind (median over the repeats), Snakemake's fixed cost removed."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "Snakefile").write_text(_snakefile(n))
        for k, body in KINDS.items():
            if body is not None:
                (folder / f"{k.replace('+', '_')}.py").write_text(body)
        _clean(folder)
        _run(folder, ["all"])  # warm caches (bytecode, the file system)
        samples = defaultdict(list)
        for _ in range(repeats):
            for k in KINDS:
                targets = [f"{k}/{i}.txt" for i in range(n)]
                _clean(folder)
                samples[k].append(_run(folder, targets))
                samples["nothing"].append(_run(folder, targets))  # the same targets, now present: the fixed cost
        base = statistics.median(samples["nothing"])
        return {"fixed": base, **{k: (statistics.median(v) - base) / n for k, v in samples.items() if k != "nothing"}}


def import_split(repeats: int) -> dict[str, float]:
    """Seconds of ``from querysmasher.pipeline import steps`` by top-level package (median)."""
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "from querysmasher.pipeline import steps"],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
        by = defaultdict(float)
        for line in out.splitlines():
            if not line.startswith("import time:") or "self [us]" in line:
                continue
            self_us, _, name = line[len("import time:") :].split("|")
            by[name.strip().split(".")[0]] += int(self_us) / 1e6
        runs.append(by)
    names = sorted({k for r in runs for k in r})
    return {k: statistics.median(r.get(k, 0.0) for r in runs) for k in names}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=30, help="jobs per workflow (default 30)")
    ap.add_argument("--repeats", type=int, default=5, help="runs of each workflow; medians are reported (default 5)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    jobs = per_job(a.jobs, a.repeats)
    imports = import_split(a.repeats)
    out = {
        "jobs": a.jobs,
        "repeats": a.repeats,
        "per_job_seconds": jobs,
        "import_seconds": imports,
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "python": platform.python_version(),
    }
    if a.json:
        print(json.dumps(out))
        return 0
    print(f"Snakemake's fixed cost (nothing to do): {jobs['fixed']:.2f} s")
    prev = 0.0
    for k in KINDS:
        print(f"per {k:12s} job: {1000 * jobs[k]:6.0f} ms  (+{1000 * (jobs[k] - prev):.0f} ms)")
        prev = jobs[k]
    total = sum(imports.values())
    print(f"from querysmasher.pipeline import steps: {1000 * total:.0f} ms of imports")
    for k, v in sorted(imports.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {k:20s} {1000 * v:6.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
