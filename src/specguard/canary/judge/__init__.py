"""Pure: the window verdicts (``window``: candidate against baseline on request records; ``histogram_judge`` and
``histogram_tests``: on the pools' server-side histograms), the rollout rule (``decision``) and the adapter from
the rollout file (``policy``). No module here does I/O.

May import: ``spec`` and ``state``'s record models only.
"""
