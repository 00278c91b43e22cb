"""Scripted backends for fault injection and exact timing checks; never a substitute for vLLM."""
