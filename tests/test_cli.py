import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import querysmasher
from querysmasher.cli import main


def test_the_module_entry_point_runs_in_its_own_process(tmp_path):
    """``python -m querysmasher`` (what the ``querysmasher`` console script calls: cli:main) in a
    fresh process, with this checkout's package: a result on stdout and exit 0; bad input, one
    line on stderr and exit 2. Every other command-line test runs main() in-process."""
    env = {**os.environ, "PYTHONPATH": str(Path(querysmasher.__file__).resolve().parents[1])}
    cmd = [
        sys.executable,
        "-m",
        "querysmasher",
        "plan",
        "--schema",
        "synthetic:n=3,d=2",
        "--workload",
        "prefix:1",
        "--method",
        "rp",
        "--json",
    ]
    ok = subprocess.run([*cmd, "--out", str(tmp_path / "p.h5")], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["queries"] == 6 and (tmp_path / "p.h5").is_file()
    bad = subprocess.run([*cmd, "--beta", "0"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--beta 0.0" in bad.stderr
    assert (
        'querysmasher = "querysmasher.cli:main"' in (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    )


def test_plan_json_has_the_documented_fields(tmp_path, cli):
    out = tmp_path / "plan.h5"
    r = cli(
        "plan",
        "--schema",
        "synthetic:n=10,d=40",
        "--workload",
        "prefix:1,2",
        "--method",
        "wff",
        "--json",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    for field in (
        "rmse",
        "total_variance",
        "queries",
        "views",
        "residual_views",
        "distinct_solves",
        "beta",
        "rho",
        "mu",
        "epsilon",
        "delta",
        "seconds",
    ):
        assert field in s
    assert (s["queries"], s["views"], s["residual_views"], s["distinct_solves"]) == (78_400, 820, 821, 3)
    assert round(s["rmse"], 2) == 39.70
    assert out.is_file()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--schema", "nope"], "schema 'nope'"),
        (["--workload", "pre:1"], "unknown family 'pre'"),
        (["--workload", "prefix:6"], "K = 6"),
        (["--schema", "cps", "--workload", "prefix:1", "--method", "zz"], "method 'zz'"),
        (["--beta", "0"], "--beta 0.0"),
        (["--beta", "-1"], "--beta -1.0"),
        (["--epsilon", "1", "--delta", "1.5"], "delta 1.5"),
        (["--epsilon", "1"], "needs --delta"),
        (["--rho", "1", "--mu", "1"], "exactly one"),
        (["--option", "x=1"], "rp takes no options"),
        (["--option", "x"], "must be KEY=VALUE"),
        (["--method", "qs", "--option", "bogus=1"], "bogus is not an option of qs"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_file(tmp_path, cli, args, needle):
    base = {"--schema": "cps", "--workload": "prefix:1", "--method": "rp"}
    argv = list(args)
    for k, v in base.items():
        if k not in argv:
            argv += [k, v]
    out = tmp_path / "p.h5"
    r = cli("plan", *argv, "--out", str(out))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_budget_forms_agree(capsys):
    def beta_of(*extra):
        assert main(["plan", "--schema", "cps", "--workload", "marginal:1", "--method", "rp", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["beta"]

    assert beta_of("--rho", "0.5") == beta_of("--mu", "1") == beta_of("--beta", "1") == 1.0
    # (epsilon, delta) -> the largest beta whose Gaussian-mechanism delta at epsilon is delta:
    # delta(beta) = Phi(sqrt(beta)/2 - eps/sqrt(beta)) - e^eps Phi(-sqrt(beta)/2 - eps/sqrt(beta)), solved with scipy
    from scipy.optimize import brentq
    from scipy.stats import norm

    def excess(beta, eps=1.0, delta=1e-6):
        s = beta**0.5
        return norm.cdf(s / 2 - eps / s) - np.exp(eps) * norm.cdf(-s / 2 - eps / s) - delta

    want = brentq(excess, 1e-3, 1.0, xtol=1e-15, rtol=1e-13)
    got = beta_of("--epsilon", "1", "--delta", "1e-6")
    assert got == pytest.approx(want, rel=1e-6) and got <= want


def test_hdmm_through_the_commands(tmp_path, cli):
    import numpy as np
    import pandas as pd

    data = tmp_path / "d.csv"
    pd.DataFrame(np.random.default_rng(0).integers(0, 4, (200, 3)), columns=["a0", "a1", "a2"]).to_csv(
        data, index=False
    )
    plan, meas, ans = tmp_path / "p.h5", tmp_path / "m.h5", tmp_path / "a.h5"
    assert (
        cli(
            "plan", "--schema", "synthetic:n=4,d=3", "--workload", "prefix:1,2", "--method", "hdmm", "--out", str(plan)
        ).returncode
        == 0
    )
    assert cli("measure", "--plan", str(plan), "--data", str(data), "--out", str(meas)).returncode == 0
    r = cli("reconstruct", "--plan", str(plan), "--measurements", str(meas), "--out", str(ans))
    assert r.returncode == 0 and json.loads(r.stdout)["queries"] == 60
    big = tmp_path / "big.h5"
    assert (
        cli(
            "plan", "--schema", "synthetic:n=10,d=40", "--workload", "prefix:1,2", "--method", "hdmm", "--out", str(big)
        ).returncode
        == 0
    )
    r = cli("measure", "--plan", str(big), "--data", str(data), "--out", str(tmp_path / "m2.h5"))
    assert r.returncode == 2 and "max_domain_cells" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "m2.h5").exists()


def test_solver_option_flag_reaches_the_solver(capsys):
    def summary(*extra):
        assert (
            main(
                [
                    "plan",
                    "--schema",
                    "synthetic:n=5,d=3",
                    "--workload",
                    "range:1+affine:2",
                    "--method",
                    "qs",
                    "--json",
                    *extra,
                ]
            )
            == 0
        )
        return json.loads(capsys.readouterr().out)

    loose = summary("--option", "target_gap=0.05")
    assert loose["gap"] == pytest.approx(summary("--target-gap", "0.05")["gap"], rel=1e-9)
    assert loose["gap"] > summary()["gap"]  # a looser target stops earlier


def test_commands_round_trip_a_plan_with_lowrank_views(tmp_path):
    """affine:2 is solved in factored form (kind lowrank, r noisy values per view, not c): the
    measurements file holds r values for such a view and reconstruct must accept exactly that."""
    import h5py
    import numpy as np
    import pandas as pd

    from querysmasher.planfile import load_plan

    data = tmp_path / "d.csv"
    pd.DataFrame(np.random.default_rng(0).integers(0, 6, (200, 2)), columns=["a0", "a1"]).to_csv(data, index=False)
    plan, meas, ans = tmp_path / "p.h5", tmp_path / "m.h5", tmp_path / "a.h5"
    assert (
        main(
            [
                "plan",
                "--schema",
                "synthetic:n=6,d=2",
                "--workload",
                "affine:2",
                "--method",
                "qs",
                "--out",
                str(plan),
                "-q",
            ]
        )
        == 0
    )
    p = load_plan(plan)
    kinds = {p.solutions[k].mechanism.kind for k in p.keys}
    assert "lowrank" in kinds
    assert main(["measure", "--plan", str(plan), "--data", str(data), "--out", str(meas), "--seed", "1", "-q"]) == 0
    with h5py.File(meas) as f:
        cells = sum(int(np.prod([p.schema.sizes[a] for a in p.views[i]])) for i in f["index"][()])
        assert f["y"].shape[0] < cells  # the lowrank view sent fewer values than cells
    assert main(["reconstruct", "--plan", str(plan), "--measurements", str(meas), "--out", str(ans), "-q"]) == 0
    assert ans.is_file()
