"""What moves the candidate's share of traffic: specguard's proxy, HAProxy's runtime API or a Gateway API
``HTTPRoute``, chosen by the rollout's ``engine:``.

May import: ``spec``, ``proxy``, ``evidence`` (HAProxy's stats page) and ``control.hooks``' argument-list runner
(the Gateway's ``kubectl apply``).
"""
