"""Corrupted plan and measurements files of every mechanism kind through measure and reconstruct
(issue 19 item 7): exit 0 or 2, on 2 one line and nothing written, never a traceback, a crash or a
hang, inputs unchanged, and a corrupted plan that measures is never released above its budget.
The harness is tests/filefuzz.py; ``python tests/filefuzz.py`` prints the outcome counts."""

from collections import Counter

import h5py
import pytest

import filefuzz as ff


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return ff.build_corpus(tmp_path_factory.mktemp("corpus"))


def test_the_corpus_holds_every_mechanism_kind(corpus):
    """The fuzz covers what it claims: kron, dense X stored as eigenpairs, lowrank held over its
    query factor, fourier, random views, HDMM with Gaussian (several blocks) and Laplace noise."""
    kinds = set()
    for name, files in corpus.items():
        with h5py.File(files["plan"], "r") as f:
            if f.attrs["kind"] == "hdmm-plan":
                kinds.add(f"hdmm-{f.attrs['noise']}")
                if f.attrs["noise"] == "gaussian":
                    assert len(f["groups/0/strategy/weights"]) > 1
            else:
                kinds |= {(g.attrs["kind"], g.attrs.get("storage", "")) for g in f["solutions"].values()}
                if name == "random":
                    assert "random" in f.attrs["workload"]
    assert {("kron", ""), ("lowrank", "eigenpairs"), ("lowrank", "query-factor"), ("fourier", ""), "hdmm-gaussian", "hdmm-laplace"} <= kinds


def _check(corpus, variants, work):
    results = ff.run_all(corpus, variants, work)
    failures = [f"{ff.describe(m)} | {r['command']} | {'; '.join(ff.problems(r))}"
                for m, runs in zip(variants, results) for r in runs if ff.problems(r)]
    assert not failures, f"{len(failures)} failing runs:\n" + "\n".join(failures[:30])
    return ff.report(results, variants)


def test_a_sample_of_corrupted_files_is_refused_in_one_line_or_measured_within_budget(corpus, tmp_path):
    variants = ff.sample_variants(corpus, n_field=28, n_flip=14, seed=7)
    assert len(variants) >= 40
    counts = _check(corpus, variants, tmp_path)
    assert counts[("reconstruct", "refused (exit 2, one line)")] > 0  # the sample really corrupts


@pytest.mark.slow
def test_1600_corrupted_files_are_refused_in_one_line_or_measured_within_budget(corpus, tmp_path):
    """1,000 single-field corruptions (attributes, JSON keys, datasets: wrong type, shape, NaN, huge,
    negative, strings, absent) and 600 flipped bits or bytes and truncations, spread over the 14 files."""
    variants = ff.sample_variants(corpus, n_field=1000, n_flip=600, seed=19)
    assert len(variants) == 1600
    counts = _check(corpus, variants, tmp_path)
    both = Counter({k: n for k, n in counts.items() if k[0] == "measure"})
    # corrupted plans that still measure were checked for their privacy cost; others were refused
    assert both[("measure", "ok (exit 0)")] > 100 and both[("measure", "refused (exit 2, one line)")] > 300, counts
