"""Planners: what turns a workload and a budget into a plan (residual, max-variance, whole-domain).

* :mod:`.maxplan`: the max-variance planner (objective ``max``) over any per-view solver that
  declares it;
* :mod:`.mm`: the exact matrix mechanism over the whole domain (method ``mm``, small domains).

HDMM, the other whole-workload planner, is its own package (:mod:`querysmasher.hdmm`); the method
table (:mod:`querysmasher.methods`) lists them all.
"""
