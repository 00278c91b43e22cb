"""Knowledge of vLLM itself: how to start its OpenAI server from a typed spec, and manage the process."""
