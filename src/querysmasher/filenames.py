"""File names made from names read from files (attributes, families): never a path, never shared.

Attribute names come from domain files a custodian may have received from someone else; the
tables of a release are written under file names built from them. :func:`table_file_name` maps
any names to one file name that

* is a single path component: no ``/`` or ``\\``, never ``.`` or ``..``, never hidden (no leading
  ``.``), no leading ``~`` or ``-``, no control character, at most :data:`MAX_NAME_BYTES` bytes;
* is injective: two different tuples of names never give the same file name, and no tuple gives
  the name of the empty view (``total``). Characters outside ``[A-Za-z0-9._-]`` are written
  ``%XX`` (their UTF-8 bytes, ``%`` itself included), an ``_`` that would touch the ``__``
  separator is escaped, so the parts can be read back; an over-long name keeps its start and ends
  with a hash of the whole.

>>> table_file_name(("age", "sex")), table_file_name(("income>50K",)), table_file_name(())
('age__sex', 'income%3E50K', 'total')
>>> table_file_name(("a", "b__c")) != table_file_name(("a__b", "c"))
True
>>> table_file_name(("..",)), table_file_name(("/etc/passwd",)), table_file_name(("total",))
('%2E.', '%2Fetc%2Fpasswd', '%74otal')
"""

from __future__ import annotations

import hashlib
import string

__all__ = ["name_component", "table_file_name", "distinct_file_names", "MAX_NAME_BYTES", "SEPARATOR", "EMPTY_VIEW"]

SEPARATOR = "__"
EMPTY_VIEW = "total"
MAX_NAME_BYTES = 180  # leaves room for a suffix (".csv") and a temporary prefix within NAME_MAX (255)
_PLAIN = frozenset(string.ascii_letters + string.digits + "-._")


def _escape(ch: str) -> str:
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))


def name_component(name: str) -> str:
    """One name as a file-name part (see the module docstring); an empty name is ``%``, which no
    other name gives (every ``%`` of a name is escaped as ``%25``)."""
    if not name:
        return "%"
    out = []
    last = len(name) - 1
    for i, ch in enumerate(name):
        keep = ch in _PLAIN
        if ch == "_":  # never part of "__", never first or last: the separator stays unambiguous
            keep = 0 < i < last and name[i - 1] != "_" and name[i + 1] != "_"
        elif i == 0 and ch in ".-":  # hidden files, option-like names
            keep = False
        out.append(ch if keep else _escape(ch))
    part = "".join(out)
    if part.lower() == EMPTY_VIEW:  # the empty view's name, on case-insensitive file systems too
        part = _escape(part[0]) + part[1:]
    return part


def table_file_name(names) -> str:
    """The file name (without suffix) of the table over ``names`` (attribute names, or a family
    followed by attribute names): see the module docstring."""
    parts = [name_component(str(n)) for n in names]
    joined = SEPARATOR.join(parts) or EMPTY_VIEW
    if len(joined.encode()) > MAX_NAME_BYTES:
        digest = hashlib.sha256("\x00".join(map(str, names)).encode("utf-8", "surrogatepass")).hexdigest()[:20]
        # cut at a character boundary, before any %XX escape the cut might split
        head = joined.encode()[: MAX_NAME_BYTES - 22].decode("utf-8", "ignore").rstrip("%0123456789ABCDEF")
        joined = (head or "t") + "~" + digest  # no name part holds "~" (it is escaped): unique by the hash
    return joined


def distinct_file_names(tuples) -> list[str]:
    """:func:`table_file_name` of each tuple of names, with the names that would coincide on a
    case-insensitive file system (``Age`` and ``age``) made distinct by a hash of their tuple.

    >>> distinct_file_names([("Age",), ("age",), ("sex",)])[2], len(
    ...     set(n.lower() for n in distinct_file_names([("Age",), ("age",)]))
    ... )
    ('sex', 2)
    """
    tuples = [tuple(map(str, t)) for t in tuples]
    names = [table_file_name(t) for t in tuples]
    folded: dict[str, set[tuple]] = {}
    for t, n in zip(tuples, names):
        folded.setdefault(n.lower(), set()).add(t)
    out = []
    for t, n in zip(tuples, names):
        if len(folded[n.lower()]) > 1:
            n = (
                n[: MAX_NAME_BYTES - 22]
                + "~"
                + hashlib.sha256("\x00".join(t).encode("utf-8", "surrogatepass")).hexdigest()[:20]
            )
        out.append(n)
    return out
