"""Method ``qsplus``: the whole-workload planner (:mod:`querysmasher.methods`) over
:func:`.planner.plan`; its options (:data:`OPTIONS`) are ``target_gap``, ``max_view_cells``,
``max_seconds`` (``max_view_size``, ``max_iterations``, ``tie`` too). Plans are of kind ``marginal-plan``."""

from __future__ import annotations

from ..options import Option, check_options
from .planner import default_family_cells, plan
from .problem import marginal_view_attrs

__all__ = ["QSPlusPlanner", "OPTIONS"]

OPTIONS = (
    Option(
        "target_gap",
        "number",
        "relative duality gap to certify (default 1e-4)",
        low=0,
        high=1,
        open_low=True,
        open_high=True,
    ),
    Option(
        "max_view_cells",
        "int",
        "views of more cells keep their qs mechanisms (default: chosen from the schema)",
        low=1,
        none=True,
    ),
    Option(
        "max_seconds",
        "number",
        "time limit of the plan (the qs start included), in seconds: when it passes, the "
        "best certified point is returned with its gap (default 3,600)",
        low=0,
        open_low=True,
    ),
    Option(
        "max_view_size", "int", "views of 1..this many attributes get a marginal-space mechanism (default 2)", low=1
    ),
    Option("max_iterations", "int", "iteration limit of the descent (default 20,000)", low=1),
    Option(
        "tie",
        "bool",
        "one mechanism shared by every view, for a workload symmetric under attribute permutations "
        "only (default: tied exactly when it is)",
        none=True,
    ),
)


PLAN_GRAM_COPIES = 105  # planning's peak, in dense cells x cells matrices per marginal view (see resources)
PLAN_SECONDS_PER_CUBE = 3e-7  # planning's time per cubed cell of a marginal view (1.9e-7 measured, with room)
RELEASE_GRAM_COPIES = 6  # measure / reconstruct: the view's operator, its normal-equation blocks and their factors


class QSPlusPlanner:
    name = "qsplus"
    objectives = ("sum",)
    noises = ("gaussian",)
    neighbours = ("add-remove", "replace")
    plan_kind = "marginal-plan"
    option_specs = OPTIONS

    def __init__(self, **options):
        self.options = check_options(self.name, self.option_specs, options)

    @staticmethod
    def unsupported(workload) -> str:
        """Why qsplus cannot plan ``workload`` ("" when it can): it needs an attribute of size above 1."""
        if not marginal_view_attrs(workload, max_view_size=len(workload.schema)):
            return "has no attribute of size above 1 (every query is the total: qsplus is qs there)"
        return ""

    @staticmethod
    def measurable(schema) -> bool:
        """Measure and reconstruct work on marginals only: any schema."""
        return True

    @staticmethod
    def resources(workload, stage: str) -> dict:
        """What a job of ``stage`` holds and takes beyond the workflow's own model
        (:mod:`querysmasher.pipeline.resources`): the family's marginal views (the default family:
        :func:`.planner.default_family_cells`), about ``PLAN_GRAM_COPIES`` dense cells x cells
        matrices each while planning and ``RELEASE_GRAM_COPIES`` while measuring and reconstructing
        (the eliminated normal equations), and time in the cube of their cells. Fitted on 2 cores,
        ``querysmasher plan --method qsplus --workload marginal:2`` under ``/usr/bin/time``:
        [20]^5 (10 views of 400 cells) 1.28 GB above the process and 117 s; [10]^8 (28 of 100)
        88 MB and 3.3 s."""
        cells = default_family_cells(workload)
        squares = 8.0 * sum(c * c for c in cells) / 2**20
        if stage == "allocate":
            return {
                "mem_mb": PLAN_GRAM_COPIES * squares,
                "seconds": PLAN_SECONDS_PER_CUBE * sum(float(c) ** 3 for c in cells),
            }
        return {"mem_mb": RELEASE_GRAM_COPIES * squares, "seconds": 0.0}

    def plan(self, schema, workload, budget, *, objective: str = "sum"):
        return plan(schema, workload, budget, **self.options)
