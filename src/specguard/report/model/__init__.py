"""The report data: what a check's report (``data``) and a canary's (``canary_data``) show, finished.

Pydantic models only, built by ``report.build`` and the check side, read by ``report.render``; nothing here
computes a figure or reads a file.
"""
