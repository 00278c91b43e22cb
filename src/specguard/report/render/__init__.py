"""Pure renderers of ``report.model``: report.md, report.html (jinja2 + inlined plotly), cells.csv, the
terminal's verdict and tables, the partial report, the canary's report.md and report.html, and the live progress
displays. They read no file and compute no statistic; each output format is registered by name.
"""
