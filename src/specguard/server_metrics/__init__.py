"""Scraping a vLLM server's /metrics: name mapping across versions, parsing, counter deltas."""
