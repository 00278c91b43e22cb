"""The embedded default: a real vLLM CPU runtime in its own environment, a small local model set."""
