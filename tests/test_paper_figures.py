"""src/querysmasher/paper_figures.csv (package data) is a faithful transcription of every result table of the paper.

The paper's Markdown lives beside the project (``../shared/papers/querysmasher-divide-and-conquer.md``,
or ``$QUERYSMASHER_PAPER_MD``); the comparison skips only when that file is absent.
"""

import os
import re
from pathlib import Path

import pytest

from querysmasher.paper import PAPER_FIGURES_FILE, load_paper_figures

REPO = Path(__file__).resolve().parents[1]
PAPER_MD = Path(
    os.environ.get("QUERYSMASHER_PAPER_MD", REPO.parent / "shared" / "papers" / "querysmasher-divide-and-conquer.md")
)
TABLE_SHAPES = {2: (12, 5), 3: (6, 5), 4: (35, 5), 5: (15, 4), 6: (20, 6), 7: (19, 6)}  # rows, cells per row


def _cell(text: str) -> str:
    """The paper's cell text in the data file's spelling."""
    text = text.strip()
    for a, b in (("${<}$", "<"), ("∗", "*"), ("$\\leq$", "<=")):
        text = text.replace(a, b)
    return text.replace("$", "")


def _md_tables(path: Path) -> dict[int, list[dict[str, str]]]:
    """Every 'Table N.' of the Markdown (N >= 2) as a list of rows {header: cell}, blanks filled
    from the row above (the paper leaves repeated dataset / n cells empty)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    tables: dict[int, list[dict[str, str]]] = {}
    for i, line in enumerate(lines):
        m = re.match(r"^Table (\d+)\. ", line)
        if not m or int(m.group(1)) < 2:
            continue
        block = []
        for nxt in lines[i + 1 :]:
            if nxt.startswith("|"):
                block.append([_cell(c) for c in nxt.strip()[1:-1].split("|")])
            elif block:
                break
        rows = [r for r in block if any(c.strip("- ") for c in r)]
        if not rows[0][0]:  # Tables 6-7: a spanning header row above the real one
            rows = rows[1:]
        header, prev, out = rows[0], None, []
        for r in rows[1:]:
            rec = dict(zip(header, r))
            for key in header[:2]:
                if not rec[key]:
                    rec[key] = prev[key]
            out.append(rec)
            prev = rec
        tables[int(m.group(1))] = out
    return tables


def _key(table: int, rec: dict[str, str]):
    if table in (2, 3):
        return rec["Dataset"].lower(), None, None, rec["Workload"]
    if table == 4:
        return "synthetic", int(rec["n"]), 40, rec["Workload"]
    return "synthetic", int(rec["n"]), int(rec["d"]), ""


@pytest.fixture(scope="module")
def paper_tables():
    if not PAPER_MD.is_file():
        pytest.skip(f"{PAPER_MD} is absent")
    return _md_tables(PAPER_MD)


def test_the_paper_has_the_tables_we_transcribed(paper_tables):
    assert sorted(paper_tables) == sorted(TABLE_SHAPES)
    for t, (nrows, ncells) in TABLE_SHAPES.items():
        assert len(paper_tables[t]) == nrows and all(len(r) == 2 + ncells for r in paper_tables[t]), t


def test_every_cell_matches_the_paper(paper_tables):
    figs = load_paper_figures()
    seen = set()
    for t, rows in paper_tables.items():
        for rec in rows:
            dataset, n, d, workload = _key(t, rec)
            for column in list(rec)[2:]:  # the first two columns are the row's keys
                f = figs.get(t, column.replace(".", ""), dataset=dataset, n=n, d=d, workload=workload)
                assert f is not None, (t, column, dataset, n, d, workload)
                assert f.printed == rec[column], (t, column, dataset, n, d, workload, f.printed, rec[column])
                seen.add(f)
    assert seen == set(figs.figures)  # nothing in the data file that is not in the paper


def test_values_flags_and_units_follow_the_printed_text():
    figs = load_paper_figures(PAPER_FIGURES_FILE)
    assert sorted({f.table for f in figs.figures}) == [2, 3, 4, 5, 6, 7]
    for f in figs.figures:
        if f.printed == "NI":
            assert f.value is None and f.flag == "NI"
            continue
        assert f.value == float(re.sub(r"[^0-9.]", "", f.printed)), f
        assert f.flag == ("*" if f.printed.endswith("*") else "<" if f.printed.startswith("<") else "")
        assert f.unit == (
            {"Mem": "GB"}.get(f.column) or ("s" if f.column in ("Decomp", "Solve", "Assem", "Total") else "")
        )


@pytest.mark.parametrize(
    "table, column, keys, printed",
    [  # read off the paper by eye, as a check on the parser above
        (2, "QS", dict(dataset="adult", workload="3-way"), "47.055"),
        (2, "#Queries", dict(dataset="loans", workload="<=3-way"), "14,659,028"),
        (3, "RP+", dict(dataset="cps", workload="abs_diff"), "10.476"),
        (4, "HDMM", dict(n=50, workload="range"), "178.65*"),
        (4, "WFF", dict(n=40, workload="random"), "490.66"),
        (5, "QS", dict(n=30, d=50), "454.37"),
        (6, "Mem", dict(n=40, d=50), "2 GB"),
        (6, "Decomp", dict(n=10, d=10), "<0.1s"),
        (7, "Solve", dict(n=40, d=40), "3031.6s"),
        (7, "Mem", dict(n=10, d=10), "0.7 GB"),
    ],
)
def test_spot_checks(table, column, keys, printed):
    assert load_paper_figures().get(table, column, **keys).printed == printed
