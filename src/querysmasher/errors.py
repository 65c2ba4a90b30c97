"""The project's one error type for bad user input.

Every message names the offending field and value, so the CLI can print it as one line and exit 2.
"""

from __future__ import annotations

__all__ = ["InputError", "require_finite"]


class InputError(ValueError):
    r"""Bad user input (schema, workload, budget, data, config).

    >>> str(InputError("workload", "pre:1", "unknown family 'pre'"))
    "workload 'pre:1': unknown family 'pre'"
    >>> str(InputError("config", "c.yaml", "line 1\n  line 2"))
    "config 'c.yaml': line 1 line 2"
    """

    def __init__(self, field: str, value: object, reason: str):
        self.field = field
        self.value = value
        self.reason = reason
        # One line whatever the parts hold (e.g. a YAML parser's multi-line message).
        super().__init__(" ".join(f"{field} {value!r}: {reason}".split()))


def require_finite(values, field: str, what: str):
    """``values`` (an array) when every entry is finite; otherwise an InputError naming ``field``
    and how many entries are not, never a value (measurements and answers derive from records).

    >>> require_finite([1.0, float("inf")], "answers", "view (a)")
    Traceback (most recent call last):
    ...
    querysmasher.errors.InputError: answers 'view (a)': 1 of 2 values are not finite (too large for floating point): nothing was written
    """  # noqa: E501  (a doctest's expected output is one line)
    import numpy as np  # only where an array is checked: the CLI's import time

    arr = np.asarray(values, dtype=float)
    bad = int(np.count_nonzero(~np.isfinite(arr)))
    if bad:
        raise InputError(
            field,
            what,
            f"{bad} of {arr.size} values are not finite (too large for floating point): nothing was written",
        )
    return values
