"""The project's one error type for bad user input.

Every message names the offending field and value, so the CLI can print it as one line and exit 2.
"""

from __future__ import annotations

__all__ = ["InputError"]


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
