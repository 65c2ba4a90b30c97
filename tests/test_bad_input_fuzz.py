"""Fuzz-style bad input through the CLI: every malformed plan, measurements file, data file, domain
file, option and schema gives exit code 2, exactly one line on stderr, and no output file."""

import json
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
    assert (
        main(
            ["plan", "--schema", "synthetic:n=4,d=3", "--workload", "prefix:1,2", "--method", "rp", "--out", str(plan)]
        )
        == 0
    )
    assert main(["measure", "--plan", str(plan), "--data", str(data), "--out", str(meas), "--seed", "1"]) == 0
    other = d / "other.h5"
    assert (
        main(
            ["plan", "--schema", "synthetic:n=4,d=3", "--workload", "marginal:1", "--method", "rp", "--out", str(other)]
        )
        == 0
    )
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


def _replace(f, name, data):
    del f[name]
    f.create_dataset(name, data=data)


def _edit(f, name, fn):
    _replace(f, name, fn(f[name][()]))


def _strings(values) -> np.ndarray:
    return np.array(["x"] * len(values), dtype=h5py.string_dtype())


def _solution(f, attributes: int):
    return next(g for g in f["solutions"].values() if len(g["sizes"]) == attributes)


def _schema_size(f, attribute: int, size: int):
    doc = json.loads(f.attrs["schema"])
    doc["attributes"][attribute]["size"] = size
    f.attrs["schema"] = json.dumps(doc)


def _bytes(d: Path, name: str, data: bytes) -> str:
    p = d / name
    p.write_bytes(data)
    return str(p)


GOOD = pd.DataFrame({"a0": [0, 1], "a1": [2, 3], "a2": [1, 0]})

# Each case: (name, function (dir, plan, meas, data, other) -> (command, args without --out), needle)
MEASURE = [
    ("data missing", lambda d, p, m, x, o: ["--data", str(d / "nope.csv")], "does not exist"),
    ("csv missing column", lambda d, p, m, x, o: ["--data", _csv(d, "c1.csv", "a0,a1\n0,1\n")], "missing column"),
    ("csv NaN", lambda d, p, m, x, o: ["--data", _csv(d, "c2.csv", "a0,a1,a2\n0,,1\n")], "'a1'"),
    ("csv nan text", lambda d, p, m, x, o: ["--data", _csv(d, "c3.csv", "a0,a1,a2\n0,nan,1\n")], "'a1'"),
    (
        "csv out of range",
        lambda d, p, m, x, o: ["--data", _csv(d, "c4.csv", "a0,a1,a2\n0,7,1\n")],
        "outside the domain",
    ),
    ("csv negative", lambda d, p, m, x, o: ["--data", _csv(d, "c5.csv", "a0,a1,a2\n-1,0,1\n")], "outside the domain"),
    (
        "csv string in numeric",
        lambda d, p, m, x, o: ["--data", _csv(d, "c6.csv", "a0,a1,a2\n0,abc,1\n")],
        "not numbers",
    ),
    ("csv fraction", lambda d, p, m, x, o: ["--data", _csv(d, "c7.csv", "a0,a1,a2\n0,1.5,1\n")], "integer codes"),
    ("csv empty file", lambda d, p, m, x, o: ["--data", _csv(d, "c8.csv", "")], "cannot be read"),
    ("csv huge value", lambda d, p, m, x, o: ["--data", _csv(d, "c9.csv", "a0,a1,a2\n0,1e400,1\n")], "'a1'"),
    (
        "csv huge integer",
        lambda d, p, m, x, o: ["--data", _csv(d, "c10.csv", "a0,a1,a2\n0,99999999999999999999999,1\n")],
        "'a1'",
    ),
    (
        "parquet wrong columns",
        lambda d, p, m, x, o: ["--data", _frame(d, "p1.parquet", GOOD.rename(columns={"a2": "b"}))],
        "missing column",
    ),
    (
        "parquet NaN",
        lambda d, p, m, x, o: ["--data", _frame(d, "p2.parquet", GOOD.astype(float).assign(a0=[np.nan, 1.0]))],
        "'a0'",
    ),
    (
        "parquet strings",
        lambda d, p, m, x, o: ["--data", _frame(d, "p3.parquet", GOOD.astype(str).assign(a2=["x", "0"]))],
        "'a2'",
    ),
    (
        "parquet out of range",
        lambda d, p, m, x, o: ["--data", _frame(d, "p4.parquet", GOOD.assign(a1=[4, 0]))],
        "outside the domain",
    ),
    (
        "parquet huge",
        lambda d, p, m, x, o: ["--data", _frame(d, "p5.parquet", GOOD.astype(float).assign(a1=[1e300, 0.0]))],
        "outside the domain",
    ),
    ("not parquet", lambda d, p, m, x, o: ["--data", _csv(d, "p6.parquet", "a0,a1\n")], "cannot be read"),
    ("domain missing", lambda d, p, m, x, o: ["--domain", str(d / "nope.yaml")], "--domain"),
    (
        "domain multi-line yaml error",
        lambda d, p, m, x, o: ["--domain", _csv(d, "d1.yaml", "a0:\n  bins: [0, 1\n  - x: : :\n")],
        "is not valid YAML",
    ),
    (
        "domain bins vs size",
        lambda d, p, m, x, o: ["--domain", _csv(d, "d2.yaml", "a0: {bins: [0, 1, 2]}\n")],
        "size + 1 = 5",
    ),
    (
        "domain bins unsorted",
        lambda d, p, m, x, o: ["--domain", _csv(d, "d3.yaml", "a0: {bins: [0, 2, 1, 3, 4]}\n")],
        "strictly increasing",
    ),
    (
        "domain bins not numbers",
        lambda d, p, m, x, o: ["--domain", _csv(d, "d4.yaml", "a0: {bins: [0, a, 1, 3, 4]}\n")],
        "finite numbers (bin edges)",
    ),
    (
        "domain duplicate categories",
        lambda d, p, m, x, o: ["--domain", _csv(d, "d5.yaml", "a1: {categories: [x, y, x, z]}\n")],
        "appears twice",
    ),
    (
        "domain categories vs size",
        lambda d, p, m, x, o: ["--domain", _csv(d, "d6.yaml", "a1: {categories: [x, y]}\n")],
        "exactly the plan's size 4",
    ),
    (
        "domain unknown attribute",
        lambda d, p, m, x, o: ["--domain", _csv(d, "d7.yaml", "zz: {categories: [x]}\n")],
        "'zz'",
    ),
    ("domain not a mapping", lambda d, p, m, x, o: ["--domain", _csv(d, "d8.yaml", "- 1\n- 2\n")], "mapping"),
    ("plan not hdf5", lambda d, p, m, x, o: ["--plan", _csv(d, "plan.txt", "not a plan")], "HDF5"),
    ("plan missing", lambda d, p, m, x, o: ["--plan", str(d / "nope.h5")], "does not exist"),
    ("plan of wrong kind", lambda d, p, m, x, o: ["--plan", str(m)], "holds a 'measurements', not a plan"),
    (
        "plan lacks sigma2",
        lambda d, p, m, x, o: ["--plan", _copy_plan(d, p, "e1.h5", lambda f: f["views"].__delitem__("sigma2"))],
        "field 'views/sigma2': is missing",
    ),
    (
        "plan sigma -1%",
        lambda d, p, m, x, o: ["--plan", _copy_plan(d, p, "e2.h5", lambda f: _scale_sigma(f, 0.99))],
        "exceeds its budget",
    ),
    (
        "plan sigma negative",
        lambda d, p, m, x, o: ["--plan", _copy_plan(d, p, "e3.h5", lambda f: _scale_sigma(f, -1.0))],
        "sigma2",
    ),
    (
        "plan budget garbage",
        lambda d, p, m, x, o: ["--plan", _copy_plan(d, p, "e4.h5", lambda f: f.attrs.__setitem__("budget", "{"))],
        "field '@budget' '{': is not valid JSON",
    ),
    (
        "plan view attribute out of range",
        lambda d, p, m, x, o: [
            "--plan",
            _copy_plan(d, p, "v1.h5", lambda f: _edit(f, "views/attrs", lambda a: np.r_[7, a[1:]])),
        ],
        "field 'views/attrs' 7: must be <= 2",
    ),
    (
        "plan view attribute negative",
        lambda d, p, m, x, o: [
            "--plan",
            _copy_plan(d, p, "v2.h5", lambda f: _edit(f, "views/attrs", lambda a: np.r_[-1, a[1:]])),
        ],
        "field 'views/attrs' -1: must be >= 0",
    ),
    (
        "plan views out of order",
        lambda d, p, m, x, o: [
            "--plan",
            _copy_plan(d, p, "v3.h5", lambda f: _edit(f, "views/attrs", lambda a: a[::-1])),
        ],
        "increasing order",
    ),
    (
        "plan offsets past the end",
        lambda d, p, m, x, o: [
            "--plan",
            _copy_plan(d, p, "v4.h5", lambda f: _edit(f, "views/offsets", lambda a: a + 1)),
        ],
        "field 'views/offsets'",
    ),
    (
        "plan key array too short",
        lambda d, p, m, x, o: ["--plan", _copy_plan(d, p, "k1.h5", lambda f: _edit(f, "views/key", lambda a: a[:-1]))],
        "field 'views/key'",
    ),
    (
        "plan key array too long",
        lambda d, p, m, x, o: [
            "--plan",
            _copy_plan(d, p, "k2.h5", lambda f: _edit(f, "views/key", lambda a: np.r_[a, a[:1]])),
        ],
        "field 'views/key'",
    ),
    (
        "plan key of no solution",
        lambda d, p, m, x, o: [
            "--plan",
            _copy_plan(
                d, p, "k3.h5", lambda f: _edit(f, "views/key", lambda a: np.r_[[b"nope"], a[1:]].astype(object))
            ),
        ],
        "has no stored solution",
    ),
    (
        "plan sigma2 strings",
        lambda d, p, m, x, o: ["--plan", _copy_plan(d, p, "s1.h5", lambda f: _edit(f, "views/sigma2", _strings))],
        "field 'views/sigma2' 'strings': must hold a float array",
    ),
    (
        "plan sigma2 NaN",
        lambda d, p, m, x, o: [
            "--plan",
            _copy_plan(d, p, "s2.h5", lambda f: _edit(f, "views/sigma2", lambda a: np.r_[np.nan, a[1:]])),
        ],
        "field 'views/sigma2' nan",
    ),
    (
        "plan solution sizes 10^6 x 10^6",
        lambda d, p, m, x, o: [
            "--plan",
            _copy_plan(d, p, "z1.h5", lambda f: _edit(_solution(f, 2), "sizes", lambda a: np.full(2, 10**6))),
        ],
        "must be the sizes of the view it measures, [4, 4]",
    ),
    (
        "plan schema attribute of size 10^6",
        lambda d, p, m, x, o: ["--plan", _copy_plan(d, p, "z2.h5", lambda f: _schema_size(f, 1, 10**6))],
        "is above 5,000",
    ),
    (
        "plan schema size a string",
        lambda d, p, m, x, o: ["--plan", _copy_plan(d, p, "z3.h5", lambda f: _schema_size(f, 1, "4"))],
        "schema.attributes[1].size",
    ),
    (
        "plan mechanism infinite",
        lambda d, p, m, x, o: [
            "--plan",
            _copy_plan(
                d, p, "z4.h5", lambda f: _edit(_solution(f, 1), "m0", lambda a: np.where(np.eye(len(a)) > 0, np.inf, a))
            ),
        ],
        "must be finite",
    ),
    (
        "plan mechanism of strings",
        lambda d, p, m, x, o: [
            "--plan",
            _copy_plan(
                d,
                p,
                "z5.h5",
                lambda f: _edit(_solution(f, 1), "m0", lambda a: np.full(a.shape, "x", dtype=h5py.string_dtype())),
            ),
        ],
        "must hold a float array",
    ),
    (
        "plan kind unknown",
        lambda d, p, m, x, o: [
            "--plan",
            _copy_plan(d, p, "z6.h5", lambda f: _solution(f, 1).attrs.__setitem__("kind", "sparse")),
        ],
        "must be one of 'kron'",
    ),
    (
        "plan format version garbage",
        lambda d, p, m, x, o: [
            "--plan",
            _copy_plan(d, p, "z7.h5", lambda f: f.attrs.__setitem__("format_version", "")),
        ],
        "format_version",
    ),
    (
        "plan header bytes flipped",
        lambda d, p, m, x, o: ["--plan", _bytes(d, "z8.h5", bytes([p.read_bytes()[0] ^ 0xFF]) + p.read_bytes()[1:])],
        "HDF5",
    ),
    (
        "domain not UTF-8",
        lambda d, p, m, x, o: ["--domain", _bytes(d, "d9.yaml", b"a1:\n  categories: [\xff\xfe, b, c, d]\n")],
        "UTF-8",
    ),
    ("seed negative", lambda d, p, m, x, o: ["--seed", "-1"], "--seed -1"),
    ("seed with opendp", lambda d, p, m, x, o: ["--seed", "3", "--sampler", "opendp"], "cannot be seeded"),
    ("seed not integer", lambda d, p, m, x, o: ["--seed", "x"], "--seed"),
    ("schema mismatch", lambda d, p, m, x, o: ["--schema", "synthetic:n=5,d=3"], "--schema"),
]

RECONSTRUCT = [
    ("measurements text", lambda d, p, m, x, o: ["--measurements", _csv(d, "m.txt", "x")], "HDF5"),
    ("measurements other plan", lambda d, p, m, x, o: ["--plan", str(o)], "different plan"),
    (
        "measurements truncated",
        lambda d, p, m, x, o: ["--measurements", _copy_meas(d, m, "t1.h5", lambda f: _set_y(f, lambda y: y[:-3]))],
        "one vector per measurement",
    ),
    (
        "measurements NaN",
        lambda d, p, m, x, o: [
            "--measurements",
            _copy_meas(d, m, "t2.h5", lambda f: _set_y(f, lambda y: np.where(np.arange(len(y)) == 2, np.nan, y))),
        ],
        "NaN",
    ),
    (
        "measurements lack y",
        lambda d, p, m, x, o: ["--measurements", _copy_meas(d, m, "t3.h5", lambda f: f.__delitem__("y"))],
        "field 'y': is missing",
    ),
    ("measurements of wrong kind", lambda d, p, m, x, o: ["--measurements", str(p)], "not a 'measurements'"),
    (
        "measurements string values",
        lambda d, p, m, x, o: ["--measurements", _copy_meas(d, m, "t4.h5", lambda f: _set_y(f, _strings))],
        "field 'y' 'strings': must hold a float array",
    ),
    (
        "measurements integer values",
        lambda d, p, m, x, o: [
            "--measurements",
            _copy_meas(d, m, "t5.h5", lambda f: _set_y(f, lambda y: y.astype(np.int64))),
        ],
        "field 'y' 'int64 values': must hold a float array",
    ),
    (
        "measurements infinite",
        lambda d, p, m, x, o: [
            "--measurements",
            _copy_meas(d, m, "t6.h5", lambda f: _set_y(f, lambda y: np.r_[np.inf, y[1:]])),
        ],
        "field 'y' inf: must be finite",
    ),
    (
        "measurements view index out of range",
        lambda d, p, m, x, o: [
            "--measurements",
            _copy_meas(d, m, "t7.h5", lambda f: _edit(f, "index", lambda a: a + 100)),
        ],
        "one vector per measurement",
    ),
    (
        "measurements seeded a string",
        lambda d, p, m, x, o: [
            "--measurements",
            _copy_meas(d, m, "t8.h5", lambda f: f.attrs.__setitem__("seeded", "yes")),
        ],
        "field '@seeded' 'yes': must be true or false",
    ),
    ("max answers negative", lambda d, p, m, x, o: ["--max-answers", "-1"], "--max-answers"),
]

PLAN = [
    (
        "schema yaml error",
        lambda d, p, m, x, o: ["--schema", _csv(d, "s1.yaml", "a: [1,\n b: : 2\n")],
        "is not valid YAML",
    ),
    (
        "attribute of size 100,000",
        lambda d, p, m, x, o: ["--schema", _csv(d, "s2.yaml", "big: 100000\nb: 3\n")],
        "'big'",
    ),
    ("beta nan", lambda d, p, m, x, o: ["--beta", "nan"], "--beta"),
    ("empty workload", lambda d, p, m, x, o: ["--workload", " "], "is empty"),
    ("bad neighbours", lambda d, p, m, x, o: ["--neighbours", "swap"], "--neighbours"),
    (
        "random seed negative",
        lambda d, p, m, x, o: ["--workload", "random[seed=-5]:1"],
        "the seed must be an integer >= 0",
    ),
    (
        "option target_gap=-1",
        lambda d, p, m, x, o: ["--method", "qs", "--option", "target_gap=-1"],
        "target_gap must be a number in (0, 1)",
    ),
    (
        "option max_dense_cells=0",
        lambda d, p, m, x, o: ["--method", "qs", "--option", "max_dense_cells=0"],
        "max_dense_cells must be an integer >= 1",
    ),
    ("option value not YAML", lambda d, p, m, x, o: ["--method", "qs", "--option", "x=[unclosed"], "not valid YAML"),
    (
        "schema file not UTF-8",
        lambda d, p, m, x, o: ["--schema", _bytes(d, "s3.yaml", b"a0: 4\n\xff\xfe: 3\n")],
        "UTF-8",
    ),
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


# ---- HDMM plans and measurements: the same checks as residual ones (issue 19 item 5)


@pytest.fixture(scope="module")
def hdmm_base(base):
    d, _, _, data, _ = base
    plans = {}
    for noise, extra in (
        ("gaussian", ["--workload", "marginal:1,2"]),
        ("laplace", ["--workload", "prefix:1,2", "--noise", "laplace", "--epsilon", "1"]),
    ):
        plan, meas = d / f"hdmm-{noise}.h5", d / f"hdmm-{noise}-meas.h5"
        assert (
            main(["plan", "--schema", "synthetic:n=4,d=3", "--method", "hdmm", *extra, "--out", str(plan), "-q"]) == 0
        )
        assert main(["measure", "--plan", str(plan), "--data", str(data), "--out", str(meas), "--seed", "1", "-q"]) == 0
        plans[noise] = (plan, meas)
    return d, data, plans


def _hdmm_meas(edit):
    return lambda d, p, m: ["--measurements", _copy_meas(d, m, f"hm-{abs(hash(edit))}.h5", edit)]


def _hdmm_plan(edit):
    return lambda d, p, m: ["--plan", _copy_plan(d, p, f"hp-{abs(hash(edit))}.h5", edit)]


# (name, noise, command, make(dir, plan, meas) -> args, needle)
HDMM_CASES = [
    (
        "vector NaN",
        "gaussian",
        "reconstruct",
        _hdmm_meas(lambda f: _set_y(f, lambda y: np.r_[np.nan, y[1:]])),
        "field 'y' nan: must be finite",
    ),
    (
        "vector infinite",
        "laplace",
        "reconstruct",
        _hdmm_meas(lambda f: _set_y(f, lambda y: np.r_[y[:-1], -np.inf])),
        "field 'y' -inf: must be finite",
    ),
    (
        "vector short",
        "gaussian",
        "reconstruct",
        _hdmm_meas(lambda f: _set_y(f, lambda y: y[:-1])),
        "one vector per measurement",
    ),
    (
        "vector short, offsets too",
        "laplace",
        "reconstruct",
        _hdmm_meas(lambda f: (_set_y(f, lambda y: y[:-1]), _edit(f, "offsets", lambda o: np.r_[o[:-1], o[-1] - 1]))),
        "one vector per measurement of the plan",
    ),
    (
        "another group's index",
        "gaussian",
        "reconstruct",
        _hdmm_meas(lambda f: _edit(f, "index", lambda i: i + 1)),
        "one vector per measurement of the plan",
    ),
    (
        "vector of strings",
        "gaussian",
        "reconstruct",
        _hdmm_meas(lambda f: _set_y(f, _strings)),
        "'strings': must hold a float array",
    ),
    (
        "vector of integers",
        "laplace",
        "reconstruct",
        _hdmm_meas(lambda f: _set_y(f, lambda y: y.astype(np.int64))),
        "must hold a float array",
    ),
    ("no vectors", "gaussian", "reconstruct", _hdmm_meas(lambda f: f.__delitem__("y")), "field 'y': is missing"),
    (
        "no plan digest",
        "laplace",
        "reconstruct",
        _hdmm_meas(lambda f: f.attrs.__delitem__("plan_sha256")),
        "field '@plan_sha256': is missing",
    ),
    (
        "strategy weight NaN",
        "gaussian",
        "measure",
        _hdmm_plan(lambda f: _edit(f, "groups/0/strategy/weights", lambda w: np.r_[np.nan, w[1:]])),
        "field 'groups/0/strategy/weights' nan",
    ),
    (
        "strategy weight negative",
        "gaussian",
        "measure",
        _hdmm_plan(lambda f: _edit(f, "groups/0/strategy/weights", lambda w: -w)),
        "must be > 0",
    ),
    (
        "strategy sizes 10^6",
        "gaussian",
        "measure",
        _hdmm_plan(lambda f: _edit(f, "groups/0/strategy/sizes", lambda s: np.full(len(s), 10**6))),
        "must be the schema's sizes [4, 4, 4]",
    ),
    (
        "factor of the wrong shape",
        "gaussian",
        "measure",
        _hdmm_plan(lambda f: _edit(f, "groups/0/strategy/mats/0/0", lambda m: m[:-1, :-1])),
        "must have shape (4, 4)",
    ),
    (
        "block index out of range",
        "laplace",
        "measure",
        _hdmm_plan(lambda f: _edit(f, "groups/0/strategy/index", lambda i: i + 5)),
        "field 'groups/0/strategy/index'",
    ),
    (
        "views out of range",
        "laplace",
        "measure",
        _hdmm_plan(lambda f: _edit(f, "groups/0/views", lambda v: v + 100)),
        "field 'groups/0/views'",
    ),
    (
        "unknown template",
        "laplace",
        "measure",
        _hdmm_plan(lambda f: f.attrs.__setitem__("templates", '["best"]')),
        "field '@templates'",
    ),
    (
        "epsilon a string",
        "laplace",
        "measure",
        _hdmm_plan(lambda f: f.attrs.__setitem__("budget", '{"epsilon": "1"}')),
        "field '@budget.epsilon' '1': must be a number",
    ),
]


@pytest.mark.parametrize(
    "name, noise, command, make, needle", HDMM_CASES, ids=[f"hdmm {c[1]} {c[2]}: {c[0]}" for c in HDMM_CASES]
)
def test_malformed_hdmm_files_are_one_line_exit_2_and_no_file(capsys, hdmm_base, name, noise, command, make, needle):
    d, data, plans = hdmm_base
    plan, meas = plans[noise]
    out_dir = d / f"out-hdmm-{noise}-{command}-{name.replace(' ', '-').replace('^', '')}"
    out_dir.mkdir()
    given = make(d, plan, meas)
    defaults = (
        {"--plan": str(plan), "--data": str(data)}
        if command == "measure"
        else {"--plan": str(plan), "--measurements": str(meas)}
    )
    argv = (
        given
        + [x for k, v in defaults.items() if k not in given for x in (k, v)]
        + ["--out", str(out_dir / "result.h5")]
    )
    code, err = _run(capsys, command, argv)
    assert code == 2, (name, err)
    assert len(err) == 1 and err[0].startswith("querysmasher: error:") and needle in err[0], (name, err)
    assert list(out_dir.iterdir()) == [], name


@pytest.mark.parametrize(
    "noise, field, factor",
    [
        (
            "gaussian",
            "groups/0/strategy/weights",
            1 + 9e-8,
        ),  # stated cost 1.00000009, within the verification tolerance
        (
            "gaussian",
            "groups/0/strategy/mats/0/0",
            1 + 9e-10,
        ),  # unit diagonals 1 + 9e-10: stated cost 1, applied 1 + 9e-10
        ("laplace", "groups/0/strategy/weights", 1 + 9e-8),  # stated sensitivity 1.00000009
        ("laplace", "groups/0/strategy/mats/0/0", 1 + 9e-10),  # columns of L1 norm 1 + 9e-10: stated sensitivity 1
    ],
)
def test_an_hdmm_strategy_above_cost_1_within_the_tolerance_is_never_released_above_its_budget(
    capsys, hdmm_base, noise, field, factor
):
    """The file check accepts a strategy whose cost is within 1e-7 of 1 (rounding across BLAS
    builds); measure calibrates the noise to the cost recomputed from the operator it applies, so
    the release spends at most its budget (it spent 1.00000009 for weights scaled by 1 + 9e-8)."""
    from filefuzz import hdmm_applied_cost

    from querysmasher.hdmm.files import load_hdmm_plan

    d, data, plans = hdmm_base
    tag = f"{noise}-{field.replace('/', '-')}"
    bad = _copy_plan(d, plans[noise][0], f"scaled-{tag}.h5", lambda f: _edit(f, field, lambda a: a * factor))
    loaded = load_hdmm_plan(bad)
    strategy = loaded.groups[0].strategy
    assert (
        strategy.applied_sensitivity() if noise == "laplace" else strategy.applied_cost()
    ) > 1 + factor / 2 - 0.5  # the edit really costs more
    out = d / f"m-scaled-{tag}.h5"
    code, err = _run(capsys, "measure", ["--plan", bad, "--data", str(data), "--out", str(out), "--seed", "3"])
    assert code == 0, err
    with h5py.File(out, "r") as f:
        budget = json.loads(f.attrs["budget"])
    assert hdmm_applied_cost(loaded) <= budget["epsilon" if noise == "laplace" else "beta"]
