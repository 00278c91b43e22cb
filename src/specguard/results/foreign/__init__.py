"""Runs written by other tools, read as specguard runs so that ``compare`` (and a check's baseline) can use them.

Operators already hold results of ``vllm bench serve --save-result --save-detailed`` and of GuideLLM
(``benchmarks.json``). Each reader maps the other tool's per-request figures onto specguard's definitions
(docs/measurement.md, "How things are measured") and says, in ``LoadedRun.warnings``, what it could not map: a foreign
file has no prompt text or hash, no sampling values, and often no per-chunk token counts.
"""
