"""What a window is judged on besides the proxy's records: the pools' ``/metrics`` read directly or from
Prometheus, HAProxy's per-server counters, the pool watcher's gauges and critical events.

May import: ``spec``, ``proxy`` (an upstream's address), ``judge`` (the histogram judge) and ``observability``'s
label conventions.
"""
