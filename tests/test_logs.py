"""Logging: the CLI's -v/-q levels, progress bars only on a terminal, and the workflow's log files
receiving the library's lines (scripts wrap their work in ``pipeline.steps.logged(...)``, which
configures the logger for the block)."""

import io
import logging
import os

import pytest

from querysmasher import logs
from querysmasher.accounting import Budget
from querysmasher.pipeline import steps
from querysmasher.planning import make_plan

PLAN = ["plan", "--schema", "synthetic:n=4,d=3", "--workload", "prefix:1,2", "--method", "qs"]


@pytest.mark.parametrize(
    "flags, stderr_has, stderr_lacks",
    [
        ([], [], ["solved"]),
        (["-v"], ["querysmasher: solved", "gap", "querysmasher: allocated beta"], ["iteration"]),
        (["-q"], [], ["querysmasher:"]),
    ],
)
def test_cli_levels(cli, flags, stderr_has, stderr_lacks):
    r = cli(*PLAN, *flags)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("qs on prefix:1,2")  # the result is printed at every level
    for s in stderr_has:
        assert s in r.stderr
    for s in stderr_lacks:
        assert s not in r.stderr
    assert "\r" not in r.stderr  # stderr is not a terminal here: no progress bar


def test_verbose_and_quiet_exclude_each_other(cli):
    r = cli(*PLAN, "-v", "-q")
    assert r.returncode == 2 and "not allowed with" in r.stderr


def test_level_from_flags():
    assert [logs.level_from_flags(v, q) for v, q in [(0, False), (1, False), (2, False), (0, True)]] == [
        logging.WARNING,
        logging.INFO,
        logging.DEBUG,
        logging.ERROR,
    ]


def test_progress_is_plain_unless_asked():
    import contextlib

    items = [1, 2]
    assert logs.progress(items, desc="x") is items
    bar = io.StringIO()
    with contextlib.redirect_stderr(bar), logs.configured(progress=True):
        assert list(logs.progress(items, desc="solving")) == items
    assert "solving:   0%" in bar.getvalue() and "0/2" in bar.getvalue()
    assert logs.progress(items, desc="x") is items  # off again after the block


def test_script_log_file_receives_library_lines(tmp_path):
    log_file = tmp_path / "logs" / "allocate.log"
    with steps.logged(log_file):
        make_plan("synthetic:n=3,d=2", "prefix:1", "rp", Budget.from_beta(1.0))
    text = log_file.read_text()
    assert "querysmasher: decomposed prefix:1" in text and "querysmasher: allocated beta 1" in text
    assert logging.getLogger("querysmasher").handlers == []  # removed on exit


def test_configure_path_appends_with_timestamps(tmp_path):
    path = tmp_path / "run.log"
    logs.configure(path, "DEBUG")
    try:
        logging.getLogger("querysmasher.x").debug("phase %s", "one")
    finally:
        logs.unconfigure()
    line = path.read_text().strip()
    assert line.endswith("querysmasher: phase one") and line[2] == ":"  # HH:MM:SS prefix
    assert os.path.getsize(path) > 0
