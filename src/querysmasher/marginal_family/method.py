"""Method ``qsplus``: the whole-workload planner (:mod:`querysmasher.methods`) over
:func:`.planner.plan`; its options (:data:`OPTIONS`) are ``target_gap``, ``max_view_cells``,
``max_seconds`` (``max_view_size``, ``max_iterations``, ``tie`` too). Plans are of kind ``marginal-plan``."""

from __future__ import annotations

from ..options import Option, check_options

__all__ = ["QSPlusPlanner", "OPTIONS"]

OPTIONS = (
    Option("target_gap", "number", "relative duality gap to certify (default 1e-4)", low=0, high=1, open_low=True,
           open_high=True),
    Option("max_view_cells", "int", "views of more cells keep their qs mechanisms (default: chosen from the schema)",
           low=1, none=True),
    Option("max_seconds", "number", "time limit of the descent, in seconds (default 3,600)", low=0, open_low=True),
    Option("max_view_size", "int", "views of 2..this many attributes get a marginal-space mechanism (default 2)",
           low=2),
    Option("max_iterations", "int", "iteration limit of the descent (default 20,000)", low=1),
    Option("tie", "bool", "one mechanism shared by every view, for a workload symmetric under attribute permutations "
           "only (default: tied exactly when it is)", none=True),
)


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
        """Why qsplus cannot plan ``workload`` ("" when it can): it needs a view of 2+ attributes."""
        if not any(len(v.attrs) >= 2 for v in workload.views):
            return "has no view of 2 or more attributes (qsplus is qs there)"
        return ""

    @staticmethod
    def measurable(schema) -> bool:
        """Measure and reconstruct work on marginals only: any schema."""
        return True

    def plan(self, schema, workload, budget, *, objective: str = "sum"):
        from .planner import plan

        return plan(schema, workload, budget, **self.options)
