"""Resource requests of the workflow's jobs: structural properties of the estimates (no timings or
measured figures here; the measured comparison is in BENCHMARKS.md, from bench/requests.py)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from querysmasher.decompose import GramTerm, SubworkloadGram, decompose
from querysmasher.hdmm.plan import FULL_DOMAIN_BYTES
from querysmasher.methods import get_method
from querysmasher.pipeline import cache, resources
from querysmasher.pipeline.config import Experiment
from querysmasher.schema import parse_schema
from querysmasher.solvers.base import SolveEstimate, estimate_solve, generic_estimate
from querysmasher.solvers.qs import QSSolver
from querysmasher.workload import parse_workload

ROOT = Path(__file__).resolve().parents[1]


def _pair_view(n: int, rows: int | None = None):
    """A two-attribute view with one dense term stored as a factor (rows x n^2), like affine/abs."""
    c = n * n
    rows = 2 * n - 1 if rows is None else rows
    g = SubworkloadGram((0, 1), (n, n), (GramTerm(1.0, ("f",), True),))
    return g, {"f": np.zeros((rows, c))}


def _dense_view(n: int):
    """A two-attribute view with one dense term stored whole (c x c), like random views."""
    c = n * n
    g = SubworkloadGram((0, 1), (n, n), (GramTerm(1.0, ("d",), True),))
    return g, {"d": np.zeros((c, c))}


@pytest.mark.parametrize("method", ["qs", "wff", "rpplus", "rp"])
def test_estimates_grow_with_the_view(method):
    solver = get_method(method).build()
    small, big = (estimate_solve(solver, *_pair_view(n)) for n in (20, 60))
    assert big.peak_bytes >= small.peak_bytes and big.seconds >= small.seconds
    if method != "rp":  # rp's closed form costs only its 1-D factors
        assert big.peak_bytes > small.peak_bytes


@pytest.mark.parametrize("method", ["qs", "wff", "rpplus", "rp"])
def test_no_dense_c2_term_where_the_solver_does_not_form_one(method):
    """A 10,000-cell view held as its query factor (199 x 10,000): no solver estimates a c x c
    matrix (800 MB) for it, and the job's request is far from the old model's 12.6 GB."""
    g, store = _pair_view(100)
    solver = get_method(method).build()
    est = estimate_solve(solver, g, store)
    assert est.peak_bytes < 8 * g.cells**2 / 4
    # doubling the cells at a fixed number of rows at most doubles the estimate (linear in c, not
    # quadratic), up to the 1-D factors' n x n arrays (n = 200 here)
    g2 = SubworkloadGram((0, 1), (100, 200), g.terms)
    est2 = estimate_solve(solver, g2, {"f": np.zeros((199, 20_000))})
    assert est2.peak_bytes <= 2.05 * est.peak_bytes + 64 * 200**2
    cost = cache.estimate_cost(g, store, method)
    assert cost["mem_mb"] < 2000


def test_the_dense_path_counts_its_c2_matrices():
    g, store = _dense_view(30)  # rank c > c / 2: the dense solve
    est = QSSolver().estimate(g, store)
    assert est.path == "dense" and est.peak_bytes >= 8 * g.cells**2


def test_qs_estimate_follows_the_path_solve_takes():
    s = parse_schema("synthetic:n=8,d=3")
    for spec, kind in (("prefix:1+affine:2", "lowrank"), ("prefix:1,2", "kron")):
        d = decompose(parse_workload(spec, s))
        solver = QSSolver()
        for g in d.distinct().values():
            if not g.sizes:
                continue
            est = solver.estimate(g, d.store)
            sol = solver.solve(g, d.store)
            if est.path == "kron":
                assert sol.mechanism.kind == "kron"
            elif est.path == "factored" and sol.solver == "qs":
                assert sol.mechanism.kind == kind == "lowrank"
    tight = QSSolver(memory_budget_mb=1e-6)
    g, store = _pair_view(20)
    assert tight.estimate(g, store).path == "fallback"


def test_a_solver_without_an_estimate_gets_the_generic_one():
    class Plain:
        name = "plain"

        def solve(self, gram, store):  # pragma: no cover - never called
            raise AssertionError

    g, store = _dense_view(10)
    assert estimate_solve(Plain(), g, store) == generic_estimate(g)
    assert isinstance(generic_estimate(g), SolveEstimate)


def test_batches_hold_the_largest_work_and_every_solution():
    costs = [{"seconds": 1.0, "work_mb": 50.0, "result_mb": 2.0}, {"seconds": 2.0, "work_mb": 10.0, "result_mb": 3.0}]
    b = cache.batch_cost(costs, context_mb=7.0, context_seconds=4.0)
    assert b["seconds"] == 7.0
    assert b["mem_mb"] == cache.BASE_MEM_MB + 7 + 50 + 5


def test_a_retry_asks_for_double():
    assert [resources.retry(300, a) for a in (1, 2, 3)] == [300, 600, 1200]


def test_stage_requests_grow_with_the_records_and_the_views():
    def exp(schema, workload, records):
        return Experiment(
            "x", "s", schema, False, workload, "qs", 1.0, 0, {"synthetic": {"records": records, "seed": 0}}
        )

    small = resources.stage_resources("measure", exp("synthetic:n=10,d=3", "prefix:1,2", 1_000))
    more_records = resources.stage_resources("measure", exp("synthetic:n=10,d=3", "prefix:1,2", 10_000_000))
    bigger_views = resources.stage_resources("reconstruct", exp("synthetic:n=100,d=3", "prefix:1+affine:2", 1_000))
    smaller_views = resources.stage_resources("reconstruct", exp("synthetic:n=10,d=3", "prefix:1+affine:2", 1_000))
    assert more_records["mem_mb"] > small["mem_mb"] >= cache.BASE_MEM_MB
    assert bigger_views["mem_mb"] > smaller_views["mem_mb"]
    plan_only = resources.stage_resources(
        "measure", exp("synthetic:n=10,d=3", "prefix:1,2", 10_000_000), measured=False
    )
    assert plan_only["mem_mb"] < more_records["mem_mb"]
    with pytest.raises(ValueError):
        resources.stage_resources("nope", exp("synthetic:n=10,d=3", "prefix:1,2", 1))


def test_no_rule_requests_a_fixed_figure():
    """Every rule's mem_mb and runtime come from an estimate (a callable), never a literal number."""
    fixed = []
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        for m in re.finditer(r"^\s+(mem_mb|runtime)=(\d[\d_]*)\s*,?\s*$", smk.read_text(), re.M):
            fixed.append(f"{smk.name}: {m.group(0).strip()}")
    assert not fixed, fixed


def test_a_whole_workload_allocate_does_not_hold_the_data_vector():
    """HDMM's allocate plans (its Kronecker workload terms); only its measured stages hold the full
    data vector."""
    e = Experiment(
        "x", "s", "synthetic:n=10,d=8", False, "prefix:1,2", "hdmm", 1.0, 0, {"synthetic": {"records": 100, "seed": 0}}
    )
    alloc = resources.stage_resources("allocate", e)["mem_mb"]
    measure = resources.stage_resources("measure", e, measured=True)["mem_mb"]
    assert alloc < measure
    assert measure - alloc >= FULL_DOMAIN_BYTES * min(10**8, 10**7) / 2**20 - 200


def test_whole_workload_requests_come_from_what_the_planner_declares(monkeypatch):
    """A planner's own estimate (``resources(workload, stage)``) is what its jobs ask for, on top of
    the process and the streamed views; qsplus asks for its family's dense views (the [20]^5
    all-pairs plan peaked at 1.4 GB on 2 cores), not HDMM's Kronecker model (1 MB there)."""
    from querysmasher.marginal_family.method import QSPlusPlanner

    e = Experiment(
        "x",
        "s",
        "synthetic:n=20,d=5",
        False,
        "marginal:2",
        "qsplus",
        1.0,
        0,
        {"synthetic": {"records": 100, "seed": 0}},
    )
    alloc = resources.stage_resources("allocate", e)
    assert alloc["mem_mb"] >= 1400 and alloc["mem_mb"] <= 3 * 1400 + 500
    own = QSPlusPlanner.resources(parse_workload("marginal:2", parse_schema("synthetic:n=20,d=5")), "allocate")[
        "mem_mb"
    ]
    monkeypatch.setattr(
        QSPlusPlanner, "resources", staticmethod(lambda w, stage: {"mem_mb": 10_000.0, "seconds": 3600.0})
    )
    bigger = resources.stage_resources("allocate", e)
    assert abs(bigger["mem_mb"] - alloc["mem_mb"] - (10_000 - own)) <= 1 and bigger["runtime"] >= 60


def test_an_allocate_without_the_max_variance_report_asks_for_one_thread_and_less_memory():
    """The per-query variance report forks workers over large dense solutions; an allocate that
    leaves it out (allocate.max_variance: false) asks for one thread and for the solutions it holds
    alone (the n = 50 random row asked for 4,835 MB and used 346 MB)."""
    e = Experiment("x", "s", "synthetic:n=40,d=40", False, "random:1,2", "qs", 1.0, 0, {})
    big = {"subproblems": [{"cost": {"result_mb": 48.0}}] * 780}  # 780 dense 2,500-cell solutions
    assert resources.stage_threads("allocate", e, big) > 1
    assert resources.stage_threads("allocate", e, big, max_variance=False) == 1
    with_report = resources.stage_resources("allocate", e, big)["mem_mb"]
    without = resources.stage_resources("allocate", e, big, max_variance=False)["mem_mb"]
    assert without < with_report / 2
    assert without >= cache.BASE_MEM_MB + 4 * 48.0  # still the solutions it holds at once
