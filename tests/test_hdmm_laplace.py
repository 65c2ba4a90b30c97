"""HDMM with Laplace noise (pure ε-DP): brute-force L1 sensitivity of the applied operator, Monte Carlo
error, OPT_0 against an independent optimiser, plan files and the command line."""

import json

import numpy as np
import pytest
from bruteforce import definition_1d, marginal_map, view_queries
from scipy.optimize import minimize

from querysmasher.errors import InputError
from querysmasher.hdmm import LaplaceStrategy, PureBudget, plan_hdmm
from querysmasher.hdmm.files import load_hdmm_plan, save_hdmm_plan
from querysmasher.hdmm.optimize_laplace import opt_0, p_identity
from querysmasher.measure import measure
from querysmasher.testing import records_of_counts, workload_answers

EPS = 0.7
CASES = [
    ("explicit", "hybrid:1,2"),
    ("kron", "prefix:1,2"),
    ("plus-term", "range:1+prefix:2"),
    ("plus-view", "circular:1@2+marginal:2"),
    ("plus-view", "hybrid:1,2"),
    ("marginal", "marginal:1,2"),
    ("marginal", "marginal:2@3+marginal:1"),
]


@pytest.fixture(scope="module")
def plans(small_schema, tmp_path_factory):
    """Each case planned, written and loaded back: the tests use the loaded plan, as a release would."""
    out = {}
    for template, spec in CASES:
        plan = plan_hdmm(small_schema, spec, PureBudget(EPS), templates=(template,), restarts=1, seed=3)
        path = tmp_path_factory.mktemp("p") / "plan.h5"
        save_hdmm_plan(plan, path)
        out[template, spec] = load_hdmm_plan(path)
        assert out[template, spec].total_variance == plan.total_variance
    return out


class _Recorder:
    """A noise source that adds nothing and records the Laplace scale each answer vector was given."""

    def __init__(self):
        self.scales = []

    def laplace(self, loc, scale, shape):
        self.scales.append(scale)
        return np.zeros(shape)


@pytest.mark.parametrize("template, spec", CASES)
def test_l1_sensitivity_of_the_applied_operator_by_brute_force(small_schema, plans, template, spec):
    """For every neighbouring pair x, x + e_c (one record more in cell c), the measurement's change,
    each block divided by the Laplace scale it is released with, has L1 norm at most ε, and the
    budget is spent: the largest equals ε."""
    plan = plans[template, spec]
    assert plan.template == template and plan.noise == "laplace"
    cells = small_schema.domain_cells()
    worst = 0.0
    for c in range(cells):
        e = np.zeros(cells)
        e[c] = 1.0
        rec = _Recorder()
        meas = measure(plan, records_of_counts(small_schema, e), rec)
        blocks = list(meas.y)  # one released vector (every block of its strategy) per group
        assert len(rec.scales) == len(blocks) == len(plan.groups)
        worst = max(worst, sum(float(np.abs(y).sum()) / s for y, s in zip(blocks, rec.scales)))
    assert worst <= EPS * (1 + 1e-9)
    assert worst >= EPS * (1 - 1e-9)


@pytest.mark.parametrize("template, spec", CASES)
def test_expected_error_equals_the_explicit_one(small_schema, plans, template, spec):
    """2 b_g^2 Σ_v w_v ||Q_v A_g^+||_F^2 over groups, from the explicit strategy rows, equals the
    implicitly computed total variance; every view is answerable from its group's strategy."""
    plan = plans[template, spec]
    total = 0.0
    for g, b in zip(plan.groups, plan.allocation.scales):
        a = g.strategy.dense()
        assert np.abs(a).sum(axis=0).max() == pytest.approx(g.strategy.sensitivity(), rel=1e-12)
        a_pinv = np.linalg.pinv(a)
        for j in g.views:
            v = plan.workload.views[j]
            q = view_queries(plan.workload, v) @ marginal_map(small_schema.sizes, v.attrs)
            assert np.allclose(q @ a_pinv @ a, q, atol=1e-8)
            total += 2 * b**2 * v.weight * float(np.sum((q @ a_pinv) ** 2))
    assert total == pytest.approx(plan.total_variance, rel=1e-9)


@pytest.mark.parametrize("template, spec", CASES)
def test_expected_error_against_monte_carlo(small_schema, plans, template, spec):
    plan = plans[template, spec]
    rng = np.random.default_rng(11)
    x = rng.integers(0, 20, small_schema.domain_cells()).astype(float)
    truth = [
        view_queries(plan.workload, v) @ (marginal_map(small_schema.sizes, v.attrs) @ x) for v in plan.workload.views
    ]
    records = records_of_counts(small_schema, x)
    exact = workload_answers(plan, measure(plan, records, _Recorder()))
    assert all(np.allclose(a, t) for a, t in zip(exact, truth))  # unbiased: exact without noise
    weights = [v.weight for v in plan.workload.views]
    draws = np.array(
        [
            sum(
                w * float(((a - t) ** 2).sum())
                for w, a, t in zip(weights, workload_answers(plan, measure(plan, records, rng)), truth)
            )
            for _ in range(400)
        ]
    )
    assert abs(draws.mean() - plan.total_variance) <= 4 * draws.std(ddof=1) / np.sqrt(len(draws))


def _reference_objective(flat, g, p):
    """||A||_1^2 tr(G (A^T A)^+) of A = [I; |Θ|] with each column scaled to L1 norm 1, from the explicit
    matrix (no code shared with the library)."""
    n = g.shape[0]
    a = np.vstack([np.eye(n), np.abs(flat.reshape(p, n))])
    a = a / np.abs(a).sum(axis=0)
    return float(np.abs(a).sum(axis=0).max() ** 2 * np.trace(g @ np.linalg.pinv(a.T @ a)))


@pytest.mark.parametrize(
    "family, n, p",
    [
        ("prefix", 12, 1),
        ("prefix", 12, 2),
        ("range", 16, 1),
        pytest.param("prefix", 20, 2, marks=pytest.mark.slow),
        pytest.param("range", 24, 2, marks=pytest.mark.slow),
    ],
)
def test_opt_0_matches_an_independent_optimiser_on_1d_workloads(family, n, p):
    """OPT_0 (L-BFGS-B with analytic gradients, bounds Θ >= 0) against Powell's derivative-free
    method on |Θ|, six random starts, with the objective computed from the explicit strategy: neither
    finds a better p-Identity strategy by more than 0.1 %."""
    q = definition_1d(family, n)
    g = q.T @ q
    ours = _reference_objective(opt_0(g, rng=np.random.default_rng(0), p=p), g, p)
    rng = np.random.default_rng(1)
    reference = min(
        minimize(_reference_objective, rng.uniform(0, 1, p * n), args=(g, p), method="Powell").fun for _ in range(6)
    )
    reference = min(reference, float(np.trace(g)))  # Θ = 0, the identity, is in the space
    assert ours <= reference * (1 + 1e-3)
    assert reference <= ours * (1 + 1e-3)


def test_p_identity_columns_have_unit_l1_norm():
    a = p_identity(np.random.default_rng(0).uniform(0, 1, (3, 7)))
    assert a.shape == (10, 7) and np.allclose(np.abs(a).sum(axis=0), 1.0)


def test_strategies_are_validated():
    with pytest.raises(ValueError, match="L1 norm 1"):
        LaplaceStrategy.single((np.eye(3) * 2,))
    with pytest.raises(ValueError, match="weighted marginals"):
        LaplaceStrategy((3,), ((p_identity(np.ones((1, 3))), np.eye(3)),), np.array([[0], [1]]), np.array([0.5, 0.5]))


@pytest.mark.parametrize(
    "edit, needle",
    [
        (
            lambda f: f["groups/0/strategy/weights"].__setitem__(..., 2 * f["groups/0/strategy/weights"][()]),
            "L1 sensitivity 2.0",
        ),
        (
            lambda f: f["groups/0/strategy/mats/0/0"].__setitem__(..., 1.5 * f["groups/0/strategy/mats/0/0"][()]),
            "L1 norm 1",
        ),
        (lambda f: f["groups/0"].attrs.__setitem__("error", 0.5 * f["groups/0"].attrs["error"]), "expected error"),
        (lambda f: f.attrs.__setitem__("noise", "gaussian"), "must hold beta, source, delta"),
    ],
)
def test_a_tampered_laplace_plan_file_is_refused(small_schema, tmp_path, edit, needle):
    import h5py

    path = tmp_path / "plan.h5"
    save_hdmm_plan(plan_hdmm(small_schema, "prefix:1,2", PureBudget(1.0), templates=("kron",), restarts=1), path)
    with h5py.File(path, "r+") as f:
        edit(f)
    with pytest.raises(InputError, match="hdmm plan file") as e:
        load_hdmm_plan(path)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_summary_reports_pure_epsilon_dp(small_schema):
    s = plan_hdmm(small_schema, "prefix:1,2", PureBudget(0.5), templates=("kron",), restarts=1).summary()
    assert (s["noise"], s["privacy"], s["epsilon"], s["delta"]) == ("laplace", "pure epsilon-DP", 0.5, 0.0)
    assert "beta" not in s and "rho" not in s


def test_error_scales_as_one_over_epsilon_squared(small_schema):
    a = plan_hdmm(small_schema, "prefix:1,2", PureBudget(1.0), templates=("kron",), restarts=1, seed=1)
    b = plan_hdmm(small_schema, "prefix:1,2", PureBudget(0.25), templates=("kron",), restarts=1, seed=1)
    assert b.total_variance == pytest.approx(16 * a.total_variance, rel=1e-12)


def test_laplace_through_the_commands(tmp_path, cli):
    import pandas as pd

    data = tmp_path / "d.csv"
    pd.DataFrame(np.random.default_rng(0).integers(0, 4, (200, 3)), columns=["a0", "a1", "a2"]).to_csv(
        data, index=False
    )
    plan, meas, ans = tmp_path / "p.h5", tmp_path / "m.h5", tmp_path / "a.h5"
    r = cli(
        "plan",
        "--schema",
        "synthetic:n=4,d=3",
        "--workload",
        "marginal:1",
        "--method",
        "hdmm",
        "--noise",
        "laplace",
        "--epsilon",
        "0.5",
        "--out",
        str(plan),
    )
    assert r.returncode == 0, r.stderr
    assert "privacy: pure epsilon-DP, epsilon 0.5 (Laplace noise)" in r.stdout
    r = cli("measure", "--plan", str(plan), "--data", str(data), "--out", str(meas))  # OpenDP's sampler
    assert r.returncode == 0, r.stderr
    r = cli("reconstruct", "--plan", str(plan), "--measurements", str(meas), "--out", str(ans))
    assert r.returncode == 0 and json.loads(r.stdout)["queries"] == 12


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--method", "qs"], "method qs is a Gaussian mechanism"),
        (["--method", "rp"], "method rp is a Gaussian mechanism"),
        (["--method", "rpplus"], "method rpplus is a Gaussian mechanism"),
        (["--method", "wff"], "method wff is a Gaussian mechanism"),
        (["--method", "hdmm", "--delta", "1e-6"], "takes only --epsilon"),
        (["--method", "hdmm", "--rho", "1"], "takes only --epsilon"),
    ],
)
def test_laplace_refusals_are_one_line_exit_2(tmp_path, cli, args, needle):
    out = tmp_path / "p.h5"
    r = cli(
        "plan",
        "--schema",
        "synthetic:n=4,d=3",
        "--workload",
        "prefix:1",
        "--noise",
        "laplace",
        "--epsilon",
        "1",
        *args,
        "--out",
        str(out),
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert not out.exists()
