"""The records an experiment reads: data set configs resolved to a source (CSV or seeded synthetic records),
and loading them.

>>> resolve_data_source({"csv": "no/such.csv", "synthetic": {"records": 10}})
{'kind': 'synthetic', 'records': 10, 'seed': 0}
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError

__all__ = ["synthetic_records", "resolve_data_source", "data_inputs", "load_dataset"]


def synthetic_records(schema, records: int, seed: int):
    """Seeded synthetic records over a schema: a mixture of 4 latent classes; per class, numeric
    attributes follow a discretised normal and categorical ones a Dirichlet(0.5) draw, so the
    attributes are correlated. Deterministic in (schema, records, seed)."""
    import numpy as np  # loads numpy only where it is used

    from ..data import Records  # loads numpy only where it is used

    rng = np.random.default_rng([int(seed), int(records), len(schema)])
    classes = 4
    z = rng.integers(classes, size=int(records))
    cols = []
    for a in schema.attributes:
        if a.kind == "numeric":
            idx = np.arange(a.size)
            means, sds = rng.uniform(0, a.size, classes), rng.uniform(0.05, 0.3, classes) * a.size + 0.5
            probs = np.exp(-((idx[None, :] - means[:, None]) ** 2) / (2 * sds[:, None] ** 2)) + 1e-3
        else:
            probs = rng.dirichlet(np.full(a.size, 0.5), size=classes) + 1e-9
        probs /= probs.sum(axis=1, keepdims=True)
        u = rng.random(int(records))
        col = np.minimum((u[:, None] > np.cumsum(probs[z], axis=1)).sum(axis=1), a.size - 1)
        cols.append(col)
    codes = np.stack(cols, axis=1).astype(np.int64) if cols else np.zeros((int(records), 0), dtype=np.int64)
    return Records(codes, schema)


def resolve_data_source(data: dict) -> dict:
    """Which records a data set config resolves to, now: ``{"kind": "csv", "path", "domain",
    "on_invalid"}`` when its file exists, else its ``synthetic`` fallback ``{"kind": "synthetic",
    "records", "seed"}``. Recorded in the params of the rules that read records, so a file that
    appears (or disappears) re-runs them."""
    path = data.get("csv")
    if path and Path(path).is_file():
        return {
            "kind": "csv",
            "path": str(path),
            "domain": data.get("domain"),
            "on_invalid": data.get("on_invalid", "error"),
        }
    syn = data.get("synthetic")
    if syn:
        return {"kind": "synthetic", "records": int(syn.get("records", 10000)), "seed": int(syn.get("seed", 0))}
    if path:
        raise InputError("config data csv", path, "does not exist and the data set has no 'synthetic' fallback")
    raise InputError("config data", data, "needs 'csv' (a file) or 'synthetic' ({records, seed})")


def data_inputs(data: dict) -> list[str]:
    """The files a data set config reads (for a rule's ``input:``)."""
    src = resolve_data_source(data)
    if src["kind"] != "csv":
        return []
    return [src["path"]] + ([src["domain"]] if src.get("domain") else [])


def load_dataset(source: dict, schema):
    """Records from a :func:`resolve_data_source` result (CSV validated against the schema, or synthetic)."""
    from ..data import load_records  # loads numpy only where it is used

    if source["kind"] == "csv":
        return load_records(
            source["path"], schema, domain_file=source.get("domain"), on_invalid=source.get("on_invalid", "error")
        )
    return synthetic_records(schema, source["records"], source["seed"])
