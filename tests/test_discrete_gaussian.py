"""The exact discrete Gaussian sampler (querysmasher.discrete_gaussian): its distribution against
the discrete Gaussian's pmf (also with every comparison forced onto the exact path), its two limbs,
the correct rounding of its output, and its privacy cost against the plan's and OpenDP's map.

The draws come from the OS's entropy (unseeded, as in a release): each distribution test fails by
chance with probability about 1e-6."""

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from querysmasher import discrete_gaussian as dg
from querysmasher.noise import make_noise

P_FAIL = 1e-6


def _integers(draw) -> np.ndarray:
    z = draw.sign.astype(np.int64) * ((draw.hi << 52) + draw.lo)
    for i, v in draw.exact.items():
        z[i] = v
    return z


def _chi_square_pvalue(z: np.ndarray, tau: float) -> float:
    ks = np.arange(-int(10 * tau) - 3, int(10 * tau) + 4)
    p = np.exp(-(ks.astype(float) ** 2) / (2 * tau * tau))
    p /= p.sum()
    expected = p * z.size
    observed = np.array([(z == k).sum() for k in ks])
    assert observed.sum() == z.size  # nothing beyond 10 tau
    keep = expected >= 5
    # the tails pooled into one bin
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] < 5:
        obs, exp = obs[:-1], exp[:-1]
        exp = exp * obs.sum() / exp.sum()
    return float(stats.chisquare(obs, exp).pvalue)


@pytest.mark.parametrize("tau, e", [(0.6, 0), (2.5, 2), (2.5, 0), (7.3, 3), (7.3, 4)])
def test_draws_follow_the_discrete_gaussian_pmf(tau, e):
    z = _integers(dg.discrete_gaussian(tau, e, 60_000))
    assert _chi_square_pvalue(z, tau) > P_FAIL


def test_the_exact_comparisons_and_the_long_geometric_path_draw_the_same_distribution(monkeypatch):
    # a slack of 1/4 leaves most comparisons to the exact path (more random bits, Fractions); a
    # geometric limit of 1 sends every draw with V >= 1 to the exact magnitudes
    monkeypatch.setattr(dg, "SLACK", 0.25)
    monkeypatch.setattr(dg, "_V_LIMIT", 1)
    draw = dg.discrete_gaussian(2.5, 1, 20_000)
    assert len(draw.exact) > 1000
    assert _chi_square_pvalue(_integers(draw), 2.5) > P_FAIL
    # GridGaussian.add rounds the exact magnitudes too: on the unit grid its output is x + Z
    out = dg.GridGaussian(k=0, tau=2.5, e=1, n=20_000).add(np.zeros(20_000))
    assert np.array_equal(out, np.rint(out)) and _chi_square_pvalue(out.astype(np.int64), 2.5) > P_FAIL


@pytest.mark.parametrize("tau, e", [(3 * 2.0**70, 72), (5 * 2.0**50, 53), (2.0**93, 94)])
def test_two_limb_draws_are_gaussian_to_the_last_bit(tau, e):
    n = 40_000
    draw = dg.discrete_gaussian(tau, e, n)
    assert np.all((draw.hi >= 0) & (draw.hi < 2**52) & (draw.lo >= 0) & (draw.lo < 2**52))
    z = draw.sign * (np.ldexp(draw.hi.astype(float), 52) + draw.lo) / tau
    assert stats.kstest(z, "norm").pvalue > P_FAIL
    # the low limb is drawn: Z mod 8 is uniform at this scale
    counts = np.bincount(((draw.sign * draw.lo) % 8).astype(int), minlength=8)
    assert stats.chisquare(counts).pvalue > P_FAIL


def test_the_output_is_the_exact_sum_correctly_rounded():
    r = random.Random(5)
    a, b, c = [], [], []
    for _ in range(20_000):
        # sums at or next to a tie between two floats, of every magnitude the grid produces
        p, m = r.randrange(0, 150), r.randrange(2**52, 2**53)
        z = r.choice([-1, 1]) * ((2 * m + 1) * 2**p // 2 + r.randrange(-2, 3))
        y = r.randrange(0, 2 ** r.randrange(1, 104)) * r.choice([-1, 1])
        base = float(z - y)
        y = z - int(base)
        if abs(y) >= 2**104:
            continue
        s, mag = (1 if y >= 0 else -1), abs(y)
        a.append(base)
        b.append(s * float((mag >> 52) << 52))
        c.append(s * float(mag & (2**52 - 1)))
    out = dg.round_sum3(np.array(a), np.array(b), np.array(c))
    wrong = [i for i in range(len(a)) if out[i] != float(Fraction(a[i]) + Fraction(b[i]) + Fraction(c[i]))]
    assert len(a) > 10_000 and wrong == []


CASES = [(9.0, 1.0, 1000), (2.0, 3.0, 7), (1e4, 0.5, 10**6), (0.01, 1.0, 1), (1e-6, 4.0, 123), (7.7e5, 2.2, 2**20)]


@pytest.mark.parametrize("sigma2, sensitivity2, n", CASES)
def test_the_grid_costs_at_most_the_plans_rho_exactly_and_by_opendps_map(sigma2, sensitivity2, n):
    import opendp.prelude as dp

    g = dg.grid_gaussian(sigma2, sensitivity2, n)
    # by hand, in 80-digit decimals: (Delta + 2^k sqrt n)^2 / (tau 2^k)^2 <= Delta^2 / sigma2
    from decimal import Decimal, localcontext

    with localcontext() as ctx:
        ctx.prec = 80
        delta, step = Decimal(sensitivity2).sqrt(), Decimal(2) ** g.k
        spent = (delta + step * Decimal(n).sqrt()) ** 2 / (Decimal(g.tau) * step) ** 2
        assert spent <= Decimal(sensitivity2) / Decimal(sigma2)
        # and the noise's scale is the plan's to a few ulps
        assert abs(Decimal(g.tau) * step / Decimal(sigma2).sqrt() - 1) < Decimal(2) ** -50
    # OpenDP's own map of a mechanism on the same grid, at the same scale and vector size
    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=n), dp.l2_distance(T=float)
    theirs = dp.m.make_gaussian(*space, scale=math.ldexp(g.tau, g.k), k=g.k).map(math.sqrt(sensitivity2))
    assert theirs <= sensitivity2 / (2 * sigma2)


def test_rounding_to_the_grid_moves_neighbours_apart_by_at_most_the_bound():
    """The bound the accounting adds (2^k sqrt n) on the rounding add() applies, in exact
    arithmetic: pairs of vectors at distance at most Delta, and pairs whose coordinates sit next to
    the grid's rounding midpoints (where the rounding moves them apart most)."""
    from decimal import Decimal, localcontext

    g = dg.grid_gaussian(1.0, 1.0, 3)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((500, 3)) * 1e3
    d = rng.standard_normal((500, 3))
    x2 = x + d / np.linalg.norm(d, axis=1, keepdims=True) * rng.random((500, 1))
    mid = (np.rint(np.ldexp(x, -g.k)) + 0.5) * 2.0**g.k  # x at a midpoint: one rounds up, its neighbour down
    pairs = [*zip(x, x2), *zip(np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf))]
    with localcontext() as ctx:
        ctx.prec = 80
        step = Decimal(2) ** g.k
        for a, b in pairs:
            ra, rb = (np.rint(np.ldexp(v, -g.k)) for v in (a, b))
            moved = sum((Decimal(int(p)) - Decimal(int(q))) ** 2 for p, q in zip(ra, rb)).sqrt() * step
            apart = sum((Decimal(p) - Decimal(q)) ** 2 for p, q in zip(a, b)).sqrt()
            assert moved <= apart + step * Decimal(3).sqrt()


def test_beyond_two_limbs_the_source_draws_with_opendp():
    assert dg.grid_gaussian(1e30, 1.0, 10) is None
    y = make_noise().add_gaussian(np.zeros(4000), 1e30, sensitivity2=1.0)
    assert abs(y.std() / 1e15 - 1) < 0.1


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        dg.grid_gaussian(0.0, 1.0, 3)
    with pytest.raises(ValueError):
        dg.grid_gaussian(1.0, 1.0, 0)
    with pytest.raises(ValueError, match="finite"):
        dg.grid_gaussian(1.0, 1.0, 2).add(np.array([0.0, np.nan]))
    with pytest.raises(ValueError, match="at most 2"):
        dg.grid_gaussian(1.0, 1.0, 2).add(np.zeros(3))
