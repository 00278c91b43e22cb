"""Where a check plan's launched arms come from: ``embedded`` (the vLLM CPU runtime and ``embedded:`` model names)
and ``simulated`` (specguard's simulated server for ``sim:`` arms). Each builds a ``check.launch.Launcher``; the
generic runner (``check/runner.py``) knows neither. They sit above ``embedded/`` and ``sim/``, which import nothing
of the check.
"""
