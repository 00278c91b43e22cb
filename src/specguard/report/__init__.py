"""The reports: ``model`` (the data, pydantic), ``build`` (what computes it from runs, verdicts and the canary's
records) and ``render`` (pure renderers, registered by format in ``render/outputs.py``). Nothing here imports the
check package (tests/unit/report/test_report.py and tests/unit/test_layering.py hold it).
"""
