"""specguard: production-readiness gates for speculative decoding on vLLM."""

__version__ = "0.1.0"
