"""The rollout file: one model per key (``rollout``, ``engine``, ``metrics``, ``grafana``) and the core vocabulary.

May import: nothing else of the canary; below it only the shared file-format helpers (``models_base``,
``validation``, ``yaml_files``), ``errors``, ``vllm``, ``analysis`` and ``check``'s plan models.
"""
