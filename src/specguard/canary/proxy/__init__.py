"""The data plane: specguard's reverse proxy, its HTTP client for the pools, the split and the balancers,
usage stripping, the proxy's own metrics and the request capture.

May import: ``spec`` and ``state`` (the record it writes per upstream attempt); nothing that judges or controls.
"""
