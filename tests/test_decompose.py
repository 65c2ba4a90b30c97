import itertools
import json

import numpy as np
import pytest
from bruteforce import subqueries, view_queries

from querysmasher.decompose import decompose, subquery_matrix
from querysmasher.linalg import project_gram
from querysmasher.schema import parse_schema
from querysmasher.workload import parse_workload


@pytest.mark.parametrize("split", [subquery_matrix, subqueries], ids=["library", "explicit"])
def test_figure_2_example(split):
    q = np.array([[0, 1, 1, 0, 0, 1]], dtype=float)
    sub = {keep: split(q, (2, 3), keep)[0] for keep in itertools.product((False, True), repeat=2)}
    assert np.allclose(sub[(False, False)], [1 / 2])
    assert np.allclose(sub[(True, False)], [1 / 6, -1 / 6])
    assert np.allclose(sub[(False, True)], [-1 / 2, 0, 1 / 2])
    assert np.allclose(sub[(True, True)], [-1 / 6, 1 / 3, -1 / 6, 1 / 6, -1 / 3, 1 / 6])


def _lift(sub: np.ndarray, sizes, keep) -> np.ndarray:
    """A subquery over the kept attributes as a vector over the whole view (constant on dropped ones)."""
    t = sub.reshape([n for n, k in zip(sizes, keep) if k])
    for axis, (n, k) in enumerate(zip(sizes, keep)):
        if not k:
            t = np.repeat(np.expand_dims(t, axis), n, axis=axis)
    return t.ravel()


@pytest.mark.parametrize(
    "spec", ["prefix:1,2", "range:2+affine:2", "hybrid:1,2,3", "random:1,2", "circular:2+abs:2@3", "marginal:4"]
)
def test_subqueries_sum_back_and_are_orthogonal(small_schema, spec):
    w = parse_workload(spec, small_schema)
    for v in w.views:
        sizes = tuple(small_schema.sizes[i] for i in v.attrs)
        q = view_queries(w, v)
        lifted = {}
        for keep in itertools.product((False, True), repeat=len(sizes)):
            s = subquery_matrix(q, sizes, keep)
            assert np.allclose(s, subqueries(q, sizes, keep), atol=1e-12)  # Eq. 3 by explicit matrices
            lifted[keep] = np.array([_lift(r, sizes, keep) for r in s])
        assert np.allclose(sum(lifted.values()), q)
        for a, b in itertools.combinations(lifted.values(), 2):
            assert np.allclose(a @ b.T, 0)  # every subquery of one view ⟂ every one of another


@pytest.mark.parametrize(
    "spec", ["prefix:1,2", "range:2+affine:2", "hybrid:1,2,3", "random:1,2", "circular:2+abs:2@3", "custom"]
)
def test_compact_grams_equal_the_explicit_subworkload_grams(small_schema, spec, tmp_path):
    if spec == "custom":
        rng = np.random.default_rng(3)
        p = tmp_path / "c.npz"
        np.savez(p, attributes=np.array(["A", "C", "D"]), queries=rng.integers(0, 2, (5, 18)).astype(float))
        spec = f"custom:{p}@1.5+prefix:2"
    w = parse_workload(spec, small_schema)
    d = decompose(w)
    explicit: dict[tuple[int, ...], np.ndarray] = {}
    for v in w.views:
        sizes = tuple(small_schema.sizes[i] for i in v.attrs)
        q = view_queries(w, v)
        for keep in itertools.product((False, True), repeat=len(sizes)):
            s = subqueries(q, sizes, keep)
            sub = tuple(a for a, k in zip(v.attrs, keep) if k)
            explicit[sub] = explicit.get(sub, 0) + v.weight * s.T @ s
    nonzero = {a: g for a, g in explicit.items() if np.abs(g).max() > 1e-10}
    assert set(d.grams) == set(nonzero)
    for a, g in nonzero.items():
        assert np.allclose(d.grams[a].dense(d.store), g, atol=1e-10)


def test_project_gram_matches_subqueries():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(7, 12))
    for keep in itertools.product((False, True), repeat=2):
        s = subqueries(q, (3, 4), keep)
        assert np.allclose(project_gram(q.T @ q, (3, 4), keep), s.T @ s)


def test_equal_views_share_one_key_and_order_collapses():
    d = decompose(parse_workload("prefix:1,2", parse_schema("synthetic:n=10,d=40")))
    assert len(d.grams) == 821
    keys = {d.keys[a][0] for a in d.grams}
    assert len(keys) == 3  # the empty view, every 1-way view, every 2-way view
    mixed = decompose(parse_workload("range:1+affine:2+prefix:3", parse_schema("synthetic:n=8,d=6")))
    assert len({mixed.keys[a][0] for a in mixed.grams}) == 4


def test_scaled_workload_has_same_keys_and_scaled_grams():
    s = parse_schema("synthetic:n=5,d=3")
    d1, d2 = decompose(parse_workload("prefix:1,2+abs:2", s)), decompose(parse_workload("prefix:1,2@3+abs:2@3", s))
    for a in d1.grams:
        k1, c1 = d1.keys[a]
        k2, c2 = d2.keys[a]
        assert k1 == k2 and c2 == pytest.approx(3 * c1)


def test_wide_dense_terms_are_stored_as_subquery_factors():
    """An affine view on 30 x 40 cells keeps its 69 subqueries, not a 1,200 x 1,200 Gram."""
    from querysmasher.decompose import is_factor, term_factor, term_gram
    from querysmasher.schema import parse_schema

    w = parse_workload("affine:2", parse_schema("synthetic:n=30,d=2"))
    d = decompose(w)
    g = d.grams[(0, 1)]
    (t,) = g.terms
    m = d.store[t.factors[0]]
    assert is_factor(m) and m.shape == (59, 900)
    q = view_queries(w, w.views[0])
    s = subqueries(q, (30, 30), (True, True))
    assert np.allclose(t.coef * term_gram(m), s.T @ s, atol=1e-9)
    assert term_factor(m) is m
    small = d.store[d.grams[(0,)].terms[0].factors[0]]  # 1-D residual: 59 rows > 30 cells, a Gram
    assert not is_factor(small)
    f = term_factor(small)
    assert np.allclose(f.T @ f, small, atol=1e-12)


def test_lazy_decomposition_keeps_random_grams_as_recipes_with_the_same_keys_and_matrices():
    # [20]^2 pair views: 400-cell tops (1.28 MB) are kept as recipes, their 20 x 20 parts in memory
    w = parse_workload("random:1,2", parse_schema("synthetic:n=20,d=4"))
    eager, lazy = decompose(w, lazy=False), decompose(w, lazy=True)
    assert eager.keys == lazy.keys
    recipes = 0
    for g in lazy.distinct().values():
        for t in g.terms:
            for k in t.factors:
                assert lazy.store.shape(k) == eager.store[k].shape
                assert np.array_equal(lazy.store[k], eager.store[k])
                recipes += lazy.store.recipe(k) is not None
    assert recipes == 6  # one per pair top
    assert all(eager.store.recipe(k) is None for g in eager.distinct().values() for t in g.terms for k in t.factors)


def test_subproblem_file_of_a_recipe_holds_no_matrix_and_rebuilds_it_checked(tmp_path):
    import h5py

    from querysmasher.pipeline.cache import read_subproblem, write_subproblem

    d = decompose(parse_workload("random:2", parse_schema("synthetic:n=20,d=2")), lazy=True)
    ((key, gram),) = ((k, g) for k, g in d.distinct().items() if g.cells == 400)
    path = tmp_path / "sub.h5"
    assert write_subproblem(key, gram, d.store, path)
    assert path.stat().st_size < 50_000  # the 400 x 400 Gram (1.28 MB) is not in the file
    key2, gram2, store2 = read_subproblem(path)
    assert key2 == key and gram2.terms == gram.terms
    assert np.array_equal(gram2.dense(store2), gram.dense(d.store))

    # a recipe that builds another matrix than the one its key names is refused when read
    with h5py.File(path, "r+") as f:
        f.attrs["recipes"] = f.attrs["recipes"].replace('"seed": 0', '"seed": 1')
    _, gram3, store3 = read_subproblem(path)
    with pytest.raises(ValueError, match="its generator changed"):
        gram3.dense(store3)
    # and one that does not describe a dense term of the Gram is a damaged file, refused before
    # any query matrix is drawn (sizes that would build a huge one, a shape that is not the Gram's)
    good = json.loads(h5py.File(path, "r").attrs["recipes"])
    entry = next(iter(good.values()))
    for bad in (
        {**entry, "shape": [401, 401]},
        {**entry, "recipe": {**entry["recipe"], "sizes": [10**6, 10**6]}},
        {**entry, "recipe": {**entry["recipe"], "family": "prefix"}},
        {**entry, "recipe": {**entry["recipe"], "keep": [True]}},
        "x",
    ):
        with h5py.File(path, "r+") as f:
            f.attrs["recipes"] = json.dumps({next(iter(good)): bad})
        with pytest.raises(ValueError, match="does not describe a dense term"):
            read_subproblem(path)
