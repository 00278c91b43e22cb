"""Telling people while the canary runs: every decision posted to Grafana as an annotation.

May import: ``spec``, ``state`` (the events it posts) and ``observability`` (the dashboard it annotates).
"""
