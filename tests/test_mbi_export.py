"""The export to Private-PGM (querysmasher.mbi_export; the optional extra ``mbi``, run by .ci/run
after installing it, ``python -m pytest -m mbi``): each exported measurement is the same likelihood
as the operator measure applied (for every plan kind: Kronecker factors, explicit operators, the
total), a model fitted from them gives back our tables where they are non-negative, the refusals,
and the README's example."""

import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import querysmasher as qs
from querysmasher.errors import InputError
from querysmasher.measure import measurements_of

pytestmark = pytest.mark.mbi  # run alone (.ci/run): jax starts threads, and other tests fork

jax = pytest.importorskip("jax", reason="the optional extra mbi (Private-PGM, with jax) is not installed")
jax.config.update("jax_enable_x64", True)  # the likelihoods compared to 1e-8 (Private-PGM advises it anyway)
mbi = pytest.importorskip("mbi", reason="the optional extra mbi (Private-PGM) is not installed")
from querysmasher.mbi_export import MAX_DENSE_CELLS, to_mbi  # noqa: E402

README = Path(__file__).resolve().parents[1] / "README.md"


def _release(method, workload, schema="synthetic:n=3,d=3", records=300, rho=1.0, seed=0):
    plan = qs.make_plan(schema, workload, method=method, rho=rho)
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({a.name: rng.integers(0, a.size, records) for a in plan.schema.attributes})
    return plan, frame, plan.measure(frame, seed=seed)


@pytest.fixture()
def unequal(tmp_path):
    """A domain of attributes of 2, 3 and 5 values: a factor applied along the wrong axis, or a
    transposed one, cannot go unnoticed (it can on equal sizes)."""
    path = tmp_path / "domain.json"
    path.write_text('{"a0": 2, "a1": 3, "a2": 5}')
    return str(path)


@pytest.mark.parametrize(
    "method,workload",
    [
        ("qs", "marginal:1,2"),
        ("qs", "marginal:1,2+prefix:(a1,a2)@3"),
        ("qs", "prefix:1+range:2"),
        ("rp", "prefix:2"),
        ("qsplus", "prefix:2"),
        ("mm", "marginal:2"),
        ("wff", "prefix:1,2"),
        ("hdmm", "prefix:1,2"),
    ],
)
def test_every_exported_measurement_is_the_applied_operators_likelihood(unequal, method, workload):
    """For random marginals mu (as Private-PGM factors): ||Q mu - y'||^2 - ||A mu - y||^2 is the same
    for every mu, A the operator measure applied (its ``apply``), y the released vector; ||Q||_2^2
    (Private-PGM's step size) is that of Q made explicit; the known total is unbiased's (the plan's,
    or for HDMM the one whole-domain measurement's least-squares sum)."""
    plan, frame, release = _release(method, workload, schema=unequal)
    out = to_mbi(plan, release)
    ms = {m.index: m for m in measurements_of(plan)}
    assert len(out.measurements) == len(release.index)
    rng = np.random.default_rng(1)
    sizes, names = plan.schema.sizes, plan.schema.names
    for index, y, exported in zip(release.index, release.y, out.measurements):
        m = ms[int(index)]
        assert exported.stddev == pytest.approx(math.sqrt(m.scale))
        clique = tuple(names.index(a) for a in exported.clique)
        assert clique == (m.attrs or (0,))
        shape = [sizes[a] for a in clique]
        gaps = []
        for _ in range(3):
            mu = rng.standard_normal(math.prod(shape))
            factor = mbi.Factor(out.domain.project(exported.clique), mu.reshape(shape))
            ours = m.apply(mu if m.attrs else np.array([mu.sum()]))
            theirs = np.asarray(exported.query(factor))
            gaps.append(np.sum((theirs - exported.noisy_measurement) ** 2) - np.sum((ours - np.asarray(y)) ** 2))
        assert np.ptp(gaps) <= 1e-8 * (1 + np.max(np.abs(gaps))), gaps
        domain = out.domain.project(exported.clique)
        q = np.stack(
            [np.asarray(exported.query(mbi.Factor(domain, e.reshape(shape)))) for e in np.eye(math.prod(shape))], 1
        )
        assert exported.query.op_norm_sq() == pytest.approx(np.linalg.norm(q, 2) ** 2, rel=1e-9)
    if method == "hdmm":  # one measurement A x + noise of the whole domain: its least-squares sum
        ((m,),) = [list(ms.values())]
        a = m.apply(np.eye(math.prod(sizes)))
        expect = np.linalg.lstsq(a.T, np.ones(a.shape[1]), rcond=None)[0] @ np.asarray(release.y[0])
    else:
        expect = float(release.reconstruct().table(())["estimate"].iloc[0])
    assert out.total == pytest.approx(max(expect, 1.0), rel=1e-9)


def test_a_model_fitted_from_the_export_gives_back_our_non_negative_tables():
    """Every 2-way marginal measured (qs): our unbiased tables are consistent; where they are also
    non-negative Private-PGM's maximum-likelihood model reproduces them."""
    plan, _, release = _release("qs", "marginal:2", schema="synthetic:n=4,d=3", records=2000, rho=4.0)
    out = release.to_mbi()
    answers = release.reconstruct()
    assert out.total == pytest.approx(float(answers.table(())["estimate"].iloc[0]))
    from mbi.estimation import MirrorDescent

    model = MirrorDescent().estimate(out.domain, out.measurements, known_total=out.total, iters=1500)
    for attrs in (("a0", "a1"), ("a1", "a2"), ("a0", "a2")):
        ours = answers.table(attrs)["estimate"].to_numpy()
        assert ours.min() > 10  # the case this test is about
        theirs = np.asarray(model.project(attrs).datavector())
        assert np.max(np.abs(theirs - ours)) <= 1e-3 * out.total, (attrs, np.max(np.abs(theirs - ours)))


def test_the_export_refuses_laplace_noise_large_explicit_operators_and_a_missing_extra(monkeypatch):
    plan = qs.make_plan("synthetic:n=3,d=2", "marginal:1", method="hdmm", noise="laplace", epsilon=1.0)
    frame = pd.DataFrame({"a0": [0, 1, 2], "a1": [1, 1, 0]})
    with pytest.raises(InputError, match="Gaussian"):
        to_mbi(plan, plan.measure(frame, seed=0))
    plan, _, release = _release("mm", "marginal:2")
    with pytest.raises(InputError, match="no Kronecker factors"):
        to_mbi(plan, release, max_dense_cells=26)
    assert to_mbi(plan, release, max_dense_cells=27).measurements and MAX_DENSE_CELLS >= 27
    monkeypatch.setitem(sys.modules, "mbi", None)
    with pytest.raises(InputError, match=r"querysmasher\[mbi\]"):
        to_mbi(plan, release)


def test_the_readme_private_pgm_example_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    (block,) = [b for b in blocks if "to_mbi" in b]
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)  # noqa: S102  (the README's own example)
    synthetic, plan = scope["synthetic"], scope["plan"]
    assert sorted(synthetic.columns) == sorted(plan.schema.names) and len(synthetic) > 0
    assert all(synthetic[a.name].between(0, a.size - 1).all() for a in plan.schema.attributes)
