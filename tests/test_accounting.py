import math

import numpy as np
import pytest
from scipy.stats import norm

from querysmasher.accounting import Budget, beta_for, delta_for, epsilon_for, log_ndtr
from querysmasher.allocation import allocate
from querysmasher.errors import InputError


def _delta_direct(beta, eps):
    s = math.sqrt(beta)
    return norm.cdf(s / 2 - eps / s) - math.exp(eps) * norm.cdf(-s / 2 - eps / s)


@pytest.mark.parametrize("beta", [0.01, 0.5, 1.0, 4.0, 25.0])
@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
def test_delta_matches_the_papers_formula(beta, eps):
    assert delta_for(beta, eps) == pytest.approx(_delta_direct(beta, eps), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize(
    "lo, hi", [(-1e6, -1e3), (-1e3, -40.0), (-40.0, -29.0), (-29.0, -5.0), (-5.0, 0.0), (0.0, 6.0), (6.0, 38.0)]
)
def test_log_ndtr_is_scipys(lo, hi):
    """The hand-written log Phi (the accounting's only use of scipy was its import) against
    scipy.special.log_ndtr, across the erfc range, the asymptotic series and the switch at -30."""
    import numpy as np
    from scipy.special import log_ndtr as reference

    xs = np.linspace(lo, hi, 4001)
    ours = np.array([log_ndtr(float(x)) for x in xs])
    np.testing.assert_allclose(ours, reference(xs), rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("eps, delta", [(1.0, 1e-6), (0.5, 1e-9), (4.0, 1e-5), (10.0, 1e-10)])
def test_beta_for_is_the_largest_safe_beta(eps, delta):
    b = beta_for(eps, delta)
    assert delta_for(b, eps) <= delta
    assert delta_for(b * (1 + 1e-6), eps) > delta
    assert epsilon_for(b, delta) == pytest.approx(eps, rel=1e-6)


def test_reported_epsilon_never_claims_a_smaller_delta_than_holds():
    """epsilon_for is what every summary reports: at that epsilon, delta must not exceed the stated
    one (a root-finder's answer just below the root would; 40 % of random pairs did before)."""
    import numpy as np

    rng = np.random.default_rng(7)
    for beta, delta in zip(10 ** rng.uniform(-3, 1.5, 500), 10 ** rng.uniform(-12, -3, 500)):
        eps = epsilon_for(float(beta), float(delta))
        assert delta_for(float(beta), eps) <= delta
        assert eps == 0.0 or delta_for(float(beta), eps * (1 - 1e-6)) > delta  # and it is still tight


def test_budget_conversions():
    b = Budget.from_mu(3.0)
    assert (b.beta, b.rho, b.mu) == (9.0, 4.5, 3.0)
    assert Budget.from_rho(0.25).beta == 0.5
    ed = Budget.from_epsilon_delta(2.0, 1e-7)
    assert ed.epsilon == pytest.approx(2.0, rel=1e-6) and ed.delta == 1e-7
    assert set(ed.to_dict()) >= {"beta", "rho", "mu", "epsilon", "delta"}


@pytest.mark.parametrize(
    "make",
    [
        lambda: Budget.from_beta(0),
        lambda: Budget.from_beta(-1),
        lambda: Budget.from_rho(float("nan")),
        lambda: Budget.from_epsilon_delta(1, 0),
        lambda: Budget.from_epsilon_delta(1, 1),
        lambda: Budget.from_mu(-2),
    ],
)
def test_bad_budgets_are_refused(make):
    with pytest.raises(InputError):
        make()


def test_allocation_is_optimal_and_spends_at_most_beta():
    losses = [1.0, 4.0, 0.0, 9.0]
    a = allocate(losses, beta=2.0)
    assert a.total_variance == pytest.approx(36 / 2)
    assert a.privacy_cost <= 2.0
    assert math.isinf(a.sigma2[2])
    # any other split of the budget is worse
    import numpy as np

    rng = np.random.default_rng(0)
    for _ in range(20):
        inv = rng.random(3)
        inv = inv / inv.sum() * 2.0
        assert float(np.dot(1 / inv, [1.0, 4.0, 9.0])) >= a.total_variance - 1e-9


def test_allocation_uses_the_actual_privacy_costs():
    import numpy as np

    losses, costs = np.array([1.0, 4.0, 9.0]), np.array([1.0, 0.5, 0.9])
    a = allocate(losses, beta=1.5, costs=costs)
    # Spent: beta (1 - BUDGET_MARGIN), the margin that keeps rounding from ever reaching beta.
    from querysmasher.allocation import BUDGET_MARGIN

    assert 1.5 * (1 - 2 * BUDGET_MARGIN) <= a.privacy_cost <= 1.5 * (1 - BUDGET_MARGIN / 2)
    assert a.total_variance == pytest.approx(np.sqrt(losses * costs).sum() ** 2 / 1.5, rel=3 * BUDGET_MARGIN)
    assert a.total_variance < allocate(losses, beta=1.5).total_variance  # slack in a cost is used, not wasted
    with pytest.raises(ValueError):
        allocate(losses, 1.0, costs=[1.0, 0.0, 1.0])


def test_delta_for_against_60_digit_arithmetic():
    """delta(beta, eps) within 1e-9 relative of the exact value (mpmath, 60 digits) from beta 1e-40 to
    1e5, in the tails and where the definition's two terms cancel (tiny beta): the accounting's
    DELTA_RTOL margin covers it, so no budget reports a delta it does not have."""
    mpmath = pytest.importorskip("mpmath")
    from querysmasher.accounting import DELTA_RTOL, delta_for

    mpmath.mp.dps = 60
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(3000):
        beta = 10 ** rng.uniform(-40, 5)
        s = beta**0.5
        eps = [rng.uniform(0, 38) * s, 10 ** rng.uniform(-300, 2), rng.uniform(0, 1) * beta][rng.integers(3)]
        sm, em = mpmath.sqrt(mpmath.mpf(beta)), mpmath.mpf(eps)
        exact = mpmath.ncdf(sm / 2 - em / sm) - mpmath.exp(em) * mpmath.ncdf(-sm / 2 - em / sm)
        if exact < 1e-280:
            continue
        worst = max(worst, float(abs((mpmath.mpf(delta_for(beta, eps)) - exact) / exact)))
    assert worst < DELTA_RTOL / 10
