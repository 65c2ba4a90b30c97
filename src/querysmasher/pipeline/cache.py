"""The content-addressed store shared by every experiment: subproblem, batch and solve files, the cost model
of a solve, and batching.

A subproblem key is the hash of its unit-trace Gram (:meth:`SubworkloadGram.canonical`), so equal
keys mean equal problems. Subproblem and batch files are written only if absent
(:func:`write_subproblem`): an existing file is never touched, its mtime never changes, so
Snakemake never re-solves it (a solve file is redone only when missing or when the code of its
solver changed: :func:`querysmasher.pipeline.fingerprint.library_fingerprint`).

>>> plan_batches(["0" * 19 + "1", "f" * 20], 1)
[['00000000000000000001'], ['ffffffffffffffffffff']]
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "write_subproblem",
    "read_subproblem",
    "write_batch",
    "write_solutions",
    "read_solutions",
    "StoredSolutions",
    "estimate_cost",
    "batch_cost",
    "subproblem_bytes",
    "runtime_minutes",
    "batch_id",
    "plan_batches",
    "estimate_decompose_mem_mb",
    "distinct_nonproduct_views",
    "decompose_mem_mb",
]

# The cost of a solve is the solver's own estimate (querysmasher.solvers.base.SolveEstimate, checked
# against measured peaks by bench/solve_estimates.py); a job adds its process and what it reads.
# A job's process (Python, numpy, scipy, h5py and the library) peaks at 90-110 MB of RSS before any
# work (the rules' benchmark files); BASE_MEM_MB leaves ~300 MB for what an estimate misses and
# stays under the 3 x peak + 500 MB of a job that does almost nothing (bench/requests.py).
BASE_MEM_MB = 400
# decompose holds more than the Grams it keeps (their canonical copies and keys, the store): random:1,2
# over [20]^40 keeps 998 MB of Grams and peaked at 1,352 MB (Table 4)
DECOMPOSE_HELD_FACTOR = 1.3
# StoredSolutions (the allocate job's solutions) holds the solutions it read last, this many
STORED_SOLUTIONS_HELD = 4


def write_subproblem(key: str, gram, store, path: str | Path) -> bool:
    """Store one unit-trace subproblem Gram (its terms and the matrices they reference), only if
    ``path`` does not exist. Returns True when written (False: present). Same key = same content,
    so an existing file is left untouched (its mtime too), even when two jobs race."""
    import numpy as np  # loads numpy only where it is used

    from ..io import atomic_h5, new_group, put, put_json  # loads h5py, numpy only where it is used

    path = Path(path)
    if path.exists():
        return False
    with atomic_h5(path, kind="subproblem", exclusive=True) as f:
        f.attrs["key"] = key
        f.attrs["cells"] = int(gram.cells)
        put(f, "sizes", np.array(gram.sizes, dtype=np.int64))
        put(f, "coef", np.array([t.coef for t in gram.terms], dtype=float))
        put(f, "dense", np.array([t.dense for t in gram.terms], dtype=bool))
        put(
            f, "factor_offsets", np.concatenate([[0], np.cumsum([len(t.factors) for t in gram.terms])]).astype(np.int64)
        )
        put(f, "factors", np.array([k for t in gram.terms for k in t.factors], dtype=object))
        mats = new_group(f, "matrices")
        recipes = {}
        for k in sorted({k for t in gram.terms for k in t.factors}):
            recipe = store.recipe(k) if hasattr(store, "recipe") else None
            if recipe is None:
                put(mats, k, store[k])
            else:  # rebuilt by the solve job (decompose.rebuild_matrix): a random view's Gram is not written out
                recipes[k] = {"shape": list(store.shape(k)), "recipe": recipe}
        put_json(f, "recipes", recipes)
    return True


def read_subproblem(path: str | Path):
    """(key, SubworkloadGram, MatrixStore) from a subproblem file. The Gram's ``attrs`` are
    positions 0..k-1 (a subproblem is shared by views on different attributes)."""
    from ..decompose import GramTerm, SubworkloadGram, rebuild_matrix, recipe_cells  # loads numpy only where it is used
    from ..io import get_json, open_h5  # loads h5py, numpy only where it is used
    from ..linalg import MatrixStore  # loads numpy only where it is used

    with open_h5(path, "subproblem") as f:
        key = str(f.attrs["key"])
        sizes = tuple(int(x) for x in f["sizes"][()])
        coef, dense, offs = f["coef"][()], f["dense"][()], f["factor_offsets"][()]
        names = [x.decode() if isinstance(x, bytes) else str(x) for x in f["factors"][()]]
        store = MatrixStore(loader=rebuild_matrix)
        for k, ds in f["matrices"].items():
            store.add_normalised(k, ds[()])
        recipes = get_json(f, "recipes") if "recipes" in f.attrs else {}
    terms = tuple(
        GramTerm(float(c), tuple(names[offs[i] : offs[i + 1]]), bool(d)) for i, (c, d) in enumerate(zip(coef, dense))
    )
    gram = SubworkloadGram(tuple(range(len(sizes))), sizes, terms)
    dense_keys = {t.factors[0] for t in terms if t.dense}
    for k, entry in recipes.items():
        # a recipe stands for one dense c x c term of this Gram: anything else is a damaged file
        # (the first access also checks that it rebuilds the matrix of key k)
        shape = entry.get("shape") if isinstance(entry, dict) else None
        try:
            cells = recipe_cells(entry.get("recipe")) if isinstance(entry, dict) else -1
        except ValueError:
            cells = -1
        if k not in dense_keys or shape != [gram.cells, gram.cells] or cells != gram.cells:
            raise ValueError(
                f"subproblem file {path}: recipe {k!r} does not describe a dense term of its {gram.cells}-cell Gram"
            )
        store.add_recipe(k, shape, entry["recipe"])
    return key, gram, store


def write_batch(bid: str, members: list[str], path: str | Path) -> None:
    """The member keys of a batch, only if ``path`` does not exist (same id = same members)."""
    from ..atomic import atomic_path  # in the body: the stage function's fingerprint follows it

    path = Path(path)
    if path.exists():
        return
    with atomic_path(path, exclusive=True) as tmp:
        tmp.write_text(json.dumps({"id": bid, "keys": members}, indent=1) + "\n")


def write_solutions(path: str | Path, method: str, options: dict | None, results) -> None:
    """A solve file (kind ``solve``): one group per key from (key, ViewSolution, seconds) triples."""
    from ..io import atomic_h5, new_group  # loads h5py, numpy only where it is used
    from ..planfile import write_solution  # loads numpy only where it is used

    with atomic_h5(path, kind="solve") as f:
        f.attrs["method"] = method
        f.attrs["options"] = json.dumps(options or {}, sort_keys=True)
        g = new_group(f, "solutions")
        for key, sol, secs in sorted(results, key=lambda r: r[0]):
            s = new_group(g, key)
            write_solution(s, sol)
            s.attrs["seconds"] = secs


def read_solutions(paths) -> tuple[dict, dict[str, float]]:
    """({key: ViewSolution}, {key: solve seconds}) from solve files, every solution in memory
    (:class:`StoredSolutions` reads them one at a time)."""
    stored = StoredSolutions(paths)
    return dict(stored.items()), dict(stored.seconds)


class StoredSolutions(Mapping):
    """{key: ViewSolution} over the groups of solve files, each read when it is asked for; only the
    ``keep`` read last are held. Table 4's ``random:1,2`` at n = 50 has 780 dense mechanisms of
    46 MB each: the allocate job plans over them one at a time (its losses, costs and variance
    report, then the plan file) instead of holding 36 GB. Entries set with ``m[key] = solution``
    are held (re-derived ones); :meth:`copy` and :meth:`restricted` share the index.

    ``seconds``: each key's solve time, from the files."""

    def __init__(self, paths=(), *, keep: int = STORED_SOLUTIONS_HELD):
        from ..io import open_h5  # loads h5py, numpy only where it is used

        self._where: dict[str, str] = {}
        self.seconds: dict[str, float] = {}
        for p in paths:
            with open_h5(p, "solve") as f:
                for key, g in f["solutions"].items():
                    self._where[key] = str(p)
                    self.seconds[key] = float(g.attrs.get("seconds", 0.0))
        self._set: dict = {}
        self._held: OrderedDict = OrderedDict()
        self._keep = max(1, int(keep))

    def __getitem__(self, key: str):
        if key in self._set:
            return self._set[key]
        if key in self._held:
            self._held.move_to_end(key)
            return self._held[key]
        from ..io import open_h5  # loads h5py, numpy only where it is used
        from ..planfile import read_solution  # loads numpy only where it is used

        with open_h5(self._where[key], "solve") as f:
            sol = read_solution(f["solutions"][key])
        self._held[key] = sol
        while len(self._held) > self._keep:
            self._held.popitem(last=False)
        return sol

    def __setitem__(self, key: str, sol) -> None:
        if key not in self._where:
            raise KeyError(key)
        self._set[key] = sol

    def __iter__(self):
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, key) -> bool:
        return key in self._where

    def restricted(self, keys) -> StoredSolutions:
        """The same files' solutions of ``keys`` only (a KeyError names one that is missing)."""
        out = self.copy()
        keys = set(keys)
        missing = keys - set(self._where)
        if missing:
            raise KeyError(sorted(missing)[0])
        out._where = {k: p for k, p in self._where.items() if k in keys}
        out._set = {k: v for k, v in self._set.items() if k in keys}
        return out

    def copy(self) -> StoredSolutions:
        out = StoredSolutions(keep=self._keep)
        out._where, out.seconds, out._set = dict(self._where), dict(self.seconds), dict(self._set)
        return out


def subproblem_bytes(gram, store) -> float:
    """Bytes of the matrices a subproblem file holds (what a solve job reads before solving)."""
    from ..linalg import stored_shape  # loads numpy only where it is used

    return float(sum(8 * math.prod(stored_shape(store, k)) for k in {k for t in gram.terms for k in t.factors}))


def estimate_cost(
    gram, store, method: str, options: dict | None = None, *, solver=None, context_mb: float = 0.0
) -> dict:
    """Cost of solving one subproblem in its own job, from the solver's own estimate
    (:func:`querysmasher.solvers.base.estimate_solve`: ``solver.estimate(gram, store)``, or a
    conservative dense one for a solver without it): ``seconds``; ``mem_mb``, the process
    (``BASE_MEM_MB``) + the subproblem's matrices + the solve's peak + ``context_mb`` (a solver with
    workload context re-runs the decomposition first); ``runtime`` (minutes, with margin, for a
    cluster's time limit); ``result_mb`` (what its solution holds, for batches) and ``path``.

    >>> from querysmasher.decompose import GramTerm, SubworkloadGram
    >>> g = SubworkloadGram((0, 1), (100, 100), (GramTerm(1.0, ("f",), True),))
    >>> import numpy as np
    >>> c = estimate_cost(g, {"f": np.zeros((199, 10_000))}, "qs")
    >>> c["path"], c["mem_mb"] < 1000
    ('factored', True)
    """
    from ..methods import get_method  # loads numpy only where it is used
    from ..solvers.base import estimate_solve  # loads numpy only where it is used

    if solver is None:
        solver = get_method(method).build(**(options or {}))
    est = estimate_solve(solver, gram, store)
    mem = BASE_MEM_MB + context_mb + (subproblem_bytes(gram, store) + est.peak_bytes) / 2**20
    seconds = max(float(est.seconds), 0.001)
    return {
        "seconds": round(seconds, 3),
        "mem_mb": int(math.ceil(mem)),
        "runtime": runtime_minutes(seconds),
        "result_mb": round(est.result_bytes / 2**20, 3),
        "work_mb": round(mem - BASE_MEM_MB - context_mb, 3),
        "path": est.path,
    }


def batch_cost(costs: list[dict], context_mb: float = 0.0, context_seconds: float = 0.0) -> dict:
    """Cost of one batch job from its members' :func:`estimate_cost`: their seconds add up (plus
    ``context_seconds`` once: a context solver re-runs the decomposition); memory is the process
    and context, the largest member's working memory (each subproblem is read and
    solved in turn) and every member's solution (all are written at the end).

    >>> batch_cost([{"seconds": 1.0, "work_mb": 10, "result_mb": 1}, {"seconds": 2.0, "work_mb": 5, "result_mb": 1}])
    {'seconds': 3.0, 'mem_mb': 412, 'runtime': 10}
    """
    total = context_seconds + sum(c["seconds"] for c in costs)
    mem = (
        BASE_MEM_MB + context_mb + max((c["work_mb"] for c in costs), default=0.0) + sum(c["result_mb"] for c in costs)
    )
    return {"seconds": round(total, 3), "mem_mb": int(math.ceil(mem)), "runtime": runtime_minutes(total)}


def distinct_nonproduct_views(workload):
    """(cells, queries, family) of each distinct non-product view of ``workload``, with the sharing
    of decompose: one subquery matrix per family, sizes and term (affine, abs, custom), random views
    one per view. Product views cost only 1-D factors and are left out."""
    sizes_all = workload.schema.sizes
    seen: set = set()
    for v in workload.views:
        if v.factors:
            continue
        sizes = tuple(sizes_all[i] for i in v.attrs)
        key = (
            (v.family, sizes, v.term) if v.family in ("affine", "abs", "custom") else (v.family, sizes, v.seed, v.attrs)
        )
        if key not in seen:
            seen.add(key)
            yield math.prod(sizes), workload.view_count(v), v.family


def estimate_decompose_mem_mb(workload, *, lazy: bool | None = None) -> int:
    """Peak memory (MB) of decomposing ``workload`` (:func:`querysmasher.decompose.decompose` with
    the same ``lazy``): every distinct non-product view keeps its subquery factor or, when it has at
    least as many queries as cells (random, wide custom), its c x c Gram until the subproblem files
    are written, and builds one query matrix at a time. Product views cost only 1-D factors. A lazy
    decomposition keeps a random view's large Grams as recipes (its small lower residuals stay):
    ``random:1,2`` at n = 50 over 40 attributes holds 780 Grams of 2,500^2 (about 39 GB) eagerly, one at a time lazily.

    >>> from querysmasher.workload import parse_workload
    >>> from querysmasher.schema import parse_schema
    >>> s = parse_schema("synthetic:n=50,d=3")
    >>> estimate_decompose_mem_mb(parse_workload("prefix:1,2", s)) == BASE_MEM_MB
    True
    >>> w = parse_workload("random:2", parse_schema("synthetic:n=50,d=6"))  # 15 pairs of 2,500 cells
    >>> estimate_decompose_mem_mb(w, lazy=False) > 15 * 2500 ** 2 * 8 / 2**20
    True
    >>> estimate_decompose_mem_mb(w, lazy=True) < 2 * 3 * 7500 * 2500 * 8 / 2**20  # about one view's query matrices
    True
    """
    from ..decompose import LAZY_AUTO_BYTES, LAZY_MIN_BYTES  # loads numpy only where it is used

    views = list(distinct_nonproduct_views(workload))
    if lazy is None:  # as decompose decides
        lazy = sum(8 * c * c for c, _, family in views if family == "random") > LAZY_AUTO_BYTES
    held = largest = 0
    for c, rows, family in views:
        gram = min(rows, c) * c * 8
        if lazy and family == "random" and gram >= LAZY_MIN_BYTES:
            gram = 4 * c * 8  # its lower residuals (a pair's two n x n parts: 2c entries), a recipe for the rest
        held += gram
        largest = max(largest, 3 * rows * c * 8)  # the query matrix and its projected copies
    return int(BASE_MEM_MB + math.ceil((DECOMPOSE_HELD_FACTOR * held + largest) / 2**20))


def decompose_mem_mb(experiment) -> int:
    """``mem_mb`` of one experiment's decompose job (a :class:`~.config.Experiment`): its workload
    parsed from the config, as the workload rule parses it (so a dry run gets the same figure),
    through :func:`estimate_decompose_mem_mb`; a whole-workload method's decomposition is empty."""
    from ..methods import get_method  # loads numpy only where it is used
    from ..schema import parse_schema  # in the body: the stage function's fingerprint follows it
    from ..workload import parse_workload  # loads numpy only where it is used

    if get_method(experiment.method).whole_workload:
        return BASE_MEM_MB
    schema = parse_schema(experiment.schema_spec, all_numeric=experiment.all_numeric)
    return estimate_decompose_mem_mb(
        parse_workload(experiment.workload, schema), lazy=True
    )  # as steps.decompose_to_files


RUNTIME_FACTOR = 8  # the paper grid's jobs ran up to 8x their estimate on 2 cores at a load of 8-9
RUNTIME_MIN_MINUTES = 10


def runtime_minutes(seconds: float) -> int:
    """A cluster time limit (minutes) for work estimated at ``seconds`` on one free core: the
    estimate times ``RUNTIME_FACTOR`` (a shared or loaded node), plus five minutes, at least
    ``RUNTIME_MIN_MINUTES`` (doubled on a retry by the rules).

    >>> runtime_minutes(0.1), runtime_minutes(40.0), runtime_minutes(600.0)
    (10, 11, 85)
    """
    return int(max(RUNTIME_MIN_MINUTES, math.ceil(RUNTIME_FACTOR * seconds / 60) + 5))


def batch_id(keys) -> str:
    from ..linalg import content_hash  # loads numpy only where it is used

    return content_hash(*sorted(keys))


def plan_batches(
    keys,
    batch_size: int,
    seconds: dict[str, float] | None = None,
    max_seconds: float | None = None,
    *,
    shared: bool = True,
) -> list[list[str]]:
    """Group cheap subproblem keys deterministically: sorted, a batch ends after a key whose hash
    value is 0 modulo ``max(1, batch_size // 2)`` (content-defined boundaries), or when it holds
    ``batch_size`` keys, or when the estimated ``seconds`` of its keys reach ``max_seconds``.
    Content-defined boundaries keep most batches identical when a grid adds or removes a few
    subproblems, so batch solutions are shared between experiments; ``shared=False`` (solutions
    that only one workload can use) drops them."""
    keys = sorted(set(keys))
    modulus = max(1, int(batch_size) // 2)
    out, cur, total = [], [], 0.0
    for k in keys:
        cur.append(k)
        total += (seconds or {}).get(k, 0.0)
        if (
            len(cur) >= batch_size
            or (max_seconds and total >= max_seconds)
            or (shared and int(k[-8:], 16) % modulus == 0)
        ):
            out.append(cur)
            cur, total = [], 0.0
    if cur:
        out.append(cur)
    return out
