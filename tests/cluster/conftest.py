"""Fixtures for the `cluster` tests (need the local SLURM cluster).

The cluster is NOT started here: run tests/cluster/start_slurm.sh first
(.ci/run does).  Without an idle node every test using `slurm_cluster` skips.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Make `import slurm_helpers` work from any test module, whatever the
# rootdir / import mode / presence of __init__.py files.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import slurm_helpers  # noqa: E402
from slurm_helpers import (  # noqa: E402,F401  (re-exported for convenience)
    PARTITION,
    REPO_ROOT,
    SLURM_PROFILE,
    assert_snakemake_ok,
    cluster_available,
    cluster_status,
    run_snakemake_on_slurm,
    slurm_job_info,
)


@pytest.fixture(scope="session")
def slurm_cluster() -> dict:
    """Skip unless `sinfo` reports an idle node; return {'cpus', 'mem_mb', 'partition'}."""
    ok, reason = cluster_status()
    if not ok:
        pytest.skip(f"SLURM cluster not available: {reason}")
    cpus, mem_mb = slurm_helpers.node_resources()
    return {"cpus": cpus, "mem_mb": mem_mb, "partition": PARTITION}


@pytest.fixture(scope="session")
def slurm_profile() -> Path:
    return SLURM_PROFILE
