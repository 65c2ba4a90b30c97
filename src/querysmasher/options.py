"""Method options: what each option of a method accepts, declared once per method, checked by one function.

A method class declares ``option_specs``, a tuple of :class:`Option` (name, kind, range, what it
does). Its constructor checks what it is given with :func:`check_options`, so the CLI's
``--option``, the API's ``options`` and the workflow's ``solve: options`` are refused alike, with
one :class:`~querysmasher.errors.InputError` naming the option and the value, before any work.
``docs/solvers.md`` lists every built-in option's range (:meth:`Option.accepts`; a test keeps the
two in step). A plugin may declare ``option_specs`` too; without them its factory checks its own.

Integers may be written as integral floats (YAML reads ``1e6`` as a float) and are returned as
``int``; every range is closed unless the text says otherwise, and integers are at most
:data:`MAX_INT` (plan files store them as 64-bit integers).

>>> restarts = Option("restarts", "int", "runs per template", low=1, high=100)
>>> check_options("hdmm", (restarts,), {"restarts": 3.0})
{'restarts': 3}
>>> check_options("hdmm", (restarts,), {"restarts": 1e9})
Traceback (most recent call last):
    ...
querysmasher.errors.InputError: hdmm restarts 1000000000.0: must be an integer in [1, 100]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral, Real

from .errors import InputError

__all__ = ["Option", "check_options", "MAX_INT", "OPTION_KINDS"]

MAX_INT = 2**63 - 1
OPTION_KINDS: tuple[str, ...] = ("int", "number", "bool", "choice", "choices")


@dataclass(frozen=True)
class Option:
    """One option: ``kind`` is ``int``, ``number`` (a finite float), ``bool``, ``choice`` (one of
    ``choices``) or ``choices`` (a non-empty list of distinct ``choices``); ``low``/``high`` bound
    numbers (``open_low``/``open_high``: the bound itself is excluded; ``high`` None: any finite
    number, or up to :data:`MAX_INT`); ``none``: null is accepted too (the method's automatic choice)."""

    name: str
    kind: str
    doc: str
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    choices: tuple[str, ...] = ()
    none: bool = False

    def __post_init__(self) -> None:
        if self.kind not in OPTION_KINDS:
            raise ValueError(f"option kind {self.kind!r} is not one of {OPTION_KINDS}")

    def accepts(self) -> str:
        """What the option accepts, as the error messages and docs/solvers.md say it.

        >>> Option("target_gap", "number", "", low=0, high=1, open_low=True, open_high=True).accepts()
        'a number in (0, 1)'
        >>> Option("max_view_cells", "int", "", low=1, none=True).accepts()
        'an integer >= 1 (at most 2^63 - 1), or null'
        """
        if self.kind in ("int", "number"):
            what = "an integer" if self.kind == "int" else "a finite number" if self.high is None else "a number"
            low, high = _fmt(self.low), _fmt(self.high)
            if self.low is not None and self.high is not None:
                text = f"{what} in {'(' if self.open_low else '['}{low}, {high}{')' if self.open_high else ']'}"
            elif self.low is not None:
                text = f"{what} {'>' if self.open_low else '>='} {low}"
                if self.kind == "int":
                    text += " (at most 2^63 - 1)"
            elif self.high is not None:
                text = f"{what} {'<' if self.open_high else '<='} {high}"
            else:
                text = what
        elif self.kind == "bool":
            text = "true or false"
        elif self.kind == "choice":
            text = "one of " + ", ".join(self.choices)
        else:
            text = "a non-empty list of distinct names from " + ", ".join(self.choices)
        return text + (", or null" if self.none else "")

    def check(self, value, field: str):
        """``value`` as the method takes it (integers as ``int``), or an InputError naming ``field``."""
        if value is None and self.none:
            return None
        if self.kind == "bool":
            ok = isinstance(value, bool)
        elif self.kind == "choice":
            ok = isinstance(value, str) and value in self.choices
        elif self.kind == "choices":
            ok = isinstance(value, (list, tuple)) and len(value) > 0
            unknown = [v for v in value if not (isinstance(v, str) and v in self.choices)] if ok else []
            if unknown:  # name the one that is wrong
                raise InputError(field, unknown[0], f"is not one of {', '.join(self.choices)}")
            ok = ok and len(set(value)) == len(value)
            value = list(value) if ok else value
        else:
            ok, value = self._number(value)
        if not ok:
            raise InputError(field, value, f"must be {self.accepts()}")
        return value

    def _number(self, value) -> tuple[bool, object]:
        """(whether ``value`` is in range, the value as the kind has it); Python ints are compared
        exactly (a 400-digit one has no float)."""
        if isinstance(value, bool) or not isinstance(value, Real):
            return False, value
        if not isinstance(value, Integral):
            if not math.isfinite(value) or (self.kind == "int" and not float(value).is_integer()):
                return False, value
        elif self.kind == "number" and abs(value) > 2**1023:  # beyond every finite float
            return False, value
        if not self._in_range(value):
            return False, value
        return True, int(value) if self.kind == "int" else float(value)

    def _in_range(self, x: Real) -> bool:
        high = MAX_INT if self.high is None and self.kind == "int" else self.high
        above = self.low is None or (x > self.low if self.open_low else x >= self.low)
        below = high is None or (x < high if self.open_high else x <= high)
        return above and below


def _fmt(bound: float | None) -> str:
    if bound is None:
        return ""
    return f"{bound:,}" if float(bound).is_integer() and abs(bound) >= 10_000 else f"{bound:g}"


def check_options(method: str, specs: Sequence[Option], options: Mapping, prefix: str | None = None) -> dict:
    """``options`` checked against ``specs`` (the method's declared options): the values as the
    method takes them, or one InputError naming the first bad option (``prefix`` + its name, by
    default ``"{method} "``) with its value and the range it must be in."""
    by_name = {s.name: s for s in specs}
    prefix = f"{method} " if prefix is None else prefix
    out = {}
    for name, value in options.items():
        if name not in by_name:
            known = ", ".join(by_name) or "none"
            raise InputError(f"{method} option", name, f"is not an option of {method} (its options: {known})")
        out[name] = by_name[name].check(value, prefix + name)
    return out
