"""Untrusted YAML/JSON documents: parsed with bounded size and depth, no aliases, no duplicate keys.

Release specs, domain files, workload files and ``--option`` values may come from someone else.
Every one of them is read here, so that a hostile or careless document is one :class:`InputError`
naming the file (or field) and the reason, never a hang, a RecursionError or a silently different
value:

* YAML aliases (``*a``, and ``<<`` merges, which use them) are refused: a "billion laughs"
  document fails at its first alias, and no message ever expands it;
* nesting deeper than :data:`MAX_DEPTH` is refused (JSON too) instead of recursing;
* a key given twice in one mapping is refused (YAML and JSON keep the last one silently, so a
  second ``budget:`` would replace the first);
* scalars are resolved by the YAML 1.2 core schema, not by YAML 1.1 (which PyYAML and Snakemake
  implement): ``1e-6`` and ``5E-7`` are floats (1.1: strings), ``010`` is ten (1.1: eight),
  ``0o10`` eight, ``0x10`` sixteen, ``1:30`` and ``1_000`` are strings (1.1: 90 and 1000),
  ``yes``/``no``/``on``/``off`` are strings (1.1: booleans; 1.2 has only ``true``/``false``),
  ``2026-01-01`` is a string (1.1: a date);
* files larger than ``max_bytes`` (default :data:`MAX_DOCUMENT_BYTES`) are refused before reading,
  and text that is not UTF-8 is an error naming the file.

>>> parse_yaml("delta: 1e-6\\nrho: 5E-7\\nn: 10", "spec")
{'delta': 1e-06, 'rho': 5e-07, 'n': 10}
>>> parse_yaml("a: 1:30\\nb: 010\\nc: 0x10\\nd: on\\ne: true", "spec")
{'a': '1:30', 'b': 10, 'c': 16, 'd': 'on', 'e': True}
>>> parse_yaml("a: &x [1]\\nb: *x", "spec")
Traceback (most recent call last):
    ...
querysmasher.errors.InputError: spec 'line 2': YAML aliases (*name) are not accepted: write the value out
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode

from .errors import InputError

__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "parse_yaml",
    "parse_json",
    "read_document",
    "read_text",
    "check_loaded",
    "NUMBER_PATTERN",
    "as_number",
]

MAX_DEPTH = 64
MAX_DOCUMENT_BYTES = 16 << 20

# YAML 1.2 / JSON numbers with an exponent or a fraction, as people write them.
NUMBER_PATTERN = re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$")
_FLOAT_12 = re.compile(r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+)$")


class _Refused(Exception):
    """Raised inside the loader; turned into an InputError naming the document."""

    def __init__(self, where: str, reason: str):
        super().__init__(reason)
        self.where, self.reason = where, reason


def _line(mark) -> str:
    return f"line {mark.line + 1}" if mark is not None else "?"


class _Loader(yaml.SafeLoader):
    """SafeLoader without aliases, with a depth bound, refusing duplicate keys, YAML 1.2 floats."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(AliasEvent):
            raise _Refused(
                _line(self.peek_event().start_mark), "YAML aliases (*name) are not accepted: write the value out"
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(_line(self.peek_event().start_mark), f"nests deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    dup = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the base class says so
                    break
                if dup:
                    raise _Refused(_line(key_node.start_mark), f"the key {str(key)[:80]!r} is given twice")
        return super().construct_mapping(node, deep)


# The YAML 1.2 core schema's implicit types (https://yaml.org/spec/1.2.2/#1032-tag-resolution) in
# place of PyYAML's YAML 1.1 ones: no sexagesimal, octal-by-leading-zero, underscore, yes/no/on/off
# or timestamp forms, which silently turn what a person wrote into another value.
_INT_12 = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_SPECIAL_FLOAT_12 = re.compile(r"^(?:[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
_BOOL_12 = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag == "tag:yaml.org,2002:null"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL_12, list("tTfF"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", _INT_12, list("-+0123456789"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _SPECIAL_FLOAT_12, list("-+."))


def _construct_int_12(loader, node):
    text = loader.construct_scalar(node)
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)  # "010" is ten in YAML 1.2


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int_12)


def parse_yaml(text: str, field: str):
    """The document in ``text`` (see the module docstring); errors name ``field``."""
    if not _brackets_nest_at_most(text, MAX_DEPTH):  # PyYAML's scanner is quadratic in flow depth
        raise InputError(field, "", f"nests deeper than {MAX_DEPTH} levels")
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except _Refused as exc:
        raise InputError(field, exc.where, exc.reason) from None
    except (yaml.YAMLError, ComposerError, ConstructorError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        mark = getattr(exc, "problem_mark", None)
        raise InputError(field, _line(mark), f"is not valid YAML: {first[:200]}") from None
    except RecursionError:
        raise InputError(field, "", f"nests deeper than {MAX_DEPTH} levels") from None


def _no_duplicate_keys(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise _Refused("", f"the key {str(k)[:80]!r} is given twice")
        out[k] = v
    return out


def _brackets_nest_at_most(text: str, limit: int) -> bool:
    """Whether ``[`` and ``{`` outside double-quoted strings nest at most ``limit`` deep (checked
    before parsing: json.loads recurses once per level, PyYAML's scanner slows quadratically)."""
    depth = deepest = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def parse_json(text: str, field: str):
    """A JSON document, with the same bounds as :func:`parse_yaml`."""
    if not _brackets_nest_at_most(text, MAX_DEPTH):
        raise InputError(field, "", f"nests deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except _Refused as exc:
        raise InputError(field, exc.where or "JSON", exc.reason) from None
    except json.JSONDecodeError as exc:
        raise InputError(field, f"line {exc.lineno}", f"is not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise InputError(field, "", f"nests deeper than {MAX_DEPTH} levels") from None


def read_text(path: str | Path, field: str, max_bytes: int = MAX_DOCUMENT_BYTES) -> str:
    """The UTF-8 text of a file of at most ``max_bytes`` bytes (InputError naming it otherwise)."""
    p = Path(path)
    try:
        if not p.is_file():
            raise InputError(field, str(p), "does not exist (or is not a file)")
        size = p.stat().st_size
        if size > max_bytes:
            raise InputError(field, str(p), f"is {size:,} bytes, more than the {max_bytes:,} accepted")
        with open(p, "rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(field, str(p), f"cannot be read ({exc.strerror or exc})") from None
    if len(raw) > max_bytes:
        raise InputError(field, str(p), f"is more than the {max_bytes:,} bytes accepted")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(field, str(p), f"is not UTF-8 text (byte {exc.start})") from None


def read_document(path: str | Path, field: str, max_bytes: int = MAX_DOCUMENT_BYTES):
    """A YAML or JSON file (JSON by the ``.json`` suffix), read with :func:`read_text`."""
    text = read_text(path, field, max_bytes)
    where = f"{field} {Path(path)}"
    return parse_json(text, where) if Path(path).suffix.lower() == ".json" else parse_yaml(text, where)


def check_loaded(tree, field: str):
    """A document another loader already built (Snakemake's config), checked and mended in place:
    a container reached twice (a YAML alias, shared by reference: walking it would expand a
    "billion laughs" document) or nesting deeper than :data:`MAX_DEPTH` is an InputError; strings
    written as YAML 1.2 floats (``1e-6``) become floats. Returns ``tree``.

    >>> check_loaded({"releases": {"r": {"budget": {"delta": "1e-6"}}}}, "config")
    {'releases': {'r': {'budget': {'delta': 1e-06}}}}
    """
    seen: set[int] = set()
    stack = [(tree, 1, field)]
    while stack:
        node, depth, where = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(field, where, f"nests deeper than {MAX_DEPTH} levels")
        if id(node) in seen:
            raise InputError(field, where, "repeats a value by reference (a YAML alias, *name): write the value out")
        seen.add(id(node))
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in items:
            if isinstance(v, str) and _FLOAT_12.match(v.strip()):
                node[k] = float(v)
            elif isinstance(v, (dict, list)):
                stack.append((v, depth + 1, f"{where}.{k}"))
    return tree


def as_number(value, field: str) -> float:
    """A finite-or-not float from a document value: an int or float, or a string written as a
    number (``"1e-6"``: YAML 1.1 loaders, Snakemake's among them, leave it a string). Booleans and
    other strings are an InputError naming ``field``.

    >>> as_number("1e-6", "delta"), as_number(2, "rho")
    (1e-06, 2.0)
    """
    if isinstance(value, bool):
        raise InputError(field, value, "must be a number")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and NUMBER_PATTERN.match(value.strip()):
        return float(value.strip())
    raise InputError(field, value, "must be a number")
