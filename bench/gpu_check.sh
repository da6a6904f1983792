#!/usr/bin/env bash
# The GPU check in one command, for a machine with a CUDA GPU, Python 3.12, torch and
# transformers, and no network: the wheels `make gpu-wheels` put in .gpu-wheels/ travel
# with the working tree and go into a venv that sees the system's packages; rewardserve is
# imported from this tree (links, as `make typecheck` makes them: no build step, which
# would want setuptools from the network). Then the GPU tests (those that skip without
# CUDA) and bench/gpu_check.py, which writes bench/results/gpu.md. About 8 minutes at most.
#
#   bench/gpu_check.sh               on the GPU machine (the device tool's run, with
#                                    carry: [".gpu-wheels"]; the results also land in $OUT)
#   bench/gpu_check.sh --cpu-dry-run here: the same steps in .venv, tiny shapes, on the CPU
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DRY=""
if [ "${1:-}" = "--cpu-dry-run" ]; then DRY=--cpu-dry-run; fi
LINKS=$(mktemp -d)/src
mkdir -p "$LINKS/rewardserve"
for d in client models service cli; do ln -s "$ROOT/$d" "$LINKS/rewardserve/$d"; done

if [ -n "$DRY" ]; then
    PY=$ROOT/.venv/bin/python
else
    VENV=${GPU_CHECK_VENV:-/tmp/rewardserve-gpu-venv}
    # No pip of its own (ensurepip may be missing there): the system's pip, seen through
    # --system-site-packages, installs into the venv it runs in.
    python3 -m venv --without-pip --system-site-packages "$VENV"
    PY=$VENV/bin/python
    # What pyproject's serve extra asks for, less what is left out (bench/gpu/left_out.txt),
    # and the test runner: what the machine has already stands, the rest comes from the wheels.
    grep -v '^#' .gpu-wheels/serve.in | grep -v '^$' \
        | grep -viE "^($(grep -v '^#' bench/gpu/left_out.txt | cut -d' ' -f1 | paste -sd'|'))([ <>=!;\[]|$)" \
        > "$VENV/wanted.txt"
    "$PY" -m pip install --quiet --no-index --find-links .gpu-wheels -r "$VENV/wanted.txt"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
fi
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -z "$DRY" ]; then printf '%s\n%s\n' "$LINKS" "$ROOT" > "$SITE/rewardserve-tree.pth"; fi
export PYTHONPATH="$LINKS:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

# The tests that skip without CUDA (`skipif(not ...cuda.is_available())`), by name.
mapfile -t GPU_TESTS < <(grep -rn -A3 'cuda.is_available(), reason' tests --include='*.py' \
    | sed -n 's/^\(tests\/[^-]*\.py\)-[0-9]*-\(async \)\{0,1\}def \(test_[a-z0-9_]*\).*/\1::\3/p' | sort -u)
echo "GPU tests: ${GPU_TESTS[*]}"
status=0
# Bounded so that the whole stays within 8 minutes: a hang fails its step, not the run.
timeout 150 "$PY" -m pytest -q -rs -p no:cacheprovider "${GPU_TESTS[@]}" || status=$?
RESULTS=${DRY:+${GPU_CHECK_OUT:-/tmp/gpu-dry-run.md}}
RESULTS=${RESULTS:-bench/results/gpu.md}
timeout 330 "$PY" bench/gpu_check.py $DRY --out "$RESULTS" || status=$?
if [ -n "${OUT:-}" ] && [ -f "$RESULTS" ]; then cp "$RESULTS" "$OUT/"; fi
exit $status
