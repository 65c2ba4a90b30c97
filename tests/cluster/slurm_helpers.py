"""Helpers for tests that run Snakemake workflows on the local SLURM cluster.

The cluster is started by ``tests/cluster/start_slurm.sh`` (``.ci/run`` does
that); these helpers never start it, they only detect it and use it.

Typical use in a test (``tests/cluster/conftest.py`` puts this directory on
``sys.path`` so ``import slurm_helpers`` works from any test module)::

    from slurm_helpers import run_snakemake_on_slurm, assert_snakemake_ok

    def test_real_workflow(slurm_cluster, tmp_path):        # fixture skips if no cluster
        proc = run_snakemake_on_slurm(tmp_path, REPO_ROOT / "workflow" / "Snakefile",
                                      extra_args=["--configfile", str(cfg)], timeout=900)
        assert_snakemake_ok(proc)

Every cluster command is wrapped in ``timeout -s INT`` (plus a SIGKILL
fallback): with the wrong status command the plugin waits forever and ignores
SIGTERM.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SLURM_PROFILE = REPO_ROOT / "profiles" / "slurm"
PARTITION = "main"  # must match start_slurm.sh and profiles/slurm/config.yaml

# Node states in which a submitted job can start right away (or soon).
_USABLE_STATES = ("idle", "mixed")


def _run(cmd: Sequence[str], timeout_s: int = 15) -> subprocess.CompletedProcess:
    """Run a short cluster command, bounded by ``timeout -s INT``."""
    full = ["timeout", "-s", "INT", "-k", "5", str(timeout_s), *cmd]
    return subprocess.run(full, capture_output=True, text=True, timeout=timeout_s + 15, check=False)


def cluster_status(partition: str = PARTITION) -> tuple[bool, str]:
    """Return ``(available, reason)`` for the local SLURM cluster.

    Available means: ``sinfo`` exists, answers within 15 s and reports at least
    one node of ``partition`` as idle (or mixed).  ``reason`` is a one-line
    human-readable explanation, suitable for ``pytest.skip``.
    """
    for tool in ("sinfo", "sbatch", "squeue", "snakemake"):
        if shutil.which(tool) is None:
            return False, f"`{tool}` not found on PATH (start tests/cluster/start_slurm.sh)"
    try:
        proc = _run(["sinfo", "-h", "-N", "-p", partition, "-o", "%N %T %c %m"])
    except (OSError, subprocess.TimeoutExpired) as exc:  # pragma: no cover
        return False, f"sinfo failed: {exc}"
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        return False, (
            f"sinfo exited {proc.returncode}"
            + (f": {msg[-1]}" if msg else "")
            + " (is the cluster running? tests/cluster/start_slurm.sh)"
        )
    nodes = [line.split() for line in proc.stdout.splitlines() if line.strip()]
    if not nodes:
        return False, f"sinfo lists no node in partition '{partition}'"
    for fields in nodes:
        # exact match: "idle*" (not responding), "drained", "down" are unusable
        if len(fields) >= 4 and fields[1].lower() in _USABLE_STATES:
            return True, f"node {fields[0]} is {fields[1]} (CPUs={fields[2]}, RealMemory={fields[3]}MB)"
    states = ", ".join(f"{f[0]}={f[1]}" for f in nodes if len(f) >= 2)
    return False, f"no idle node in partition '{partition}' ({states})"


def cluster_available(partition: str = PARTITION) -> bool:
    """True iff ``sinfo`` answers with an idle (or mixed) node in ``partition``."""
    return cluster_status(partition)[0]


def node_resources(partition: str = PARTITION) -> tuple[int, int]:
    """``(cpus, mem_mb)`` of the first node of ``partition``."""
    proc = _run(["sinfo", "-h", "-N", "-p", partition, "-o", "%c %m"])
    cpus, mem = proc.stdout.split()[:2]
    return int(cpus), int(re.sub(r"\D", "", mem))


def cancel_jobs_under(workdir: os.PathLike | str) -> list[str]:
    """scancel every queued/running job whose working directory is ``workdir``.

    Used after a timed-out Snakemake run so no orphaned jobs keep the node busy.
    Returns the cancelled job ids.
    """
    workdir = str(Path(workdir).resolve())
    proc = _run(["squeue", "-h", "-t", "PENDING,RUNNING,CONFIGURING,COMPLETING", "-o", "%i|%Z"])
    ids = []
    for line in proc.stdout.splitlines():
        jid, _, wd = line.partition("|")
        if wd.strip() == workdir or wd.strip().startswith(workdir + os.sep):
            ids.append(jid.strip())
    if ids:
        _run(["scancel", *ids])
    return ids


def run_snakemake_on_slurm(
    workdir: os.PathLike | str,
    snakefile: os.PathLike | str,
    extra_args: Iterable[str] = (),
    timeout: int = 600,
    profile: os.PathLike | str = SLURM_PROFILE,
    env: dict | None = None,
) -> subprocess.CompletedProcess:
    """Run ``timeout -s INT <timeout> snakemake --profile <profile> -d <workdir> -s <snakefile> ...``.

    Output (stdout+stderr) is captured, returned and also written to
    ``<workdir>/snakemake_slurm.log``.  If the run times out (exit 124/137),
    leftover SLURM jobs of this workdir are cancelled.  Never raises on a
    failed run: check ``proc.returncode`` (see :func:`assert_snakemake_ok`).
    """
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [
        "timeout",
        "-s",
        "INT",
        "-k",
        "60",
        str(timeout),
        "snakemake",
        "--profile",
        str(profile),
        "-d",
        str(workdir),
        "-s",
        str(Path(snakefile).resolve()),
        *map(str, extra_args),
    ]
    run_env = dict(os.environ if env is None else env)
    run_env.setdefault("PYTHONUNBUFFERED", "1")
    try:
        proc = subprocess.run(
            cmd,
            cwd=workdir,
            env=run_env,
            capture_output=True,
            text=True,
            timeout=timeout + 120,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:  # timeout(1) itself got stuck
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        proc = subprocess.CompletedProcess(cmd, 124, out, err)
    log = workdir / "snakemake_slurm.log"
    log.write_text(
        "$ " + " ".join(cmd) + f"\n# exit code {proc.returncode}\n" + (proc.stdout or "") + (proc.stderr or "")
    )
    if proc.returncode in (124, 137):
        cancelled = cancel_jobs_under(workdir)
        proc.stderr = (proc.stderr or "") + (
            f"\n[slurm_helpers] snakemake timed out after {timeout}s; cancelled SLURM jobs: {cancelled or 'none'}\n"
        )
    return proc


def assert_snakemake_ok(proc: subprocess.CompletedProcess, tail: int = 80) -> None:
    """Assert a run of :func:`run_snakemake_on_slurm` succeeded; show the log tail if not."""
    if proc.returncode != 0:
        text = ((proc.stdout or "") + (proc.stderr or "")).splitlines()
        raise AssertionError(
            f"snakemake exited with {proc.returncode}"
            + (" (timeout)" if proc.returncode in (124, 137) else "")
            + f"\ncommand: {' '.join(map(str, proc.args))}\n--- last {tail} lines ---\n"
            + "\n".join(text[-tail:])
        )


def slurm_job_info(job_id: str | int) -> dict[str, str]:
    """``scontrol show job <id>`` as a dict (empty if the job is unknown).

    Finished jobs stay visible for MinJobAge (600 s on the test cluster).
    """
    proc = _run(["scontrol", "-o", "show", "job", str(job_id)])
    if proc.returncode != 0:
        return {}
    info = {}
    for token in proc.stdout.split():
        key, sep, value = token.partition("=")
        if sep:
            info.setdefault(key, value)
    return info
