"""What a window is judged on: one ``EvidenceSource`` protocol (``base``) with one implementation per backend,
``records`` (the proxy's record of every request) and ``server_side`` (behind an engine: the pools' own series
from ``/metrics`` or Prometheus, ``metrics_source``, and HAProxy's or Prometheus' response counters,
``haproxy_stats``); ``scrape``, the one reader of the pools' pages; ``pool_watch``, crashes and restarts seen
in them; ``gauges``, a window's gauges and acceptance computed once for every source.

May import: ``spec``, ``state``'s record models, ``proxy`` (an upstream's address), ``judge`` and
``observability``'s label conventions.
"""
