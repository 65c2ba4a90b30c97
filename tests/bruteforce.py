"""Full-domain constructions for brute-force checks on small schemas (tests only).

They live in :mod:`querysmasher.testing` (the solver contract kit uses them too); re-exported here
for the tests that import them by this name.
"""

from querysmasher.testing import full_privacy_gram, full_workload, marginal_map, pinv, view_queries

__all__ = ["full_privacy_gram", "full_workload", "marginal_map", "pinv", "view_queries"]
