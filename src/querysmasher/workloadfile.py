"""Workload files: a schema and a workload stored together (HDF5 kind ``workload``, custom queries included).

The workflow parses a problem's schema and workload once, into this file; every later stage reads
the workload from it, never from the config (so a stage's result is a function of its input files).

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "workload.h5")
>>> write_workload_file(path, "cps", "prefix:1")["views"]
5
>>> read_workload_file(path).spec
'prefix:1'
"""

from __future__ import annotations

from pathlib import Path

from .io import atomic_h5, get_custom_queries, get_json, open_h5, put_custom_queries, put_json
from .schema import Schema, parse_schema
from .workload import Workload, parse_workload

__all__ = ["write_workload_file", "read_workload_file"]


def write_workload_file(path: str | Path, schema_spec: str, workload_spec: str, *, all_numeric: bool = False) -> dict:
    """Parse a schema and a workload and store them; returns a short summary."""
    schema = parse_schema(schema_spec, all_numeric=all_numeric)
    w = parse_workload(workload_spec, schema)
    with atomic_h5(path, kind="workload") as f:
        put_json(f, "schema", schema.to_dict())
        f.attrs["schema_spec"] = str(schema_spec)
        f.attrs["workload"] = w.spec
        put_custom_queries(f, w.custom)
    return {"schema": schema.name, "workload": w.spec, "views": len(w.views), "queries": w.query_count()}


def read_workload_file(path: str | Path) -> Workload:
    """The :class:`~querysmasher.workload.Workload` stored by :func:`write_workload_file`."""
    with open_h5(path, "workload") as f:
        schema = Schema.from_dict(get_json(f, "schema"))
        return parse_workload(str(f.attrs["workload"]), schema, get_custom_queries(f))
