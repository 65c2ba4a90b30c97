"""HDMM plan, measurement and answer files, for the ``plan``/``measure``/``reconstruct`` commands.

An HDMM plan file (format ``HDMM_PLAN_FORMAT``) stores the noise (``gaussian`` with its zCDP budget,
or ``laplace`` with its pure ε), the template search (the templates requested, the winner, every
candidate's total variance and planning time) and the winning strategy itself: per group, the
workload views it answers, its distinct per-attribute factors (Gram factors for Gaussian noise,
explicit rows for Laplace noise), block index and block weights. Loading never re-runs the (randomised) optimisers: it
rebuilds each strategy, checks that it is a valid strategy at privacy cost 1 (Gaussian: PSD factors
with max diagonal 1, unit diagonals and orthogonal blocks in a union; Laplace: non-negative factors
whose columns all have L1 norm 1 and block weights summing to 1, i.e. L1 sensitivity 1), recomputes every group's expected error from the stored strategy and refuses the file
unless they equal the recorded ones (relative ``VERIFY_RTOL``: the recomputation runs eigen-
decompositions, whose rounding differs across BLAS builds far below that); the winner must be a
known template whose recorded candidate error is the plan's and no lower than any other candidate's.
Files of earlier formats (1: only the optimiser's seed; 2: the strategy under the old optimiser
names, without the template search) are refused in one line. Measuring and reconstructing
need the full data vector, so they refuse domains above ``MAX_DOMAIN_CELLS``.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from ..accounting import Budget
from ..data import Records
from ..errors import InputError
from ..io import atomic_h5, get_json, new_group, open_h5, put, put_json
from ..schema import Schema
from ..workload import parse_workload
from .implicit import ImplicitWorkload, KronStrategy
from .laplace import LaplaceStrategy, PureBudget
from .plan import MAX_DOMAIN_CELLS, TEMPLATES, Candidate, HDMMGroup, HDMMMeasurements, HDMMPlan, check_domain, hdmm_measure, hdmm_reconstruct

__all__ = ["HDMM_PLAN_FORMAT", "save_hdmm_plan", "load_hdmm_plan", "check_measurable", "measure_hdmm_to_file", "reconstruct_hdmm_to_file"]

HDMM_PLAN_FORMAT = 3  # 1: seed only, re-optimised on load; 2: the strategy itself; 3: and the template search
VERIFY_RTOL = 1e-7
_PSD_RTOL = 1e-9


def _put_strategy(g: h5py.Group, s: KronStrategy | LaplaceStrategy) -> None:
    put(g, "sizes", np.asarray(s.sizes, dtype=np.int64))  # the schema's, or (cells,) for explicit OPT_0
    put(g, "index", s.index)
    put(g, "weights", s.weights)
    rows = isinstance(s, LaplaceStrategy)
    g.attrs["factors"] = "rows" if rows else "gram"
    mats = new_group(g, "mats")
    for i, fs in enumerate(s.factors if rows else s.mats):
        a = new_group(mats, str(i))
        for h, m in enumerate(fs):
            put(a, str(h), m)


def _get_strategy(g: h5py.Group, noise: str) -> KronStrategy | LaplaceStrategy:
    sizes = tuple(int(n) for n in g["sizes"][()])
    mats = g["mats"]
    factors = tuple(tuple(np.asarray(mats[str(i)][str(h)][()], dtype=float) for h in range(len(mats[str(i)]))) for i in range(len(mats)))
    index, weights = np.asarray(g["index"][()], dtype=np.int64), np.asarray(g["weights"][()], dtype=float)
    if str(g.attrs["factors"]) != ("rows" if noise == "laplace" else "gram"):
        raise ValueError(f"{g.attrs['factors']} factors in a {noise} plan")
    if noise == "laplace":
        return LaplaceStrategy(sizes, factors, index, weights)
    if len(factors) != len(sizes) or any(m.shape != (n, n) for fs, n in zip(factors, sizes) for m in fs):
        raise ValueError("factor shapes do not match the schema")
    return KronStrategy(sizes, factors, index, weights)


def save_hdmm_plan(plan: HDMMPlan, path: str | Path) -> None:
    with atomic_h5(path, kind="hdmm-plan") as f:
        f.attrs["hdmm_plan_format"] = HDMM_PLAN_FORMAT
        put_json(f, "schema", plan.schema.to_dict())
        f.attrs["workload"] = plan.workload.spec
        f.attrs["noise"] = plan.noise
        if plan.noise == "laplace":
            put_json(f, "budget", {"epsilon": plan.budget.epsilon})
        else:
            put_json(f, "budget", {"beta": plan.budget.beta, "source": plan.budget.source, "delta": plan.budget.delta})
        f.attrs["seed"] = plan.seed
        f.attrs["restarts"] = plan.restarts
        f.attrs["template"] = plan.template
        f.attrs["seconds"] = plan.seconds
        put_json(f, "templates", list(plan.templates))
        put_json(f, "candidates", {k: {"total_variance": c.total_variance, "seconds": c.seconds} for k, c in plan.candidates.items()})
        put_json(f, "notes", plan.notes)
        f.attrs["total_variance"] = plan.total_variance
        put_json(f, "summary", plan.summary())
        groups = new_group(f, "groups")
        for gi, grp in enumerate(plan.groups):
            g = new_group(groups, str(gi))
            g.attrs["error"] = grp.error
            put(g, "views", np.asarray(grp.views, dtype=np.int64))
            _put_strategy(new_group(g, "strategy"), grp.strategy)


def _refuse(path, reason: str) -> InputError:
    return InputError("hdmm plan file", str(path), reason)


def _verified_group(path, implicit: ImplicitWorkload, views: np.ndarray, strategy: KronStrategy | LaplaceStrategy, several: bool, recorded: float) -> HDMMGroup:
    """The group, after checking the stored strategy's privacy cost and recomputing its error."""
    laplace = isinstance(strategy, LaplaceStrategy)
    for i, fs in enumerate(() if laplace else strategy.mats):
        for m in fs:
            w = np.linalg.eigvalsh((m + m.T) / 2)
            if not np.allclose(m, m.T, rtol=0, atol=_PSD_RTOL) or w.min() < -_PSD_RTOL * max(w.max(), 1.0):
                raise _refuse(path, f"attribute {i} has a strategy factor that is not symmetric positive semidefinite")
            if several and not np.allclose(np.diag(m), 1.0, rtol=0, atol=_PSD_RTOL):
                raise _refuse(path, f"attribute {i} has a factor without unit diagonal in a plan of several groups")
    cost = strategy.sensitivity() if laplace else strategy.privacy_cost()
    if not np.isclose(cost, 1.0, rtol=VERIFY_RTOL, atol=0):
        raise _refuse(path, f"a stored strategy has {'L1 sensitivity' if laplace else 'privacy cost'} {cost!r}, not 1")
    if len(views) == 0 or views.min() < 0 or views.max() >= len(implicit):
        raise _refuse(path, "a group answers workload views that do not exist")
    if strategy.sizes == implicit.sizes:
        answered = implicit.subset(views)
    elif strategy.sizes == (implicit.cells,) and len(views) == len(implicit):  # explicit OPT_0 over the full domain
        answered = implicit.merged()
    else:
        raise _refuse(path, f"a stored strategy has attribute sizes {strategy.sizes}, not the schema's {implicit.sizes}")
    error = float(strategy.term_variances(answered).sum())
    if not np.isclose(error, recorded, rtol=VERIFY_RTOL, atol=0):
        raise _refuse(path, f"a stored strategy's expected error {error!r} differs from the recorded {recorded!r}")
    return HDMMGroup(views, strategy, error)


def load_hdmm_plan(path: str | Path) -> HDMMPlan:
    """The stored strategy, verified (privacy cost 1 per group, expected errors recomputed); never re-optimised."""
    with open_h5(path, "hdmm-plan") as f:
        version = int(f.attrs.get("hdmm_plan_format", 1))
        if version != HDMM_PLAN_FORMAT:
            held = "does not store the strategy" if version == 1 else "does not record the template search"
            raise _refuse(path, f"has HDMM plan format {version}, which {held}; this querysmasher reads {HDMM_PLAN_FORMAT}: re-run 'querysmasher plan'")
        schema = Schema.from_dict(get_json(f, "schema"))
        workload = parse_workload(str(f.attrs["workload"]), schema)
        b, noise = get_json(f, "budget"), str(f.attrs["noise"])
        if noise not in ("gaussian", "laplace"):
            raise _refuse(path, f"has noise {noise!r}, not 'gaussian' or 'laplace'")
        if set(b) != ({"epsilon"} if noise == "laplace" else {"beta", "source", "delta"}):
            raise _refuse(path, f"budget {sorted(b)} does not fit noise {noise!r}")
        budget = PureBudget(float(b["epsilon"])) if noise == "laplace" else Budget(b["beta"], b["source"], b["delta"])
        implicit = ImplicitWorkload.from_workload(workload)
        stored = f["groups"]
        several = len(stored) > 1
        groups = []
        for gi in range(len(stored)):
            g = stored[str(gi)]
            try:
                strategy = _get_strategy(g["strategy"], noise)
            except (ValueError, KeyError, IndexError) as exc:
                raise _refuse(path, f"group {gi} does not hold a valid strategy ({exc})") from None
            groups.append(_verified_group(path, implicit, np.asarray(g["views"][()], dtype=np.int64), strategy, several, float(g.attrs["error"])))
        template, templates = str(f.attrs["template"]), tuple(get_json(f, "templates"))
        candidates = _candidates(path, get_json(f, "candidates"), templates)
        plan = HDMMPlan(
            schema, workload, budget, template, tuple(groups), candidates, templates, int(f.attrs["seed"]), int(f.attrs["restarts"]),
            float(f.attrs["seconds"]), list(get_json(f, "notes")),
        )
        recorded = float(f.attrs["total_variance"])
    covered = np.sort(np.concatenate([g.views for g in plan.groups]))
    if not np.array_equal(covered, np.arange(len(workload.views))):
        raise _refuse(path, "its groups do not answer every workload view exactly once")
    if not np.isclose(plan.total_variance, recorded, rtol=VERIFY_RTOL, atol=0):
        raise _refuse(path, f"total variance {plan.total_variance!r} differs from the recorded {recorded!r}")
    _check_winner(path, plan)
    return plan


def _candidates(path, stored: dict, templates: tuple[str, ...]) -> dict[str, Candidate]:
    """The recorded candidates, each a requested template with a finite total variance."""
    if not templates or any(t not in TEMPLATES for t in templates):
        raise _refuse(path, f"requests templates {list(templates)}, not a non-empty list from {', '.join(TEMPLATES)}")
    out = {}
    for name, c in sorted(stored.items(), key=lambda kv: TEMPLATES.index(kv[0]) if kv[0] in TEMPLATES else len(TEMPLATES)):  # the search's order
        if name not in templates:
            raise _refuse(path, f"has a candidate {name!r} that is not among its requested templates {list(templates)}")
        try:
            out[name] = Candidate(float(c["total_variance"]), float(c["seconds"]))
        except (TypeError, KeyError, ValueError):
            raise _refuse(path, f"candidate {name!r} has no total variance and seconds") from None
        if not np.isfinite(out[name].total_variance):
            raise _refuse(path, f"candidate {name!r} has total variance {out[name].total_variance!r}")
    return out


def _check_winner(path, plan: HDMMPlan) -> None:
    """The recorded winner is a candidate, its recorded error is the loaded strategy's, and no candidate is lower."""
    won = plan.candidates.get(plan.template)
    if won is None:
        raise _refuse(path, f"its template {plan.template!r} is not among its candidates {sorted(plan.candidates)}")
    if not np.isclose(won.total_variance, plan.total_variance, rtol=VERIFY_RTOL, atol=0):
        raise _refuse(path, f"template {plan.template!r} is recorded with total variance {won.total_variance!r}, its strategy has {plan.total_variance!r}")
    lower = [k for k, c in plan.candidates.items() if c.total_variance < won.total_variance]
    if lower:
        raise _refuse(path, f"template {plan.template!r} is not the best candidate ({lower[0]!r} is lower)")


def check_measurable(plan: HDMMPlan, max_domain_cells: int = MAX_DOMAIN_CELLS) -> None:
    """Raise the one-line InputError when the full data vector would not fit (HDMM's real limit)."""
    check_domain(plan, max_domain_cells)


def _full_vector(plan: HDMMPlan, records: Records, max_domain_cells: int) -> np.ndarray:
    cells = check_domain(plan, max_domain_cells)  # refuse before allocating anything
    flat = np.ravel_multi_index(tuple(records.codes[:, i] for i in range(len(plan.schema))), plan.schema.sizes)
    return np.bincount(flat, minlength=cells).astype(float)


def measure_hdmm_to_file(plan: HDMMPlan, records: Records, rng, path: str | Path, *, seeded: bool,
                         plan_sha256: str, max_domain_cells: int = MAX_DOMAIN_CELLS) -> None:
    """The release for an HDMM plan: each group's noisy strategy answers, nothing else."""
    meas = hdmm_measure(plan, _full_vector(plan, records, max_domain_cells), rng, max_domain_cells=max_domain_cells)
    with atomic_h5(path, kind="measurements") as f:
        f.attrs["plan_sha256"] = plan_sha256
        f.attrs["seeded"] = bool(seeded)
        f.attrs["method"] = "hdmm"
        put_json(f, "budget", plan.budget.to_dict())
        groups = new_group(f, "groups")
        for gi, blocks in enumerate(meas.y):
            g = new_group(groups, str(gi))
            for bi, y in enumerate(blocks):
                put(g, str(bi), y)


def reconstruct_hdmm_to_file(plan: HDMMPlan, measurements: str | Path, out: str | Path, plan_sha256: str) -> dict:
    with open_h5(measurements, "measurements") as f:
        if str(f.attrs["plan_sha256"]) != plan_sha256:
            raise InputError("measurements file", str(measurements), "was made with a different plan (plan_sha256 differs)")
        groups = f["groups"]
        y = tuple(tuple(groups[str(gi)][str(bi)][()] for bi in range(len(groups[str(gi)]))) for gi in range(len(groups)))
    answers = hdmm_reconstruct(plan, HDMMMeasurements(y))
    offsets = np.concatenate([[0], np.cumsum([len(a) for a in answers])]).astype(np.int64)
    with atomic_h5(out, kind="answers") as f:
        f.attrs["workload"] = plan.workload.spec
        f.attrs["method"] = "hdmm"
        f.attrs["answers_written"] = True
        put_json(f, "budget", plan.budget.to_dict())
        g = new_group(f, "views")
        put(g, "answer_offsets", offsets)
        put(g, "answers", np.concatenate(answers) if answers else np.zeros(0))
    return {"views": len(answers), "queries": int(offsets[-1]), "answers_written": True}
