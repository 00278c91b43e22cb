#!/usr/bin/env bash
# Get Vidur (github.com/microsoft/vidur) for bench/sim_speed.py: its source, its own venv, and the one profile
# its snapshot lacks. Vidur is not a dependency of specguard and never enters specguard's venv.
#
#   bench/vidur_setup.sh VIDUR_SRC VIDUR_VENV [VIDUR_GIT_DIR]
#
# VIDUR_SRC: where Vidur's files go. VIDUR_VENV: a new venv for Vidur's requirements.txt (numpy, pandas,
# scikit-learn, wandb, ...; from the package index). VIDUR_GIT_DIR: a local (bare) clone to take the files
# from; without it the script clones https://github.com/microsoft/vidur. Measured with commit 7d47513
# (2024-11-19).
#
# Vidur's attention.csv files are Git LFS objects and absent from the snapshot (and a clone without git-lfs
# holds pointer files), and Vidur will not start without the one for its model, so this writes
# data/profiling/compute/h100/meta-llama/Llama-2-70b-hf/attention.csv from a roofline
# (bench/vidur_attention_profile.py: the rows and grid of Vidur's attention profiler, times from H100
# bandwidth and FLOP/s). That file is synthetic: it changes what Vidur predicts, not how fast it runs.
# A real profile (git lfs pull) is kept.
#
# Then: PYTHONPATH=src .venv/bin/python bench/sim_speed.py --vidur-python VIDUR_VENV/bin/python --vidur-src VIDUR_SRC
set -euo pipefail
src=${1:?VIDUR_SRC}
venv=${2:?VIDUR_VENV}
gitdir=${3:-}
here=$(cd "$(dirname "$0")" && pwd)

if [ ! -f "$src/vidur/main.py" ]; then
  mkdir -p "$src"
  if [ -z "$gitdir" ]; then
    gitdir="$src.git"
    git clone --bare https://github.com/microsoft/vidur "$gitdir"
  fi
  # File by file, not git archive: archive stops at the first missing (LFS) blob.
  git --git-dir="$gitdir" ls-tree -r HEAD | while read -r _mode _type sha path; do
    mkdir -p "$src/$(dirname "$path")"
    if ! git --git-dir="$gitdir" cat-file blob "$sha" >"$src/$path" 2>/dev/null; then
      rm -f "$src/$path"
      echo "absent from the snapshot: $path"
    fi
  done
fi

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -r "$src/requirements.txt"
fi

att="$src/data/profiling/compute/h100/meta-llama/Llama-2-70b-hf/attention.csv"
if [ ! -s "$att" ] || head -c 200 "$att" | grep -q "git-lfs"; then
  python3 "$here/vidur_attention_profile.py" --out "$att"
fi
"$venv/bin/python" -c "import sys; sys.path.insert(0, '$src'); import vidur.main" && echo "Vidur ready in $src"
