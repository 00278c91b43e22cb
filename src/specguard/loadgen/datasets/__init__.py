"""Real prompt sources: ShareGPT, Spec-Bench, SPEED-Bench, generic JSON/JSONL/CSV/Parquet, and synthetic:lengths.

One module per format, each turning validated records into ``PromptItem``s; ``load.py`` dispatches and
builds the one ``PromptSet``. ``options.py`` holds the reading options shared by ``bench`` and check plans.
"""
