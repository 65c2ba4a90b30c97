"""Start-up cost: importing the command line or the package root pulls in no heavy dependency
(every Snakemake job and every CLI call is a fresh process). Checked on sys.modules, not timed."""

import subprocess
import sys

import pytest

HEAVY = ("scipy", "scipy.optimize", "cvxpy", "h5py", "pandas", "tqdm")


@pytest.mark.parametrize("module", ["querysmasher", "querysmasher.cli", "querysmasher.logs"])
def test_import_pulls_no_heavy_dependency(module):
    code = f"import sys, {module}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == []


def test_root_attributes_load_on_first_use():
    code = (
        "import sys, querysmasher as qs\n"
        "assert 'scipy' not in sys.modules\n"
        "assert callable(qs.make_plan) and qs.Budget.from_rho(0.5).beta == 1.0\n"
        "assert 'querysmasher.api' in sys.modules\n"
        "try:\n    qs.no_such_name\nexcept AttributeError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "no_such_name" in out.stdout


def test_pipeline_jobs_pay_no_pandas_or_scipy_import_they_do_not_use():
    """Every allocate job reports its budget in (epsilon, delta) and every measure job imports the
    record reader: neither may pull in scipy (log Phi is hand-written) or pandas (read lazily, only
    for a CSV or Parquet file), half a second each of a job's start."""
    code = (
        "import sys\n"
        "from querysmasher.accounting import Budget\n"
        "import querysmasher.data, querysmasher.pipeline.steps\n"
        "d = Budget.from_rho(0.5).to_dict()\n"
        "assert d['epsilon'] > 0, d\n"
        "print(' '.join(m for m in ('scipy', 'pandas') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == []
