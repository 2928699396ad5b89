#!/usr/bin/env bash
# The GPU check: correctness, then latency of the torch engine on CUDA, eager and
# compiled, beside transformers' documented usage. Run from anywhere with the machine's own
# python3 (torch, torchvision, transformers, numpy, OpenCV; no ROS, no network, no install).
#   tools/gpu_check.sh             # cuda, full-size SAM 3 with random weights, at most 6 minutes
#   tools/gpu_check.sh cpu --quick # the same code on the CPU, tiny model (what make test runs)
# Output goes to stdout and to $OUT/gpu_check.txt (build/gpu_check.txt when OUT is unset).
# Exit status: 0 all ran within bounds, 1 a part failed, 124 cut at the time limit.
set -euo pipefail
out_dir="${OUT:-$(dirname "$0")/../build}"
mkdir -p "$out_dir"
log="$(cd "$out_dir" && pwd)/gpu_check.txt"
cd "$(dirname "$0")/.."
device="${1:-cuda}"
shift || true
# Hard limit: a run cut short keeps every table it printed (each part prints when done).
limit_s="${GPU_CHECK_LIMIT_S:-360}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# torch.compile's caches (graphs, kernels, autotuning) kept in build/ (git-ignored): a rerun on
# the same machine skips most of the compile.
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$PWD/build/torchinductor}"
timeout --signal=INT --kill-after=15 "$limit_s" \
    "${PYTHON:-python3}" -m benchmarks --only model --device "$device" "$@" 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
