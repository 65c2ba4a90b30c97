"""The Python API for every built-in method (issue 41): the README's Python API section run with each
method, releases that survive their files (saved before or after the plan), tables and views of
every kind, plans that pickle, and ``qs.measure`` / ``qs.reconstruct`` as functions while
``querysmasher.measure`` / ``querysmasher.reconstruct`` stay the library's modules."""

import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import querysmasher as qs
from querysmasher.errors import InputError
from querysmasher.hdmm.plan import HDMMPlan
from querysmasher.marginal_family import MarginalPlan
from querysmasher.plan import Plan

README = Path(__file__).resolve().parents[1] / "README.md"
METHODS = ("qs", "rp", "rpplus", "wff", "mm", "hdmm", "qsplus")
# adult's 6.4e17 cells are beyond mm's dense full-domain solver and HDMM's full-domain release, and
# qsplus takes minutes on its 100-value attributes: those run the README's code on a small schema
# with the attribute names it uses (age, sex)
SMALL_SCHEMA_METHODS = ("mm", "hdmm", "qsplus")
RECORD_TYPES = {"hdmm": HDMMPlan, "qsplus": MarginalPlan}


def _readme_block() -> str:
    text = README.read_text()
    section = text[text.index("## Python API") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def small_schema(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text("age: 4\nsex: 2\nrace: 3\n")
    return path


@pytest.mark.parametrize("method", METHODS)
def test_readme_python_api_section_runs_with_every_method(method, small_schema, tmp_path, monkeypatch):
    block = _readme_block()
    assert block.count('method="qs"') == 1 and block.count('"adult"') == 1
    block = block.replace('method="qs"', f'method="{method}"')
    if method in SMALL_SCHEMA_METHODS:
        block = block.replace('"adult"', repr(str(small_schema)))
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(block, "README.md", "exec"), ns)  # noqa: S102  (the README's own example)
    plan, answers, again = ns["plan"], ns["answers"], ns["release"]
    assert plan.method == method and isinstance(plan, RECORD_TYPES.get(method, Plan)) and hasattr(plan, "measure")
    # the release read back from its file, with the plan read back from its file, answers the same
    back = again.reconstruct()
    assert np.array_equal(back.view(0).estimate, answers.view(0).estimate)
    table, back_table = answers.table(("age", "sex")), back.table(("age", "sex"))
    assert np.allclose(back_table.estimate, table.estimate, rtol=1e-12, atol=1e-9)


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    schema = tmp_path_factory.mktemp("schema") / "small.yaml"
    schema.write_text("age: 4\nsex: 2\nrace: 3\n")
    out = {m: qs.make_plan(str(schema), "prefix:2+marginal:1", method=m, rho=0.5) for m in METHODS}
    rng = np.random.default_rng(1)
    records = pd.DataFrame({a.name: rng.integers(0, a.size, 300) for a in out["qs"].schema.attributes})
    return out, records


@pytest.mark.parametrize("method", METHODS)
def test_release_saved_before_its_plan_loads_with_it_and_not_with_another(plans, method, tmp_path):
    by_method, records = plans
    plan = by_method[method]
    release = qs.measure(plan, records, seed=3)
    assert release.seeded and release.plan is plan
    qs.save(release, tmp_path / "m0.h5")  # before the plan is saved: the digest of the file it would be
    qs.save(plan, tmp_path / "plan.h5")
    back = qs.load(tmp_path / "m0.h5", plan=tmp_path / "plan.h5")
    answers, again = qs.reconstruct(release), back.reconstruct()
    for k in range(len(plan.workload.views)):
        assert np.allclose(again.view(k).estimate, answers.view(k).estimate, rtol=1e-12, atol=1e-9)
    other = by_method["rp" if method != "rp" else "qs"]
    qs.save(other, tmp_path / "other.h5")
    with pytest.raises(InputError, match="different plan"):
        qs.load(tmp_path / "m0.h5", plan=tmp_path / "other.h5").reconstruct()
    assert qs.save(answers, tmp_path / "answers.h5") is None and (tmp_path / "answers.h5").is_file()


@pytest.mark.parametrize("method", METHODS)
def test_views_have_variances_where_the_kind_gives_them_and_tables_where_it_has_them(plans, method):
    by_method, records = plans
    plan = by_method[method]
    answers = plan.measure(records).reconstruct()
    for k, v in enumerate(plan.workload.views):
        frame = answers.view(k)
        assert len(frame) == plan.workload.view_count(v) and np.all(np.isfinite(frame.estimate))
        assert ("variance" in frame) == (method != "hdmm")
    marginal = answers.table("age")  # the workload's marginal view on age: every kind gives it
    k = next(k for k, v in enumerate(plan.workload.views) if v.attrs == (0,) and v.family == "marginal")
    assert list(marginal.age) == [0, 1, 2, 3]
    assert np.allclose(marginal.estimate, answers.view(k).estimate, rtol=1e-12, atol=1e-9)
    if method == "hdmm":  # per query only: a table that is no marginal view of the workload is refused
        with pytest.raises(InputError, match="no per-view tables"):
            answers.table(("age", "sex"))
    else:  # the table of a prefix view's cells, with a variance per cell
        t = answers.table(("age", "sex"))
        assert len(t) == 8 and np.all(t.variance > 0)


def test_a_library_plan_measures_and_its_release_fits_its_own_file(plans, tmp_path):
    """A plan from the library (not qs.make_plan) whose file stores its dense mechanism as eigenpairs
    (fewer values measured): the release is made with that form and loads with the plan's file."""
    from querysmasher.planning import make_plan

    _, records = plans
    plan = make_plan(plans[0]["mm"].schema, "marginal:1,2", "mm")
    assert {s.mechanism.kind for s in plan.solutions.values()} == {"dense"}
    release = qs.measure(plan, records, seed=2)
    qs.save(plan, tmp_path / "plan.h5")
    qs.save(release, tmp_path / "m.h5")
    back = qs.load(tmp_path / "m.h5", plan=tmp_path / "plan.h5").reconstruct()
    table = release.reconstruct().table(("age", "sex"))
    assert np.allclose(back.table(("age", "sex")).estimate, table.estimate, rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("method", ["qs", "mm", "hdmm", "qsplus"])
def test_plans_pickle_and_measure_again(plans, method):
    by_method, records = plans
    plan = pickle.loads(pickle.dumps(by_method[method]))
    assert type(plan) is type(by_method[method]) and plan.rmse == by_method[method].rmse
    a = plan.measure(records, seed=5).reconstruct().view(1).estimate
    assert np.array_equal(a, by_method[method].measure(records, seed=5).reconstruct().view(1).estimate)


@pytest.mark.parametrize("first", ["the function", "the module"])
def test_measure_and_reconstruct_are_functions_and_modules(first):
    """Whichever is used first in a fresh interpreter: ``qs.measure(plan, records)`` and
    ``qs.reconstruct(release)`` run the API's steps, ``import querysmasher.measure`` is the module."""
    code = (
        "import numpy as np, pandas as pd, querysmasher as qs\n"
        + ("import querysmasher.measure, querysmasher.reconstruct\n" if first == "the module" else "")
        + "p = qs.make_plan('synthetic:n=3,d=2', 'marginal:2', method='qsplus')\n"
        "r = qs.measure(p, pd.DataFrame({'a0': [0, 1, 2], 'a1': [2, 1, 0]}), seed=1)\n"
        "a = qs.reconstruct(r)\n"
        "import querysmasher.measure as m\n"
        "from querysmasher import reconstruct as rec\n"
        "assert qs.measure is m and callable(m) and hasattr(m, 'check_plan') and hasattr(m, 'Measurements')\n"
        "assert callable(rec) and rec.__name__ == 'querysmasher.reconstruct' and hasattr(rec, 'released_answers')\n"
        "print(type(r).__name__, len(a.view(0)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["Release", "9"]
