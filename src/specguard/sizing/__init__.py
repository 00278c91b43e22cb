"""Gate 3: KV-cache memory with and without speculation. Pure formulas, apart from reading config.json."""
