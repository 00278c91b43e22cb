"""The control loop (``controller``), its wiring (``run``), the rollout's hooks, the admin API and the status document.

May import: every other plane of the canary.
"""
