import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One BLAS thread per worker (and the processes it starts): the README's command runs two
    # workers on two cores, where two OpenBLAS pools of two threads each spin against each other
    # (querysmasher.threads says why; the library's own default is one thread too).
    from querysmasher.threads import cap_process

    cap_process(1)

# Property tests draw the same examples on every run (a gate that passes once passes again; a failure
# reproduces), and keep no example database in the checkout. A wider, random search of the same
# properties: python -m pytest --hypothesis-profile=fuzz -k propert (or tests/test_*properties*.py).
settings.register_profile("gate", derandomize=True, database=None)
settings.register_profile("fuzz", max_examples=2000, database=None)
settings.load_profile("gate")

REPO_DATA = Path(__file__).resolve().parents[1] / "data"

# The small test schema: 3 x 4 x 2 x 3 = 72 cells (every full-domain matrix is small), one
# categorical attribute (B) so that hybrid mixes marginal and prefix factors.
SMALL_SCHEMA_YAML = "A: 3\nB: {size: 4, kind: categorical}\nC: 2\nD: 3\n"
# A synthetic [4]^3 schema (64 cells) and the records the measure/reconstruct tests draw on it.
TINY_SCHEMA = "synthetic:n=4,d=3"


@pytest.fixture(scope="session")
def _no_slurm_controller_probe(tmp_path_factory) -> str:
    """A directory whose ``scontrol`` fails at once (see :func:`_local_snakemake_skips_the_slurm_probe`)."""
    d = tmp_path_factory.mktemp("no-slurm-probe")
    shim = d / "scontrol"
    shim.write_text("#!/bin/sh\nexit 1\n")
    shim.chmod(0o755)
    return str(d)


@pytest.fixture(autouse=True)
def _local_snakemake_skips_the_slurm_probe(request, monkeypatch, _no_slurm_controller_probe):
    """Every snakemake process imports the SLURM executor plugin, which at import runs
    ``scontrol show config``: where SLURM's client is installed but no controller answers (this
    machine before tests/cluster/start_slurm.sh), that call waits 9 s, in every snakemake run of
    every workflow test. The tests outside tests/cluster run snakemake locally and never use SLURM,
    so their ``scontrol`` fails at once (the plugin then reads no MinJobAge, as without SLURM)."""
    if request.node.get_closest_marker("cluster") is None:
        monkeypatch.setenv("PATH", _no_slurm_controller_probe + os.pathsep + os.environ.get("PATH", ""))


@pytest.fixture
def adult_data() -> Path:
    """The Adult CSV shipped in the repository's data/ (data/README.md); skip only when absent."""
    if not (REPO_DATA / "adult.csv").is_file():
        pytest.skip(f"{REPO_DATA / 'adult.csv'} is absent")
    return REPO_DATA


@pytest.fixture(scope="session")
def small_schema(tmp_path_factory):
    """The (3, 4, 2, 3) schema, read from its YAML file as a user's schema would be."""
    from querysmasher.schema import parse_schema

    p = tmp_path_factory.mktemp("schema") / "small.yaml"
    p.write_text(SMALL_SCHEMA_YAML)
    return parse_schema(str(p))


@pytest.fixture(scope="session")
def tiny_schema():
    from querysmasher.schema import parse_schema

    return parse_schema(TINY_SCHEMA)


@pytest.fixture(scope="session")
def tiny_records(tiny_schema):
    """300 records on the [4]^3 schema (seeded)."""
    import numpy as np
    import pandas as pd

    from querysmasher.data import validate_records

    rng = np.random.default_rng(11)
    return validate_records(pd.DataFrame(rng.integers(0, 4, (300, 3)), columns=tiny_schema.names), tiny_schema)


@pytest.fixture
def cli(capsys):
    """Run ``querysmasher ARGS`` in this process (``querysmasher.cli.main``); returns a
    CompletedProcess with the exit code and what was written to stdout and stderr."""
    from querysmasher.cli import main

    def run(*args):
        capsys.readouterr()  # start clean
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse's own errors
            code = exc.code
        out = capsys.readouterr()
        return subprocess.CompletedProcess(["querysmasher", *map(str, args)], code, out.out, out.err)

    return run
