"""measure re-checks the privacy cost of the plan it is given, before reading any record."""

import h5py
import numpy as np
import pandas as pd
import pytest

from querysmasher.accounting import Budget
from querysmasher.cli import main
from querysmasher.planfile import save_plan
from querysmasher.planning import make_plan


@pytest.fixture()
def setup(tmp_path):
    data = tmp_path / "d.csv"
    pd.DataFrame(np.random.default_rng(0).integers(0, 4, (50, 3)), columns=["a0", "a1", "a2"]).to_csv(data, index=False)
    return tmp_path, data


def _plan(tmp_path, method="qs", neighbours="add-remove", workload="prefix:1,2+affine:2"):
    path = tmp_path / f"plan-{method}-{neighbours}.h5"
    save_plan(make_plan("synthetic:n=4,d=3", workload, method, Budget.from_beta(1.0).with_neighbours(neighbours)), path)
    return path


def _measure(capsys, plan, data, out, *extra):
    code = main(["measure", "--plan", str(plan), "--data", str(data), "--out", str(out), *extra])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("method", ["rp", "wff", "qs", "rpplus"])
@pytest.mark.parametrize("neighbours", ["add-remove", "replace"])
def test_a_written_plan_measures_and_one_with_sigma_lowered_by_one_percent_is_refused(
    capsys, setup, method, neighbours
):
    tmp_path, data = setup
    plan = _plan(tmp_path, method, neighbours)
    ok = tmp_path / "ok.h5"
    assert _measure(capsys, plan, data, ok, "--seed", "1")[0] == 0 and ok.is_file()
    with h5py.File(plan, "r+") as f:
        s2 = f["views/sigma2"][()]
        s2[np.isfinite(s2)] *= 0.99  # 1 % less noise variance: 1 % more privacy cost
        f["views/sigma2"][...] = s2
    out = tmp_path / "m.h5"
    code, err = _measure(capsys, plan, data, out)
    assert code == 2 and len(err) == 1 and "privacy cost" in err[0] and "exceeds its budget" in err[0], err
    assert not out.exists()


def test_one_view_edited_is_enough(capsys, setup):
    tmp_path, data = setup
    plan = _plan(tmp_path, "rp")
    with h5py.File(plan, "r+") as f:
        s2 = f["views/sigma2"][()]
        i = int(np.flatnonzero(np.isfinite(s2))[-1])
        s2[i] *= 0.99
        f["views/sigma2"][...] = s2
    out = tmp_path / "m.h5"
    code, err = _measure(capsys, plan, data, out)
    assert code == 2 and len(err) == 1 and "exceeds its budget" in err[0] and not out.exists()


def test_a_plan_whose_budget_was_raised_to_fit_still_passes_only_at_the_new_budget(capsys, setup):
    """Editing beta is not a privacy bug (the file then states the larger budget, and the release
    records it): the check compares the mechanism with the budget the plan states."""
    tmp_path, data = setup
    plan = _plan(tmp_path, "rp")
    with h5py.File(plan, "r+") as f:
        f["views/sigma2"][...] = f["views/sigma2"][()] / 2
    assert _measure(capsys, plan, data, tmp_path / "m.h5")[0] == 2


@pytest.mark.parametrize(
    "edit, needle",
    [("negative eigenvalue", "exceeds its budget"), ("nan", "NaN"), ("wrong shape", "must have shape (4, 4)")],
)
def test_an_edited_mechanism_is_charged_for_what_is_applied_or_refused(capsys, setup, edit, needle):
    tmp_path, data = setup
    plan = _plan(tmp_path, "qs", workload="marginal:2")
    with h5py.File(plan, "r+") as f:
        g = next(g for g in f["solutions"].values() if g.attrs["kind"] == "kron" and len(g["sizes"][()]) == 2)
        m = g["m0"][()]
        del g["m0"]
        if edit == "negative eigenvalue":  # same diagonal, but not PSD: its positive part has a larger diagonal
            m = m + 5 * (np.ones_like(m) - np.eye(len(m)))
        elif edit == "nan":
            m[0, 0] = np.nan
        else:
            m = m[:-1, :-1]
        g.create_dataset("m0", data=m)
    out = tmp_path / "m.h5"
    code, err = _measure(capsys, plan, data, out)
    assert code == 2 and len(err) == 1 and needle in err[0] and not out.exists(), err


def _pairs(x):
    d = np.diag(x)
    return float((d[:, None] + d[None, :] - 2 * x).max())


def test_replace_cost_of_every_kind_is_exact_on_small_views_and_an_upper_bound_on_large_ones():
    from querysmasher.mechanisms import EXACT_PAIR_CELLS, ViewMechanism

    rng = np.random.default_rng(3)

    def psd(n):
        a = rng.standard_normal((n, n))
        return a @ a.T / n

    kron = ViewMechanism("kron", (3, 4), (psd(3), psd(4)))
    dense = ViewMechanism("dense", (5,), (psd(5),))
    w = rng.random((4, 6))
    w = (w + np.roll(np.flip(w, (0, 1)), 1, (0, 1))) / 2  # w(f) = w(-f): a real circulant X
    fourier = ViewMechanism("fourier", (4, 6), (w,))
    for m in (kron, dense, fourier):
        assert m.replace_cost() == pytest.approx(_pairs(m.dense_x()), rel=1e-12)
        assert m.replace_cost() <= 4 * m.max_diag() * (1 + 1e-12)
    big = ViewMechanism("kron", (70, 70), (psd(70), psd(70)))
    assert big.cells > EXACT_PAIR_CELLS
    assert big.replace_cost() >= _pairs(big.dense_x()) * (1 - 1e-12)


def test_plan_records_the_relation_and_hdmm_refuses_replace(capsys, tmp_path):
    from querysmasher.planfile import load_plan

    out = tmp_path / "p.h5"
    assert (
        main(
            [
                "plan",
                "--schema",
                "synthetic:n=4,d=3",
                "--workload",
                "prefix:1",
                "--method",
                "rp",
                "--neighbours",
                "replace",
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    import json

    assert json.loads(capsys.readouterr().out)["neighbours"] == "replace"
    assert load_plan(out).budget.neighbours == "replace"
    bad = tmp_path / "h.h5"
    assert (
        main(
            [
                "plan",
                "--schema",
                "synthetic:n=4,d=3",
                "--workload",
                "prefix:1",
                "--method",
                "hdmm",
                "--neighbours",
                "replace",
                "--out",
                str(bad),
            ]
        )
        == 2
    )
    assert "--neighbours" in capsys.readouterr().err and not bad.exists()


def test_hdmm_refuses_replace_in_the_library_not_only_on_the_command_line():
    """HDMM's strategies are normalised for add-remove; under replace the same strategy costs up to
    4x, so planning through the Python API must refuse too (it reported beta 1 for a true 2.05)."""
    import querysmasher as qs
    from querysmasher.errors import InputError

    with pytest.raises(InputError, match="neighbours"):
        qs.make_plan("synthetic:n=3,d=2", "marginal:1,2", "hdmm", Budget.from_beta(1.0).with_neighbours("replace"))


def test_dropping_invalid_rows_never_logs_how_many(capsys, setup, caplog):
    """The number of dropped rows is derived from the records: the warning says rows were dropped,
    and neither the command's output nor its log carries the count."""
    import logging

    tmp_path, data = setup
    bad = tmp_path / "bad.csv"
    frame = pd.read_csv(data)
    frame.loc[[3, 11, 17, 29, 31, 37, 41], "a1"] = 9  # 7 rows outside the domain (size 4)
    frame.to_csv(bad, index=False)
    plan = _plan(tmp_path, "rp")
    with caplog.at_level(logging.INFO, logger="querysmasher"):
        code, err = _measure(capsys, plan, bad, tmp_path / "m.h5", "--on-invalid", "drop", "--seed", "1")
    assert code == 0
    said = "\n".join(err) + "\n".join(r.getMessage() for r in caplog.records)
    assert "invalid rows were dropped" in said
    import re

    assert not re.search(r"(?<![\d.e-])7(?![\d.])", said)  # the count, as a number of its own


@pytest.mark.parametrize("method", ["rp", "wff", "qs"])
def test_max_objective_plans_under_replace_are_measurable(method):
    """Under replace the total view costs 0; the max objective must charge it the same floor as the
    sum allocation, or it gets sigma^2 = 0 and the re-check refuses the plan it just made."""
    from querysmasher.measure import check_budget

    plan = make_plan(
        "synthetic:n=4,d=2",
        "prefix:1+affine:2",
        method,
        Budget.from_beta(1.0).with_neighbours("replace"),
        objective="max",
    )
    check_budget(plan)
    assert np.all(np.isfinite(plan.allocation.sigma2)) and np.all(plan.allocation.sigma2 > 0)
