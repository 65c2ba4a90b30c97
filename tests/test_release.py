"""``querysmasher release SPEC --out DIR``: named tables from a custodian's spec, nothing else."""

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from querysmasher.cli import main


@pytest.fixture()
def spec(tmp_path):
    rng = np.random.default_rng(0)
    n = 301
    pd.DataFrame(
        {"age": rng.integers(0, 6, n), "sex": rng.choice(["f", "m"], n), "income": rng.integers(0, 5, n)}
    ).to_csv(tmp_path / "d.csv", index=False)
    (tmp_path / "domain.yaml").write_text("age: 6\nsex: {categories: [f, m]}\nincome: {size: 5}\n")
    raw = {
        "data": "d.csv",
        "domain": "domain.yaml",
        "tables": [{"marginal": ["sex", "age"]}, {"prefix": ["income", "age"], "weight": 2}],
        "budget": {"epsilon": 1.0, "delta": 1e-6},
        "neighbours": "replace",
        "postprocess": True,
    }
    return tmp_path, raw, n


def _write(tmp_path, raw, name="spec.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(raw))
    return str(p)


def test_release_writes_the_named_tables_with_standard_errors_and_no_record_count(capsys, spec):
    tmp_path, raw, n = spec
    out = tmp_path / "release"
    assert main(["release", _write(tmp_path, raw), "--out", str(out)]) == 0
    info = json.loads((out / "release.json").read_text())
    assert info["sampler"] == "discrete" and info["seeded"] is False
    assert info["budget"]["neighbours"] == "replace" and info["budget"]["source"] == "epsilon-delta"
    assert info["privacy_cost_checked"] <= info["budget"]["beta"]
    assert info["workload"] == "marginal:(age,sex)+prefix:(age,income)@2"
    t = pd.read_csv(out / "age__sex.csv")
    assert (
        list(t.columns) == ["age", "sex", "estimate", "std_error", "lower", "upper"]
        and len(t) == 12
        and (t["std_error"] > 0).all()
    )
    assert (out / "answers" / "prefix__age__income.csv").is_file()
    # No record count: nothing holds n exactly; the noisy total is not n (OpenDP noise, never zero).
    for p in out.rglob("*.json"):
        assert "records" not in p.read_text()
    total = pd.read_csv(out / "age__sex.csv")["estimate"].sum()
    assert total != n
    # Not reproducible: a second release of the same spec draws fresh noise.
    out2 = tmp_path / "release2"
    assert main(["release", _write(tmp_path, raw), "--out", str(out2)]) == 0
    assert not np.array_equal(pd.read_csv(out2 / "age__sex.csv")["estimate"], t["estimate"])
    pp = pd.read_csv(out / "postprocessed" / "age__sex.csv")
    assert (pp["count"] >= 0).all()


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda r: r["tables"].append({"marginal": ["age", "zip"]}), "'zip'"),
        (lambda r: r.update(seed=0), "'seed'"),
        (lambda r: r.update(colour="red"), "'colour'"),
        (lambda r: r["tables"].append({"pre": ["age"]}), "'pre'"),
        (lambda r: r["tables"].append({"affine": ["age"]}), "two-way"),
        (lambda r: r["tables"].append({"marginal": ["age", "age"]}), "twice"),
        (lambda r: r["tables"].append({"marginal": ["age"], "weight": -1}), "weight"),
        (lambda r: r.update(budget={"rho": 1, "mu": 1}), "exactly one"),
        (lambda r: r.update(budget={"epsilon": 1}), "delta"),
        (lambda r: r.update(budget={"rho": "a lot"}), "budget.rho"),
        (lambda r: r.update(neighbours="swap"), "neighbours"),
        (lambda r: r.update(method="hdmm"), "method"),
        (lambda r: r.update(data="nope.csv"), "nope.csv"),
        (lambda r: r.pop("tables"), "'tables'"),
        (lambda r: r.update(tables=[]), "non-empty"),
    ],
)
def test_bad_specs_are_one_line_exit_2_and_nothing_written(capsys, spec, edit, needle):
    tmp_path, raw, _ = spec
    edit(raw)
    out = tmp_path / "release"
    assert main(["release", _write(tmp_path, raw), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".release")]


def test_a_nonempty_out_folder_is_never_overwritten(capsys, spec):
    tmp_path, raw, _ = spec
    out = tmp_path / "release"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    assert main(["release", _write(tmp_path, raw), "--out", str(out)]) == 2
    assert "not an empty folder" in capsys.readouterr().err and (out / "keep.txt").read_text() == "x"


def test_unparsable_spec_is_one_line(capsys, tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("tables: [\n  - a: : b\n")
    assert main(["release", str(p), "--out", str(tmp_path / "o")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_adult_release(capsys, adult_data, tmp_path):
    raw = {
        "data": str(adult_data / "adult.csv"),
        "domain": str(adult_data / "adult-domain.json"),
        "tables": [{"marginal": ["age", "sex"]}, {"prefix": ["age", "income>50K"]}],
        "budget": {"rho": 0.5},
    }
    out = tmp_path / "adult"
    assert main(["release", _write(tmp_path, raw), "--out", str(out)]) == 0
    t = pd.read_csv(out / "age__sex.csv")
    assert len(t) == 170 and (t["std_error"] > 0).all()


def test_qsplus_release_publishes_every_pair_table_with_standard_errors(capsys, spec):
    """qsplus measures each pair's whole marginal at full rank, so the affine table (a projection
    under qs) is published with exact standard errors; the budget is re-checked on its operators."""
    tmp_path, raw, n = spec
    # smaller attributes than the fixture's (4 x 3: still a projection under qs, rank 4 < 6): the
    # plan takes seconds where the fixture's 6 x 5 took 20
    rng = np.random.default_rng(1)
    pd.DataFrame(
        {"age": rng.integers(0, 4, n), "sex": rng.choice(["f", "m"], n), "income": rng.integers(0, 3, n)}
    ).to_csv(tmp_path / "small.csv", index=False)
    (tmp_path / "small.yaml").write_text("age: 4\nsex: {categories: [f, m]}\nincome: {size: 3}\n")
    raw.update(
        data="small.csv",
        domain="small.yaml",
        method="qsplus",
        tables=[{"marginal": ["sex", "age"]}, {"affine": ["age", "income"]}],
        neighbours="add-remove",
    )
    out = tmp_path / "release"
    assert main(["release", _write(tmp_path, raw), "--out", str(out)]) == 0, capsys.readouterr().err
    info = json.loads((out / "release.json").read_text())
    assert info["method"] == "qsplus" and info["seeded"] is False and info["tables_omitted"] == 0
    assert info["privacy_cost_checked"] <= info["budget"]["beta"]
    for name, rows in (("age__sex.csv", 8), ("age__income.csv", 12)):
        t = pd.read_csv(out / name)
        assert len(t) == rows and (t["std_error"] > 0).all()
    assert (out / "answers" / "affine__age__income.csv").is_file()
    assert pd.read_csv(out / "age__sex.csv")["estimate"].sum() == pytest.approx(
        pd.read_csv(out / "age__income.csv")["estimate"].sum()
    )
    assert (pd.read_csv(out / "postprocessed" / "age__income.csv")["count"] >= 0).all()
