"""Fuzz-style bad input through the CLI: every malformed plan, measurements file, data file, domain
file, option and schema gives exit code 2, exactly one line on stderr, and no output file."""

from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest

from querysmasher.cli import main

COLS = ["a0", "a1", "a2"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    data = d / "data.csv"
    pd.DataFrame(np.random.default_rng(0).integers(0, 4, (60, 3)), columns=COLS).to_csv(data, index=False)
    plan, meas = d / "plan.h5", d / "meas.h5"
    assert main(["plan", "--schema", "synthetic:n=4,d=3", "--workload", "prefix:1,2", "--method", "rp", "--out", str(plan)]) == 0
    assert main(["measure", "--plan", str(plan), "--data", str(data), "--out", str(meas), "--seed", "1"]) == 0
    other = d / "other.h5"
    assert main(["plan", "--schema", "synthetic:n=4,d=3", "--workload", "marginal:1", "--method", "rp", "--out", str(other)]) == 0
    return d, plan, meas, data, other


def _csv(d: Path, name: str, text: str) -> str:
    p = d / name
    p.write_text(text)
    return str(p)


def _frame(d: Path, name: str, frame: pd.DataFrame) -> str:
    p = d / name
    frame.to_parquet(p) if name.endswith(".parquet") else frame.to_csv(p, index=False)
    return str(p)


def _copy_plan(d: Path, plan: Path, name: str, edit) -> str:
    p = d / name
    p.write_bytes(plan.read_bytes())
    with h5py.File(p, "r+") as f:
        edit(f)
    return str(p)


def _scale_sigma(f, factor):
    s2 = f["views/sigma2"][()]
    s2[np.isfinite(s2)] *= factor
    f["views/sigma2"][...] = s2


def _copy_meas(d: Path, meas: Path, name: str, edit) -> str:
    p = d / name
    p.write_bytes(meas.read_bytes())
    with h5py.File(p, "r+") as f:
        edit(f)
    return str(p)


def _set_y(f, fn):
    y = fn(f["y"][()])
    del f["y"]
    f.create_dataset("y", data=y)


GOOD = pd.DataFrame({"a0": [0, 1], "a1": [2, 3], "a2": [1, 0]})

# Each case: (name, function (dir, plan, meas, data, other) -> (command, args without --out), needle)
MEASURE = [
    ("data missing", lambda d, p, m, x, o: ["--data", str(d / "nope.csv")], "does not exist"),
    ("csv missing column", lambda d, p, m, x, o: ["--data", _csv(d, "c1.csv", "a0,a1\n0,1\n")], "missing column"),
    ("csv NaN", lambda d, p, m, x, o: ["--data", _csv(d, "c2.csv", "a0,a1,a2\n0,,1\n")], "'a1'"),
    ("csv nan text", lambda d, p, m, x, o: ["--data", _csv(d, "c3.csv", "a0,a1,a2\n0,nan,1\n")], "'a1'"),
    ("csv out of range", lambda d, p, m, x, o: ["--data", _csv(d, "c4.csv", "a0,a1,a2\n0,7,1\n")], "outside the domain"),
    ("csv negative", lambda d, p, m, x, o: ["--data", _csv(d, "c5.csv", "a0,a1,a2\n-1,0,1\n")], "outside the domain"),
    ("csv string in numeric", lambda d, p, m, x, o: ["--data", _csv(d, "c6.csv", "a0,a1,a2\n0,abc,1\n")], "not numbers"),
    ("csv fraction", lambda d, p, m, x, o: ["--data", _csv(d, "c7.csv", "a0,a1,a2\n0,1.5,1\n")], "integer codes"),
    ("csv empty file", lambda d, p, m, x, o: ["--data", _csv(d, "c8.csv", "")], "cannot be read"),
    ("csv huge value", lambda d, p, m, x, o: ["--data", _csv(d, "c9.csv", "a0,a1,a2\n0,1e400,1\n")], "'a1'"),
    ("csv huge integer", lambda d, p, m, x, o: ["--data", _csv(d, "c10.csv", "a0,a1,a2\n0,99999999999999999999999,1\n")], "'a1'"),
    ("parquet wrong columns", lambda d, p, m, x, o: ["--data", _frame(d, "p1.parquet", GOOD.rename(columns={"a2": "b"}))], "missing column"),
    ("parquet NaN", lambda d, p, m, x, o: ["--data", _frame(d, "p2.parquet", GOOD.astype(float).assign(a0=[np.nan, 1.0]))], "'a0'"),
    ("parquet strings", lambda d, p, m, x, o: ["--data", _frame(d, "p3.parquet", GOOD.astype(str).assign(a2=["x", "0"]))], "'a2'"),
    ("parquet out of range", lambda d, p, m, x, o: ["--data", _frame(d, "p4.parquet", GOOD.assign(a1=[4, 0]))], "outside the domain"),
    ("parquet huge", lambda d, p, m, x, o: ["--data", _frame(d, "p5.parquet", GOOD.astype(float).assign(a1=[1e300, 0.0]))], "outside the domain"),
    ("not parquet", lambda d, p, m, x, o: ["--data", _csv(d, "p6.parquet", "a0,a1\n")], "cannot be read"),
    ("domain missing", lambda d, p, m, x, o: ["--domain", str(d / "nope.yaml")], "--domain"),
    ("domain multi-line yaml error", lambda d, p, m, x, o: ["--domain", _csv(d, "d1.yaml", "a0:\n  bins: [0, 1\n  - x: : :\n")], "is not valid YAML"),
    ("domain bins vs size", lambda d, p, m, x, o: ["--domain", _csv(d, "d2.yaml", "a0: {bins: [0, 1, 2]}\n")], "size + 1 = 5"),
    ("domain bins unsorted", lambda d, p, m, x, o: ["--domain", _csv(d, "d3.yaml", "a0: {bins: [0, 2, 1, 3, 4]}\n")], "strictly increasing"),
    ("domain bins not numbers", lambda d, p, m, x, o: ["--domain", _csv(d, "d4.yaml", "a0: {bins: [0, a, 1, 3, 4]}\n")], "list of numbers"),
    ("domain duplicate categories", lambda d, p, m, x, o: ["--domain", _csv(d, "d5.yaml", "a1: {categories: [x, y, x, z]}\n")], "appears twice"),
    ("domain categories vs size", lambda d, p, m, x, o: ["--domain", _csv(d, "d6.yaml", "a1: {categories: [x, y]}\n")], "exactly the plan's size 4"),
    ("domain unknown attribute", lambda d, p, m, x, o: ["--domain", _csv(d, "d7.yaml", "zz: {categories: [x]}\n")], "'zz'"),
    ("domain not a mapping", lambda d, p, m, x, o: ["--domain", _csv(d, "d8.yaml", "- 1\n- 2\n")], "mapping"),
    ("plan not hdf5", lambda d, p, m, x, o: ["--plan", _csv(d, "plan.txt", "not a plan")], "HDF5"),
    ("plan missing", lambda d, p, m, x, o: ["--plan", str(d / "nope.h5")], "does not exist"),
    ("plan of wrong kind", lambda d, p, m, x, o: ["--plan", str(m)], "not a 'plan'"),
    ("plan lacks sigma2", lambda d, p, m, x, o: ["--plan", _copy_plan(d, p, "e1.h5", lambda f: f["views"].__delitem__("sigma2"))], "field 'views/sigma2': is missing"),
    ("plan sigma -1%", lambda d, p, m, x, o: ["--plan", _copy_plan(d, p, "e2.h5", lambda f: _scale_sigma(f, 0.99))], "exceeds its budget"),
    ("plan sigma negative", lambda d, p, m, x, o: ["--plan", _copy_plan(d, p, "e3.h5", lambda f: _scale_sigma(f, -1.0))], "sigma2"),
    ("plan budget garbage", lambda d, p, m, x, o: ["--plan", _copy_plan(d, p, "e4.h5", lambda f: f.attrs.__setitem__("budget", "{"))], "field '@budget' '{': is not valid JSON"),
    ("seed negative", lambda d, p, m, x, o: ["--seed", "-1"], "--seed -1"),
    ("seed with opendp", lambda d, p, m, x, o: ["--seed", "3", "--sampler", "opendp"], "cannot be seeded"),
    ("seed not integer", lambda d, p, m, x, o: ["--seed", "x"], "--seed"),
    ("schema mismatch", lambda d, p, m, x, o: ["--schema", "synthetic:n=5,d=3"], "--schema"),
]

RECONSTRUCT = [
    ("measurements text", lambda d, p, m, x, o: ["--measurements", _csv(d, "m.txt", "x")], "HDF5"),
    ("measurements other plan", lambda d, p, m, x, o: ["--plan", str(o)], "different plan"),
    ("measurements truncated", lambda d, p, m, x, o: ["--measurements", _copy_meas(d, m, "t1.h5", lambda f: _set_y(f, lambda y: y[:-3]))], "one vector per measured view"),
    ("measurements NaN", lambda d, p, m, x, o: ["--measurements", _copy_meas(d, m, "t2.h5", lambda f: _set_y(f, lambda y: np.where(np.arange(len(y)) == 2, np.nan, y)))], "NaN"),
    ("measurements lack y", lambda d, p, m, x, o: ["--measurements", _copy_meas(d, m, "t3.h5", lambda f: f.__delitem__("y"))], "field 'y': is missing"),
    ("measurements of wrong kind", lambda d, p, m, x, o: ["--measurements", str(p)], "not a 'measurements'"),
    ("max answers negative", lambda d, p, m, x, o: ["--max-answers", "-1"], "--max-answers"),
]

PLAN = [
    ("schema yaml error", lambda d, p, m, x, o: ["--schema", _csv(d, "s1.yaml", "a: [1,\n b: : 2\n")], "is not valid YAML"),
    ("attribute of size 100,000", lambda d, p, m, x, o: ["--schema", _csv(d, "s2.yaml", "big: 100000\nb: 3\n")], "'big'"),
    ("beta nan", lambda d, p, m, x, o: ["--beta", "nan"], "--beta"),
    ("empty workload", lambda d, p, m, x, o: ["--workload", " "], "is empty"),
    ("bad neighbours", lambda d, p, m, x, o: ["--neighbours", "swap"], "--neighbours"),
]


def _run(capsys, command, argv):
    try:
        code = main([command, *argv])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    return code, capsys.readouterr().err.strip().splitlines()


def _argv(command, given, d, plan, meas, data):
    defaults = {
        "measure": {"--plan": str(plan), "--data": str(data)},
        "reconstruct": {"--plan": str(plan), "--measurements": str(meas)},
        "plan": {"--schema": "synthetic:n=4,d=3", "--workload": "prefix:1", "--method": "rp"},
    }[command]
    argv = list(given)
    for k, v in defaults.items():
        if k not in argv:
            argv += [k, v]
    return argv


CASES = [("measure", *c) for c in MEASURE] + [("reconstruct", *c) for c in RECONSTRUCT] + [("plan", *c) for c in PLAN]


def test_there_are_at_least_30_cases():
    assert len(CASES) >= 30


@pytest.mark.parametrize("command, name, make, needle", CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_malformed_input_is_one_line_exit_2_and_no_file(capsys, base, command, name, make, needle):
    d, plan, meas, data, other = base
    out_dir = d / ("out-" + name.replace(" ", "-").replace(",", "").replace("%", ""))
    out_dir.mkdir()
    out = out_dir / "result.h5"
    argv = _argv(command, make(d, plan, meas, data, other), d, plan, meas, data) + ["--out", str(out)]
    code, err = _run(capsys, command, argv)
    assert code == 2, (name, err)
    assert len(err) == 1 and err[0].startswith("querysmasher") and "error:" in err[0] and needle in err[0], (name, err)
    assert list(out_dir.iterdir()) == [], name  # nothing written, not even a temporary file


@pytest.mark.parametrize("command", ["measure", "reconstruct", "plan"])
@pytest.mark.parametrize("where", ["under a file", "a folder"])
def test_unwritable_out_is_refused_before_any_work(capsys, base, command, where):
    d, plan, meas, data, _ = base
    out = d / "data.csv" / "x.h5" if where == "under a file" else d
    code, err = _run(capsys, command, _argv(command, [], d, plan, meas, data) + ["--out", str(out)])
    assert code == 2 and len(err) == 1 and "--out" in err[0], err
