"""Query families against hand-written matrices (paper §8.1): every row, in the order the library
enumerates them, the query counts, the closed-form Grams, and the views a workload resolves to."""

import numpy as np
import pytest
from bruteforce import HAND_WRITTEN, definition_1d, pair_matrix, product_answers, view_queries

from querysmasher.decompose import view_query_matrix
from querysmasher.families import count_1d, gram_1d, pair_count, pair_query_matrix, query_matrix_1d, random_query_matrix
from querysmasher.workload import parse_workload

ONE_D = [(family, n) for family in ("marginal", "prefix", "range", "circular") for n in (1, 2, 3, 4)]

# Two-way families over the cells (a1, a2), row-major (a1 slow, a2 fast); one row per c.
PAIRS = {
    ("affine", 1, 1): [[1]],
    ("abs", 1, 1): [[1]],
    # cells (0,0) (0,1) (0,2): sums 0 1 2, differences 0 1 2
    ("affine", 1, 3): [[1, 0, 0], [1, 1, 0], [1, 1, 1]],
    ("abs", 1, 3): [[1, 0, 0], [1, 1, 0], [1, 1, 1]],
    # cells (0,0) (0,1) (1,0) (1,1): sums 0 1 1 2, differences 0 1 1 0
    ("affine", 2, 2): [
        [1, 0, 0, 0],  # A1 + A2 <= 0
        [1, 1, 1, 0],  # <= 1
        [1, 1, 1, 1],
    ],  # <= 2
    ("abs", 2, 2): [
        [1, 0, 0, 1],  # |A1 - A2| <= 0
        [1, 1, 1, 1],
    ],  # <= 1
    # cells (0,0) (0,1) (0,2) (1,0) (1,1) (1,2): sums 0 1 2 1 2 3, differences 0 1 2 1 0 1
    ("affine", 2, 3): [[1, 0, 0, 0, 0, 0], [1, 1, 0, 1, 0, 0], [1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]],
    ("abs", 2, 3): [[1, 0, 0, 0, 1, 0], [1, 1, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]],
    # cells (0,0) (0,1) (1,0) (1,1) (2,0) (2,1): sums 0 1 1 2 2 3, differences 0 1 1 0 2 1
    ("affine", 3, 2): [[1, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]],
    ("abs", 3, 2): [[1, 0, 0, 1, 0, 0], [1, 1, 1, 1, 0, 1], [1, 1, 1, 1, 1, 1]],
    # cells (0,0) .. (2,2): sums 0 1 2 1 2 3 2 3 4, differences 0 1 2 1 0 1 2 1 0
    ("affine", 3, 3): [
        [1, 0, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 1, 0, 0],
        [1, 1, 1, 1, 1, 1, 1, 1, 0],
        [1, 1, 1, 1, 1, 1, 1, 1, 1],
    ],
    ("abs", 3, 3): [[1, 0, 0, 0, 1, 0, 0, 0, 1], [1, 1, 0, 1, 1, 1, 0, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1, 1]],
}


@pytest.mark.parametrize("family, n", ONE_D)
def test_1d_families_are_the_hand_written_matrices(family, n):
    want = np.array(HAND_WRITTEN[family][n], dtype=float)
    got = query_matrix_1d(family, n)
    assert got.shape == want.shape and np.array_equal(got, want)  # every row, in this order
    assert count_1d(family, n) == len(HAND_WRITTEN[family][n])
    assert np.array_equal(gram_1d(family, n), want.T @ want)  # the closed form, exactly
    assert np.array_equal(definition_1d(family, n), want)  # the tests' own builder too


def test_hand_written_counts_are_the_papers():
    """n queries per attribute for marginal and prefix, n(n+1)/2 for range and n^2 for circular
    (Table 4: e.g. circular 1-way + 2-way on [10]^40 is 40 * 10^2 + 780 * 10^4 = 7,804,000)."""
    for n in (1, 2, 3, 4):
        assert [len(HAND_WRITTEN[f][n]) for f in ("marginal", "prefix", "range", "circular")] == [
            n,
            n,
            n * (n + 1) // 2,
            n * n,
        ]
    assert 40 * 10**2 + 780 * 10**4 == 7_804_000 and 40 * 55 + 780 * 55**2 == 2_361_700


@pytest.mark.parametrize("family", ["marginal", "prefix", "range", "circular"])
@pytest.mark.parametrize("n", [5, 6, 9])
def test_1d_families_beyond_the_hand_written_sizes_follow_the_definition(family, n):
    want = definition_1d(family, n)
    assert np.array_equal(query_matrix_1d(family, n), want)
    assert count_1d(family, n) == want.shape[0]
    assert np.allclose(gram_1d(family, n), want.T @ want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("family, n1, n2", list(PAIRS))
def test_pair_families_are_the_hand_written_matrices(family, n1, n2):
    want = np.array(PAIRS[family, n1, n2], dtype=float)
    got = pair_query_matrix(family, n1, n2)
    assert got.shape == want.shape and np.array_equal(got, want)
    assert pair_count(family, n1, n2) == want.shape[0]
    assert np.array_equal(pair_matrix(family, n1, n2), want)


@pytest.mark.parametrize("family", ["affine", "abs"])
@pytest.mark.parametrize("n1, n2", [(4, 4), (2, 5), (5, 3)])
def test_pair_families_follow_the_definition(family, n1, n2):
    assert np.array_equal(pair_query_matrix(family, n1, n2), pair_matrix(family, n1, n2))
    assert pair_count(family, n1, n2) == {"affine": n1 + n2 - 1, "abs": max(n1, n2)}[family]


def test_random_queries_follow_the_documented_recipe():
    """3 x cells rows of 0/1, each cell 1 with probability 0.3, from a generator seeded with
    (seed, *attrs): a view's queries depend on its seed and on which attributes it is on."""
    q = random_query_matrix((10, 10), 4, (0, 2))
    rng = np.random.default_rng([4, 0, 2])
    assert np.array_equal(q, (rng.random((300, 100)) < 0.3).astype(float))
    assert abs(q.mean() - 0.3) < 5 * np.sqrt(0.21 / q.size)
    assert not np.array_equal(q, random_query_matrix((10, 10), 4, (0, 1)))
    assert not np.array_equal(q, random_query_matrix((10, 10), 5, (0, 2)))


SPECS = ["marginal:1,2", "prefix:1,2", "range:1,2", "circular:1,2", "hybrid:1,2", "affine:2", "abs:2", "random:1,2"]


@pytest.mark.parametrize("spec", SPECS)
def test_workload_views_have_the_hand_written_queries(small_schema, spec):
    """Every view of a workload on the (3, 4, 2, 3) schema: the library's query count and the
    queries it answers (its resolved 1-D factors, or its explicit matrix) are the hand-written ones;
    hybrid is prefix on numeric attributes and marginal on categorical ones (B)."""
    w = parse_workload(spec, small_schema)
    k = {int(c) for c in spec.split(":")[1].split(",")}
    from itertools import combinations

    assert [v.attrs for v in w.views] == [a for r in sorted(k) for a in combinations(range(4), r)]
    for v in w.views:
        want = view_queries(w, v)
        assert w.view_count(v) == want.shape[0]
        if v.factors:
            got = np.ones((1, 1))
            for f, i in zip(v.factors, v.attrs):
                got = np.kron(got, query_matrix_1d(f, small_schema.sizes[i]))
            if v.family == "hybrid":
                assert v.factors == tuple("marginal" if i == 1 else "prefix" for i in v.attrs)
            table = np.random.default_rng(0).integers(0, 9, [small_schema.sizes[i] for i in v.attrs])
            assert np.allclose(product_answers(w, v, table), want @ table.ravel())  # the tests' mode products
        else:
            got = view_query_matrix(w, v)
        assert np.array_equal(got, want)
