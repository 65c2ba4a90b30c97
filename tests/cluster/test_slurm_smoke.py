"""Smoke test: a tiny self-contained Snakemake workflow really runs through SLURM.

Needs the local cluster (tests/cluster/start_slurm.sh); skips otherwise.
Run:  python -m pytest tests/cluster -m cluster -q
"""

from __future__ import annotations

import json
import textwrap

import pytest
from slurm_helpers import assert_snakemake_ok, run_snakemake_on_slurm, slurm_job_info

pytestmark = pytest.mark.cluster

N_PARTS = 2

SNAKEFILE = textwrap.dedent(
    '''
    N_PARTS = int(config.get("n_parts", 2))

    rule all:
        input:
            "results/summary.json",

    # shell step: records the SLURM environment it ran in
    rule make_part:
        output:
            "results/part_{i}.txt",
        threads: 1
        resources:
            mem_mb=200,
            runtime=5,
        shell:
            """
            echo "i={wildcards.i}" > {output}
            echo "job_id=${{SLURM_JOB_ID:-none}}" >> {output}
            echo "cpus=${{SLURM_CPUS_PER_TASK:-none}}" >> {output}
            echo "mem=${{SLURM_MEM_PER_NODE:-none}}" >> {output}
            echo "partition=${{SLURM_JOB_PARTITION:-none}}" >> {output}
            """

    # python run: step with 2 threads
    rule square:
        input:
            "results/part_{i}.txt",
        output:
            "results/square_{i}.json",
        threads: 2
        resources:
            mem_mb=300,
            runtime=5,
        run:
            import json, os
            with open(input[0]) as fh:
                part = dict(line.strip().split("=", 1) for line in fh if "=" in line)
            i = int(wildcards.i)
            with open(output[0], "w") as fh:
                json.dump(
                    {
                        "i": i,
                        "square": i * i,
                        "part": part,
                        "threads": threads,
                        "job_id": os.environ.get("SLURM_JOB_ID"),
                        "cpus": os.environ.get("SLURM_CPUS_PER_TASK"),
                        "mem": os.environ.get("SLURM_MEM_PER_NODE"),
                    },
                    fh,
                )

    # aggregate
    rule aggregate:
        input:
            expand("results/square_{i}.json", i=range(N_PARTS)),
        output:
            "results/summary.json",
        threads: 1
        resources:
            mem_mb=100,
            runtime=5,
        run:
            import json, os
            items = [json.load(open(f)) for f in input]
            with open(output[0], "w") as fh:
                json.dump(
                    {
                        "total": sum(d["square"] for d in items),
                        "items": items,
                        "job_id": os.environ.get("SLURM_JOB_ID"),
                    },
                    fh,
                )
    '''
)


def _is_job_id(value) -> bool:
    return isinstance(value, str) and value.isdigit() and int(value) > 0


def test_snakemake_runs_jobs_through_slurm(slurm_cluster, tmp_path):
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(SNAKEFILE)

    proc = run_snakemake_on_slurm(tmp_path, snakefile, extra_args=["--config", f"n_parts={N_PARTS}"], timeout=600)
    assert_snakemake_ok(proc)

    # all outputs exist
    summary_path = tmp_path / "results" / "summary.json"
    for i in range(N_PARTS):
        assert (tmp_path / "results" / f"part_{i}.txt").is_file()
        assert (tmp_path / "results" / f"square_{i}.json").is_file()
    assert summary_path.is_file()

    summary = json.loads(summary_path.read_text())
    assert summary["total"] == sum(i * i for i in range(N_PARTS))

    # every job ran inside a SLURM allocation, each one its own sbatch job
    job_ids = [summary["job_id"]]
    for item in summary["items"]:
        part = item["part"]
        job_ids += [item["job_id"], part["job_id"]]
        assert part["partition"] == slurm_cluster["partition"], part
        # threads reached sbatch as --cpus-per-task
        assert part["cpus"] == "1", part
        assert item["threads"] == 2, item
        assert item["cpus"] == "2", item
    assert all(_is_job_id(j) for j in job_ids), f"not SLURM job ids: {job_ids}"
    assert len(set(job_ids)) == 2 * N_PARTS + 1, f"jobs were not separate: {job_ids}"

    # SLURM itself knows those jobs as completed, with the rule's resources
    # (MinJobAge=600 keeps finished jobs visible to scontrol/squeue).
    # Note: SLURM_MEM_PER_NODE is not visible inside the job step, so memory
    # is checked here: mem_mb -> sbatch --mem -> MinMemoryNode.
    expected = {summary["job_id"]: ("1", "100M")}
    for item in summary["items"]:
        expected[item["part"]["job_id"]] = ("1", "200M")
        expected[item["job_id"]] = ("2", "300M")
    for job_id, (cpus, mem) in expected.items():
        info = slurm_job_info(job_id)
        assert info, f"scontrol does not know job {job_id}"
        assert info.get("JobState") == "COMPLETED", (job_id, info.get("JobState"))
        assert info.get("Partition") == slurm_cluster["partition"], info
        assert info.get("NumCPUs") == cpus, (job_id, info.get("NumCPUs"))
        assert info.get("MinMemoryNode") == mem, (job_id, info.get("MinMemoryNode"))
