"""The project's one error type for bad user input.

Every message names the offending field and value, so the CLI can print it as one line and exit 2.
"""

from __future__ import annotations

__all__ = ["InputError"]


class InputError(ValueError):
    """Bad user input (schema, workload, budget, data, config).

    >>> str(InputError("workload", "pre:1", "unknown family 'pre'"))
    "workload 'pre:1': unknown family 'pre'"
    """

    def __init__(self, field: str, value: object, reason: str):
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field} {value!r}: {reason}")
