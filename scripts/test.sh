#!/usr/bin/env bash
# `make test`: the whole suite, in the order that fits CI's 40 minutes on 2 cores (README: Tests).
#   1. the system tier without vLLM, alone on the machine: its timing checks (the proxy's p99.9 chunk gap, the
#      scripted server's schedule) must not share the cores with anything;
#   2. the system tier's vLLM tests in the foreground, and meanwhile the unit tier (tests/unit, tests/cli) on two
#      pytest-xdist workers at nice 19: it takes the cores only when the vLLM servers leave them idle (startups,
#      waits between requests), so its ~400 s of CPU leaves the critical path. Its output follows the system's.
# Each pytest session's exit code counts (5, no tests, fails like any other); the first failure is the exit code.
# Interrupted, the background unit tier is killed with its workers: no process outlives the script.
set -uo pipefail
case "$0" in */*) cd "${0%/*}/.." ;; *) cd .. ;; esac
py=.venv/bin/python

"$py" -m pytest tests/system -m "not vllm" --durations=25 || exit $?

unit_log=$(mktemp)
set -m  # the background job in its own process group, so that it is killed with its xdist workers
nice -n 19 "$py" -m pytest tests/unit tests/cli -n 2 --durations=10 -p no:cacheprovider >"$unit_log" 2>&1 &
unit=$!
set +m
trap 'kill -- -"$unit" 2>/dev/null; rm -f "$unit_log"' EXIT
trap 'exit 130' INT TERM

"$py" -m pytest tests/system -m vllm --durations=25
system_rc=$?
wait "$unit"
unit_rc=$?
echo
echo "---- the unit tier (tests/unit, tests/cli), run beside the vLLM tests ----"
cat "$unit_log"
if [ "$system_rc" -ne 0 ]; then exit "$system_rc"; fi
exit "$unit_rc"
