"""What an operator installs around a rollout: systemd units and their argument lists, the runbook, the HAProxy
configuration that matches a rollout (``haproxy-config``), and launching the pools a rollout describes.

May import: ``spec``, ``proxy`` (an upstream's address) and ``routers`` (HAProxy's weights).
"""
