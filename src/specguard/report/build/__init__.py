"""What computes report data from runs and verdicts: the forest plot's rows (``forest``), the greedy-output
table (``greedy_table``), warnings grouped by kind (``warning_groups``) and the canary's report (``canary``, from
the controller's state, event log and proxied requests). They return ``report.model`` objects; rendering is
``report.render``'s.
"""
