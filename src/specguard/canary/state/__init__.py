"""The canary's state: the SQLite store, the records it holds (requests, controller state, events) and the
JSONL mirror of the event log.

May import: ``spec`` only.
"""
