"""The paper's published figures (Tables 2-7 of the QuerySmasher paper), read from one data file.

``paper_figures.csv`` (package data, beside this module) holds every cell of the paper's result tables,
one row per cell, transcribed from the paper (``tests/test_paper_figures.py`` checks it against the paper's Markdown):
``table, dataset, n, d, workload, column, printed, value, unit, flag`` where ``printed`` is the
cell as printed (``<`` for the paper's "${<}$", ``*`` for its "∗"), ``value`` its number (the bound
for ``<`` cells), ``unit`` ``s`` or ``GB`` for Tables 6-7, and ``flag`` one of ``""``, ``NI`` (not
implemented), ``*`` (error computable, release not runnable) or ``<`` (an upper bound).

>>> figs = load_paper_figures()
>>> figs.get(4, "QS", n=10, workload="affine").value
28.25
>>> figs.get(2, "HDMM", dataset="adult", workload="3-way").printed
'60.025'
>>> figs.get(4, "HDMM", n=10, workload="circular").flag
'NI'
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError

__all__ = ["PaperFigure", "PaperFigures", "PAPER_FIGURES_FILE", "METHOD_COLUMNS", "load_paper_figures"]

PAPER_FIGURES_FILE = Path(__file__).resolve().parent / "paper_figures.csv"  # installed with the package
FIELDS = ("table", "dataset", "n", "d", "workload", "column", "printed", "value", "unit", "flag")
# our method name -> the paper's column header
METHOD_COLUMNS: dict[str, str] = {"rpplus": "RP+", "hdmm": "HDMM", "wff": "WFF", "qs": "QS"}


@dataclass(frozen=True)
class PaperFigure:
    """One cell of one of the paper's tables."""

    table: int
    dataset: str  # cps | adult | loans | synthetic
    n: int | None
    d: int | None
    workload: str  # the paper's row label ("2-way", "affine", "abs_diff"); "" in Tables 5-7
    column: str  # the paper's column header ("QS", "#Queries", "Solve", ...)
    printed: str
    value: float | None
    unit: str
    flag: str


class PaperFigures:
    """All cells, looked up by table, column and row keys."""

    def __init__(self, figures: list[PaperFigure]):
        self.figures = tuple(figures)
        self._index = {(f.table, f.column, f.dataset, f.n, f.d, f.workload): f for f in figures}
        if len(self._index) != len(self.figures):
            raise InputError("paper figures", "rows", "two rows have the same table, column and row keys")

    def __len__(self) -> int:
        return len(self.figures)

    def get(
        self,
        table: int,
        column: str,
        *,
        dataset: str = "synthetic",
        n: int | None = None,
        d: int | None = None,
        workload: str = "",
    ) -> PaperFigure | None:
        """The cell, or None when the paper has no such cell. Table 4 rows have d = 40."""
        if table == 4 and d is None:
            d = 40
        return self._index.get((table, METHOD_COLUMNS.get(column, column), dataset, n, d, workload))

    def table(self, table: int) -> list[PaperFigure]:
        return [f for f in self.figures if f.table == table]


def _int_or_none(text: str) -> int | None:
    return int(text) if text.strip() else None


def load_paper_figures(path: str | Path = PAPER_FIGURES_FILE) -> PaperFigures:
    """Read the paper's figures (one clear error naming the file and row when malformed)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("paper figures file", str(path), "does not exist")
    out = []
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if tuple(reader.fieldnames or ()) != FIELDS:
            raise InputError("paper figures file", str(path), f"header must be {','.join(FIELDS)}")
        for i, row in enumerate(reader, start=2):
            try:
                out.append(
                    PaperFigure(
                        int(row["table"]),
                        row["dataset"],
                        _int_or_none(row["n"]),
                        _int_or_none(row["d"]),
                        row["workload"],
                        row["column"],
                        row["printed"],
                        float(row["value"]) if row["value"] else None,
                        row["unit"],
                        row["flag"],
                    )
                )
            except ValueError as exc:
                raise InputError(f"paper figures file {path} line {i}", row, str(exc)) from None
    return PaperFigures(out)
