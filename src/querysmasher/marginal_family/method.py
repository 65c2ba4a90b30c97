"""Method ``qsplus``: the whole-workload planner (:mod:`querysmasher.methods`) over
:func:`.planner.plan`; its options are ``target_gap``, ``max_view_cells``, ``max_seconds``
(``max_view_size``, ``max_iterations``, ``tie`` too). Plans are of kind ``marginal-plan``."""

from __future__ import annotations

__all__ = ["QSPlusPlanner"]

OPTIONS = ("target_gap", "max_view_cells", "max_seconds", "max_view_size", "max_iterations", "tie")


class QSPlusPlanner:
    name = "qsplus"
    objectives = ("sum",)
    noises = ("gaussian",)
    neighbours = ("add-remove", "replace")
    plan_kind = "marginal-plan"

    def __init__(self, **options):
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TypeError(f"qsplus takes the options {', '.join(OPTIONS)}, not {', '.join(unknown)}")
        if "target_gap" in options and not 0 < float(options["target_gap"]) < 1:
            raise ValueError(f"target_gap must be in (0, 1), not {options['target_gap']!r}")
        if "max_seconds" in options and not float(options["max_seconds"]) > 0:
            raise ValueError(f"max_seconds must be positive, not {options['max_seconds']!r}")
        for k in ("max_view_cells", "max_iterations", "max_view_size"):
            if options.get(k) is not None and int(options[k]) < (2 if k == "max_view_size" else 1):
                raise ValueError(f"{k} must be a positive integer (max_view_size at least 2), not {options[k]!r}")
        self.options = dict(options)

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
