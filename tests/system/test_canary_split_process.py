"""The traffic split's key hash in another process: the same key lands in the same pool under another hash seed.

The system tier (it starts Python child processes); the split's pure properties are in
tests/unit/canary/test_split.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

from specguard.canary.proxy.split import key_hash


def test_key_hash_is_the_same_in_a_new_process_with_another_hash_seed() -> None:
    keys = ["alice", "bob", "x-user-7", "ünïcode"]
    code = "import sys; from specguard.canary.proxy.split import key_hash; print([key_hash(k) for k in sys.argv[1:]])"
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", code, *keys], env=env, capture_output=True, text=True, check=True)
        outputs.add(run.stdout.strip())
    assert outputs == {str([key_hash(k) for k in keys])}
