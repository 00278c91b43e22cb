"""Pure functions: per-request metric definitions, percentiles, run summaries."""
