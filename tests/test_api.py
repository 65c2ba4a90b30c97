"""The root API: one import, short reprs, tables whose variances are those of the explicit
estimator, file round trips, and the README's Python API section run as written."""

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from bruteforce import full_privacy_gram, gls_histogram, marginal_map, measured_operator, pinv, true_histogram

import querysmasher as qs
from querysmasher.errors import InputError

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture(scope="module")
def small():
    plan = qs.make_plan("synthetic:n=3,d=3", "prefix:1,2+marginal:3", method="qs", rho=0.5)
    rng = np.random.default_rng(3)
    records = pd.DataFrame(rng.integers(0, 3, (150, 3)), columns=plan.schema.names)
    return plan, records


@pytest.mark.parametrize("attrs", [(), ("a0",), ("a0", "a2"), (0, 1, 2)])
def test_table_is_the_explicit_least_squares_estimate(small, attrs):
    """Each cell of a table: the estimate is the full-domain least-squares one from the noisy
    measurements (numpy's lstsq over the operators measure applied), the variance that of the
    explicit estimator; without noise, the table is the records' true marginal."""
    plan, records = small
    release = plan.measure(records, seed=5)
    t = release.reconstruct().table(attrs)
    idx = tuple(sorted(plan.schema.names.index(a) if isinstance(a, str) else a for a in attrs))
    x = full_privacy_gram(plan)
    m = marginal_map(plan.schema.sizes, idx)  # each cell of the table as a full-domain query
    assert np.allclose(t["variance"], np.einsum("ij,jk,ik->i", m, pinv(x), m), rtol=1e-8)
    assert np.allclose(t["estimate"], m @ gls_histogram(plan, release), rtol=1e-8, atol=1e-8)
    assert list(t.columns) == [plan.schema.names[a] for a in idx] + ["estimate", "variance", "lower", "upper"]
    truth = true_histogram(records.to_numpy(), plan.schema.sizes)
    noiseless = qs.Measurements(
        release.index,
        [measured_operator(plan, int(i)) @ truth * np.sqrt(plan.allocation.sigma2[int(i)]) for i in release.index],
        True,
    )
    exact = qs.Answers(plan, noiseless).table(attrs)
    assert np.allclose(exact["estimate"], m @ truth, rtol=1e-9, atol=1e-9)
    if idx:  # one row per cell, row-major over the attributes
        assert list(zip(*(exact[plan.schema.names[a]] for a in idx))) == list(
            np.ndindex(*(plan.schema.sizes[a] for a in idx))
        )


def test_view_answers_and_unmeasured_table(small):
    plan, records = small
    answers = plan.measure(records).reconstruct()
    frame = answers.view(0)
    assert len(frame) == plan.workload.view_count(plan.workload.views[0]) and (frame["variance"] > 0).all()
    only_prefix = qs.make_plan("synthetic:n=3,d=3", "prefix:1", method="rp")
    with pytest.raises(InputError, match=r"residual view \(a0,a1\) is not measured"):
        only_prefix.measure(records).reconstruct().table(("a0", "a1"))
    with pytest.raises(InputError, match="'nope': is not in schema"):
        answers.table("nope")


def test_noise_is_fresh_unless_seeded(small):
    plan, records = small
    a, b = plan.measure(records), plan.measure(records)
    assert not a.seeded and not np.array_equal(a.y[0], b.y[0])
    s1, s2 = plan.measure(records, seed=4), plan.measure(records, seed=4)
    assert s1.seeded and all(np.array_equal(u, v) for u, v in zip(s1.y, s2.y))


def test_reprs_are_short(small):
    plan, records = small
    meas = plan.measure(records)
    sol = next(iter(plan.solutions.values()))
    for obj in (plan, meas, meas.reconstruct(), meas.reconstruct().reconstruction, sol, sol.mechanism):
        assert len(repr(obj)) < 200 and "array" not in repr(obj)


def test_save_load_round_trip_and_wrong_plan(small, tmp_path):
    plan, records = small
    release = plan.measure(records)
    qs.save(release, tmp_path / "m0.h5")  # before the plan is saved: digest of its file content
    qs.save(plan, tmp_path / "plan.h5")
    qs.save(release, tmp_path / "m.h5")
    back = qs.load(tmp_path / "m.h5", plan=tmp_path / "plan.h5")
    assert np.allclose(back.reconstruct().table("a1").estimate, release.reconstruct().table("a1").estimate)
    qs.load(tmp_path / "m0.h5", plan=tmp_path / "plan.h5")
    other = qs.make_plan("synthetic:n=3,d=3", "prefix:1", method="rp")
    qs.save(other, tmp_path / "other.h5")
    with pytest.raises(InputError, match="different plan"):
        qs.load(tmp_path / "m.h5", plan=tmp_path / "other.h5")
    info = qs.save(release.reconstruct(), tmp_path / "answers.h5")
    assert info is None and (tmp_path / "answers.h5").is_file()


def test_budget_keywords():
    assert qs.budget(rho=0.5).beta == 1.0 and qs.budget().beta == 1.0
    with pytest.raises(InputError, match="exactly one"):
        qs.budget(rho=0.5, mu=1.0)
    with pytest.raises(InputError, match="needs delta"):
        qs.budget(epsilon=1.0)


def test_readme_python_api_section_runs(tmp_path, monkeypatch):
    text = README.read_text()
    section = text[text.index("## Python API") :]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec"), {})  # noqa: S102  (the README's own example)
    assert (tmp_path / "plan.h5").is_file()
