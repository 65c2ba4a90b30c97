"""The thread budget (querysmasher.threads): jobs use the threads their rule declares, the CLI and API
one thread unless told, and a larger budget solves views in parallel with the same solutions."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from querysmasher import threads
from querysmasher.cli import main
from querysmasher.decompose import decompose
from querysmasher.errors import InputError
from querysmasher.methods import get_method
from querysmasher.planners.residual import solve_distinct
from querysmasher.schema import parse_schema
from querysmasher.workload import parse_workload

ROOT = Path(__file__).resolve().parents[1]


def _blas_threads() -> int:
    return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


def test_budget_is_one_unless_given_and_restored_after():
    assert threads.budget() == 1
    with threads.limited(3):
        assert threads.budget() == 3
        with threads.at_most(1):
            assert _blas_threads() == 1
    assert threads.budget() == 1
    with threads.limited(1):
        assert _blas_threads() == 1


def test_a_blas_loaded_after_the_first_cap_is_capped_too():
    """The pools are found once and found again after an import: cvxpy's solvers bring their own
    OpenBLAS, loaded after numpy's was first capped, and at_most(1) caps it as well."""
    probe = (
        "import numpy; from threadpoolctl import threadpool_info; from querysmasher import threads\n"
        "with threads.limited(2), threads.at_most(1): pass\n"
        "before = {i['filepath'] for i in threadpool_info()}\n"
        "import cvxpy, clarabel, scs\n"
        "new = [i for i in threadpool_info() if i['filepath'] not in before and i['user_api'] == 'blas']\n"
        "with threads.limited(2), threads.at_most(1):\n"
        "    inside = [i['num_threads'] for i in threadpool_info() if i['filepath'] not in before]\n"
        "print(len(new), sorted(set(inside)))"
    )
    env = {k: v for k, v in os.environ.items() if k not in threads.ENV_VARS}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    found, inside = out.stdout.split(maxsplit=1)
    if int(found) == 0:
        pytest.skip("cvxpy's solvers bring no BLAS of their own here: nothing new to cap")
    assert inside.strip() == "[1]"


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, None])
def test_a_bad_thread_count_names_the_field(bad):
    with pytest.raises(InputError, match="threads"):
        threads.check_threads(bad)


def test_a_capped_process_loads_blas_with_exactly_its_threads():
    """What a workflow script does first: numpy, imported after cap_process(1), runs one BLAS
    thread where the same import without it runs one per core."""
    probe = (
        "from threadpoolctl import threadpool_info; "
        "print(sorted({i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'}))"
    )
    env = {k: v for k, v in os.environ.items() if k not in threads.ENV_VARS}

    def blas(prefix: str) -> str:
        return subprocess.run(
            [sys.executable, "-c", prefix + "import numpy, scipy.linalg; " + probe],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout.strip()

    if (os.cpu_count() or 1) > 1:
        assert blas("") != "[1]"  # else this test could not tell
    assert blas("from querysmasher.threads import cap_process; cap_process(1); ") == "[1]"


def test_every_rule_declares_threads_and_every_script_caps_them_first():
    """Each rule says how many threads its job uses, and each script applies that figure before any
    library module (and so numpy) is imported."""
    missing = []
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        text = smk.read_text()
        blocks = re.split(r"^\s*(?=(?:rule|checkpoint) \w+:)", text, flags=re.M)
        for block in blocks:
            m = re.match(r"(?:rule|checkpoint) (\w+):", block)
            if m and "script:" in block and not re.search(r"^\s+threads:", block, re.M):
                missing.append(f"{smk.name}:{m.group(1)}")
    assert not missing, f"rules without threads: {missing}"
    late = []
    for script in sorted((ROOT / "scripts").glob("*.py")):
        lines = [
            ln for ln in script.read_text().splitlines() if re.match(r"(from|import) ", ln) or "cap_process(" in ln
        ]
        first_cap = next((i for i, ln in enumerate(lines) if ln.startswith("cap_process(")), None)
        first_other = next(
            (
                i
                for i, ln in enumerate(lines)
                if (ln.startswith(("from", "import")) and "querysmasher.threads" not in ln and "__future__" not in ln)
            ),
            len(lines),
        )
        if first_cap is None or first_cap > first_other:
            late.append(script.name)
    assert not late, f"scripts that import before capping threads: {late}"


def test_cli_refuses_a_bad_thread_count(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--schema", "cps", "--workload", "marginal:1", "--threads", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--threads" in err and "'0'" in err and err.count("\n") == 1


class _PidSolver:
    """A solver that says which process solved each view (in the solution's note)."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name

    def solve(self, gram, store):
        time.sleep(0.2)  # long enough that a second worker takes the next view
        return dataclasses.replace(self.inner.solve(gram, store), note=f"pid {os.getpid()}")


def test_a_larger_budget_solves_views_in_parallel_with_the_same_solutions():
    w = parse_workload("prefix:1,2", parse_schema("synthetic:n=12,d=4"))
    decomp = decompose(w)
    distinct = decomp.distinct()
    solver = _PidSolver(get_method("qs").build())
    serial = solve_distinct(distinct, decomp.store, solver)
    with threads.limited(2):
        parallel = solve_distinct(distinct, decomp.store, solver)
    assert list(parallel) == list(serial)
    pids_serial = {s.note for s in serial.values()}
    pids_parallel = {s.note for s in parallel.values()}
    assert pids_serial == {f"pid {os.getpid()}"}
    assert len(pids_parallel) == 2 and f"pid {os.getpid()}" not in pids_parallel
    for k in serial:
        assert parallel[k].loss == serial[k].loss
        assert parallel[k].lower_bound == serial[k].lower_bound


def test_api_plan_with_threads_equals_the_one_thread_plan():
    import querysmasher as qs

    one = qs.make_plan("cps", "marginal:2", method="qs", beta=1.0)
    two = qs.make_plan("cps", "marginal:2", method="qs", beta=1.0, threads=2)
    assert np.array_equal(one.losses, two.losses) and one.rmse == two.rmse
    assert threads.budget() == 1


@pytest.mark.parametrize("method", ["qs", "qsplus"])
def test_evaluate_split_over_threads_equals_one_thread(tmp_path, method):
    """evaluate with its views split over two forked workers reports the same metrics as on one
    thread (sums in another order), for plans of two kinds."""
    from querysmasher.pipeline import steps
    from querysmasher.pipeline.evaluate import evaluate
    from querysmasher.planfiles import save_any_plan

    source = {"kind": "synthetic", "records": 400, "seed": 3}
    plan = make_plan_for(method)
    p, m, a = tmp_path / "p.h5", tmp_path / "m.h5", tmp_path / "a.h5"
    save_any_plan(plan, p)
    steps.measure_to_file(p, m, source=source, seed=5)
    steps.reconstruct_to_file(p, m, a)
    one = evaluate(p, tmp_path / "one.json", answers_path=a, source=source)
    with threads.limited(2):
        two = evaluate(p, tmp_path / "two.json", answers_path=a, source=source)
    assert one["empirical_rmse"] > 0 and two["empirical_rmse"] == pytest.approx(one["empirical_rmse"], rel=1e-12)
    assert two["mean_squared_z"] == pytest.approx(one["mean_squared_z"], rel=1e-12)


def make_plan_for(method: str):
    from querysmasher.planning import make_plan

    return make_plan("synthetic:n=4,d=3", "prefix:1+abs:2", method, beta=1.0)


def test_only_a_large_measured_evaluate_asks_for_threads():
    from querysmasher.pipeline.config import Experiment
    from querysmasher.pipeline.resources import MAX_EVALUATE_THREADS, stage_resources, stage_threads

    small = Experiment("s", "s", "synthetic:n=4,d=3", False, "prefix:1+abs:2", "qs", 1.0, 0, {})
    large = Experiment("l", "s", "synthetic:n=40,d=40", False, "range:1+affine:2+prefix:3", "qs", 1.0, 0, {})
    assert stage_threads("evaluate", small) == 1
    assert 1 < stage_threads("evaluate", large) <= MAX_EVALUATE_THREADS
    assert stage_threads("evaluate", large, measured=False) == 1 and stage_threads("reconstruct", large) == 1
    # each worker holds one view at a time: the request grows with the threads
    assert stage_resources("evaluate", large)["mem_mb"] > stage_resources("reconstruct", large)["mem_mb"]
