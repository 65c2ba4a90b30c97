"""Issue 40: one output guard for every command, nothing spent that cannot be answered, the sampler
recorded, Ctrl-C as one line. Every refusal is one line, exit 2 (130 for Ctrl-C), nothing written,
and where it is promised, no record read."""

import json
import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import yaml

import querysmasher.data
from querysmasher.cli import main


def _one_line_error(capsys, needle=""):
    err = capsys.readouterr().err.strip().splitlines()
    err = [e for e in err if not e.startswith("querysmasher: warning:")]
    assert len(err) == 1 and err[0].startswith("querysmasher: ") and needle in err[0], err
    return err[0]


def _no_records(monkeypatch):
    monkeypatch.setattr(querysmasher.data, "load_records", lambda *a, **k: pytest.fail("records were read"))


@pytest.fixture()
def made(tmp_path):
    """Records over [3]^3, and for each plan kind (rp, qsplus, hdmm) a plan, its measurements and answers."""
    rng = np.random.default_rng(0)
    pd.DataFrame(rng.integers(0, 3, (80, 3)), columns=["a0", "a1", "a2"]).to_csv(tmp_path / "d.csv", index=False)
    out = {}
    for method, workload in (("rp", "prefix:1,2"), ("qsplus", "affine:2"), ("hdmm", "prefix:1,2")):
        plan, meas = tmp_path / f"{method}.h5", tmp_path / f"{method}-m.h5"
        assert (
            main(
                [
                    "plan",
                    "--schema",
                    "synthetic:n=3,d=3",
                    "--workload",
                    workload,
                    "--method",
                    method,
                    "--out",
                    str(plan),
                    "-q",
                ]
            )
            == 0
        )
        assert (
            main(
                [
                    "measure",
                    "--plan",
                    str(plan),
                    "--data",
                    str(tmp_path / "d.csv"),
                    "--out",
                    str(meas),
                    "--seed",
                    "1",
                    "-q",
                ]
            )
            == 0
        )
        out[method] = (plan, meas)
    return tmp_path, out


# ------------------------------------------------------------------------------ one output guard


def test_csv_into_a_non_empty_folder_is_refused_and_leaves_it_untouched(made, capsys):
    d, plans = made
    plan, meas = plans["rp"]
    published = d / "published"
    published.mkdir()
    (published / "a0.csv").write_text("a0,estimate,std_error\n0,1,1\n")
    (published / "tables.json").write_text("{}")
    before = {p.name: p.read_bytes() for p in published.iterdir()}
    assert (
        main(
            [
                "reconstruct",
                "--plan",
                str(plan),
                "--measurements",
                str(meas),
                "--out",
                str(d / "a.h5"),
                "--csv",
                str(published),
            ]
        )
        == 2
    )
    _one_line_error(capsys, "not an empty folder")
    assert {p.name: p.read_bytes() for p in published.iterdir()} == before
    assert not (d / "a.h5").exists()


@pytest.mark.parametrize("method", ["rp", "qsplus"])
def test_csv_is_a_new_folder_published_whole(made, method):
    d, plans = made
    plan, meas = plans[method]
    assert (
        main(
            [
                "reconstruct",
                "--plan",
                str(plan),
                "--measurements",
                str(meas),
                "--out",
                str(d / "a.h5"),
                "--csv",
                str(d / "t"),
            ]
        )
        == 0
    )
    assert (d / "t" / "tables.json").is_file()
    assert not [p for p in d.iterdir() if p.name.startswith(".t.")]  # no temporary folder or lock left


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="no /dev/null")
def test_a_device_as_out_is_refused_and_not_replaced(made, capsys, monkeypatch):
    d, plans = made
    plan, meas = plans["rp"]
    _no_records(monkeypatch)
    assert main(["measure", "--plan", str(plan), "--data", str(d / "d.csv"), "--out", "/dev/null", "--seed", "1"]) == 2
    _one_line_error(capsys, "not a regular file")
    assert main(["reconstruct", "--plan", str(plan), "--measurements", str(meas), "--out", "/dev/null"]) == 2
    _one_line_error(capsys, "not a regular file")
    assert Path("/dev/null").is_char_device()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_a_fifo_as_out_is_refused_before_records_are_read(made, capsys, monkeypatch):
    d, plans = made
    os.mkfifo(d / "fifo")
    _no_records(monkeypatch)
    assert (
        main(
            [
                "measure",
                "--plan",
                str(plans["rp"][0]),
                "--data",
                str(d / "d.csv"),
                "--out",
                str(d / "fifo"),
                "--seed",
                "1",
            ]
        )
        == 2
    )
    _one_line_error(capsys, "not a regular file")
    assert (d / "fifo").is_fifo()


@pytest.mark.parametrize("command", ["measure", "release"])
def test_a_symlink_as_out_is_refused_before_records_are_read(made, capsys, monkeypatch, command):
    d, plans = made
    target = d / "elsewhere"
    (d / "link").symlink_to(target)  # dangling: whatever it points to, an output is never a link
    _no_records(monkeypatch)
    if command == "measure":
        args = [
            "measure",
            "--plan",
            str(plans["rp"][0]),
            "--data",
            str(d / "d.csv"),
            "--out",
            str(d / "link"),
            "--seed",
            "1",
        ]
    else:
        (d / "dom.yaml").write_text("a0: 3\na1: 3\na2: 3\n")
        spec = {
            "data": str(d / "d.csv"),
            "domain": str(d / "dom.yaml"),
            "tables": [{"marginal": ["a0"]}],
            "budget": {"rho": 0.5},
        }
        (d / "s.yaml").write_text(yaml.safe_dump(spec))
        args = ["release", str(d / "s.yaml"), "--out", str(d / "link")]
    assert main(args) == 2
    _one_line_error(capsys, "symbolic link")
    assert (d / "link").is_symlink() and not target.exists()


@pytest.mark.parametrize("name", ["estimate", "std_error", "count"])
def test_an_attribute_named_like_a_table_column_is_refused_before_records_are_read(tmp_path, capsys, monkeypatch, name):
    pd.DataFrame({"age": [0, 1, 2], name: [0, 1, 1]}).to_csv(tmp_path / "d.csv", index=False)
    (tmp_path / "dom.yaml").write_text(f"age: 3\n{name}: 2\n")
    spec = {
        "data": "d.csv",
        "domain": "dom.yaml",
        "tables": [{"marginal": ["age", name]}],
        "budget": {"rho": 0.5},
        "postprocess": True,
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    _no_records(monkeypatch)
    assert main(["release", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out")]) == 2
    _one_line_error(capsys, f"attribute '{name}'")
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------ nothing spent in vain


def _edited(src: Path, dst: Path, edit) -> Path:
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        edit(f)
    return dst


def _zero_factors(f):
    for k in f["factors"]:
        f["factors"][k][...] = 0.0


def _rank_deficient_factors(f):
    for k in f["factors"]:  # X = share F F^T: two columns of F kept, X of rank 2 (its cost can only fall)
        x = f["factors"][k][()]
        x[:, 2:] = 0.0
        f["factors"][k][...] = x


@pytest.mark.parametrize("edit", [_zero_factors, _rank_deficient_factors], ids=["zeroed", "rank-deficient"])
def test_a_qsplus_plan_that_cannot_answer_its_workload_is_refused_before_records_are_read(
    made, capsys, monkeypatch, edit
):
    d, plans = made
    bad = _edited(plans["qsplus"][0], d / "bad.h5", edit)
    _no_records(monkeypatch)
    out = d / "m.h5"
    assert main(["measure", "--plan", str(bad), "--data", str(d / "d.csv"), "--out", str(out), "--seed", "1"]) == 2
    _one_line_error(capsys, "cannot be given")
    assert not out.exists()


def test_the_plans_of_the_fixture_are_measurable(made):
    """The check above refuses edited plans only: the planners' own plans pass it."""
    from querysmasher.measure import check_plan
    from querysmasher.planfiles import load_any_plan

    for plan, _ in made[1].values():
        assert check_plan(load_any_plan(plan)) > 0


@pytest.mark.parametrize("method", ["rp", "qsplus", "hdmm"])
def test_huge_measurements_give_one_line_not_nan_answers(made, capsys, method):
    d, plans = made
    plan, meas = plans[method]

    def huge(f):
        def scale(name, obj):
            if isinstance(obj, h5py.Dataset) and obj.dtype.kind == "f" and name not in ("budget",):
                # finite, as the reader checks; their differences and sums are not
                obj[...] = np.where(np.arange(obj.size).reshape(obj.shape) % 2 == 0, 1.7e308, -1.7e308)

        f.visititems(scale)

    bad = _edited(meas, d / "huge.h5", huge)
    out = d / "a.h5"
    assert main(["reconstruct", "--plan", str(plan), "--measurements", str(bad), "--out", str(out)]) == 2
    _one_line_error(capsys, "not finite")
    assert not out.exists()


def test_a_noise_scale_the_sampler_cannot_draw_is_refused_before_records_are_read(made, capsys, monkeypatch):
    d, plans = made

    def overflow(f):
        s2 = f["views/sigma2"][()]
        s2[np.isfinite(s2)] = 1.79e308
        f["views/sigma2"][...] = s2

    bad = _edited(plans["rp"][0], d / "bad.h5", overflow)
    _no_records(monkeypatch)
    assert main(["measure", "--plan", str(bad), "--data", str(d / "d.csv"), "--out", str(d / "m.h5")]) == 2
    _one_line_error(capsys, "sigma2")
    assert not (d / "m.h5").exists()


# --------------------------------------------------------------------------- records of the work


@pytest.mark.parametrize("method", ["rp", "qsplus", "hdmm"])
@pytest.mark.parametrize("sampler", ["numpy", "discrete", "opendp"])
def test_every_measurements_file_records_its_sampler(made, method, sampler):
    d, plans = made
    out = d / f"{method}-{sampler}.h5"
    args = [
        "measure",
        "--plan",
        str(plans[method][0]),
        "--data",
        str(d / "d.csv"),
        "--out",
        str(out),
        "--sampler",
        sampler,
        "-q",
    ]
    assert main(args) == 0
    with h5py.File(out) as f:
        assert f.attrs["sampler"] == sampler


def test_ctrl_c_is_one_line_exit_130_and_leaves_nothing(made, capsys, monkeypatch):
    d, plans = made
    import querysmasher.measure

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(querysmasher.measure, "measure_plan_to_file", interrupted)
    before = set(os.listdir(d))
    assert (
        main(
            [
                "measure",
                "--plan",
                str(plans["rp"][0]),
                "--data",
                str(d / "d.csv"),
                "--out",
                str(d / "m.h5"),
                "--seed",
                "1",
            ]
        )
        == 130
    )
    assert _one_line_error(capsys, "interrupted")
    assert set(os.listdir(d)) == before


def test_release_json_records_the_sampler(tmp_path):
    pd.DataFrame({"a": [0, 1, 2, 1], "b": [1, 0, 1, 1]}).to_csv(tmp_path / "d.csv", index=False)
    (tmp_path / "dom.yaml").write_text("a: 3\nb: 2\n")
    spec = {"data": "d.csv", "domain": "dom.yaml", "tables": [{"marginal": ["a", "b"]}], "budget": {"rho": 0.5}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    assert main(["release", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "-q"]) == 0
    assert json.loads((tmp_path / "out" / "release.json").read_text())["sampler"] == "discrete"


def _rank_deficient_residual(f):
    """Each one-attribute (kron) mechanism made singular along a cell its centred workload needs
    (a row and column of its PSD factor zeroed: still PSD, its cost can only fall)."""

    def edit(name, obj):
        if isinstance(obj, h5py.Group) and obj.attrs.get("kind") == "kron" and "m0" in obj and obj["m0"].shape[0] > 1:
            x = obj["m0"][()]
            x[0, :] = x[:, 0] = 0.0
            obj["m0"][...] = x

    f.visititems(edit)


def test_a_residual_plan_that_cannot_answer_its_workload_is_refused_before_records_are_read(
    tmp_path, capsys, monkeypatch
):
    pd.DataFrame(np.random.default_rng(0).integers(0, 3, (40, 2)), columns=["a0", "a1"]).to_csv(
        tmp_path / "d.csv", index=False
    )
    plan = tmp_path / "p.h5"
    assert (
        main(
            [
                "plan",
                "--schema",
                "synthetic:n=3,d=2",
                "--workload",
                "prefix:1",
                "--method",
                "qs",
                "--out",
                str(plan),
                "-q",
            ]
        )
        == 0
    )
    bad = _edited(plan, tmp_path / "bad.h5", _rank_deficient_residual)
    _no_records(monkeypatch)
    assert (
        main(
            [
                "measure",
                "--plan",
                str(bad),
                "--data",
                str(tmp_path / "d.csv"),
                "--out",
                str(tmp_path / "m.h5"),
                "--seed",
                "1",
            ]
        )
        == 2
    )
    _one_line_error(capsys, "cannot be given")
    assert not (tmp_path / "m.h5").exists()


@pytest.mark.parametrize("sampler", ["discrete", "opendp", "numpy"])
def test_a_release_saved_from_the_python_api_records_its_sampler(tmp_path, sampler):
    """In-memory residual measurements carry their sampler to the file they are saved as (they were
    saved as 'numpy' whichever sampler drew the noise)."""
    import querysmasher as qs

    plan = qs.make_plan("synthetic:n=3,d=2", "prefix:1", method="rp", rho=0.5)
    records = pd.DataFrame(np.random.default_rng(0).integers(0, 3, (50, 2)), columns=plan.schema.names)
    release = plan.measure(records, sampler=sampler)
    qs.save(plan, tmp_path / "p.h5")
    qs.save(release, tmp_path / "m.h5")
    with h5py.File(tmp_path / "m.h5") as f:
        assert f.attrs["sampler"] == sampler
    assert qs.load(tmp_path / "m.h5", plan=tmp_path / "p.h5").sampler == sampler
