"""Gate 5, the canary, in planes; each folder's ``__init__`` says what it holds and what it may import.

From the bottom up: ``spec`` (the rollout file and the core vocabulary), ``state`` (the SQLite store, its
records, the JSONL mirror), ``proxy`` (the data plane), ``judge`` (pure: the window verdicts and the rollout
rule), ``observability`` (generated rules and dashboard), ``evidence`` (what a window is judged on),
``routers`` (what moves the traffic), ``notify`` (Grafana annotations at run time), ``ops`` (systemd units, the
runbook, the HAProxy configuration, pool launching) and ``control`` (the loop, its wiring, hooks, the admin
API, status). ``report.py`` builds the canary's report from ``spec``, ``state`` and ``judge``.
"""
