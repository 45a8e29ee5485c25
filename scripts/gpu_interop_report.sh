#!/usr/bin/env bash
# Issue 21's measurements on one NVIDIA GPU (the lent H200): solutions in another language than Triton,
# checked and timed by the repository's bench command side by side with FlashInfer (plan cached; graph replay,
# the default, with the events figure beside it), with FlashInfer-Trace traces to export.
#   tests   the CUDA solution tests of tests/test_languages.py (a pass; a compile error; an illegal address)
#   cuda    the CUDA C++ MLA kernel kernels/mla_decode/splitkv_wmma.cu on the 47 workloads
#   triton  the Triton champion (built from kernels/mla_decode/champion_h200.json) on the 47 workloads
# Export afterwards, on any machine (the champion file is rebuilt the same way):
#   python -m evoteam.sweep --build kernels/mla_decode/champion_h200.json --emit-kernel /tmp/mla_champion_h200.py
#   python -m evoteam.export DATASET --traces OUT/cuda_traces.jsonl --traces OUT/triton_traces.jsonl \
#     --solution kernels/mla_decode/splitkv_wmma.cu --solution /tmp/mla_champion_h200.py
# Usage from the repository root: bash scripts/gpu_interop_report.sh OUT_DIR [tests cuda triton]
# Needs flashinfer-python (pip install -e .[cuda], or the wheels of scripts/fetch_wheels.sh in .whl) and bubblewrap
# (or its Debian packages in .devtools/, scripts/device_env.sh says which).
set -uo pipefail
out=${1:?give an output folder}; shift
parts=${*:-tests cuda triton}
mkdir -p "$out"
. "$(dirname "$0")/device_env.sh"
use_wheels flashinfer || exit 1
use_bwrap || exit 1
export PYTHONUNBUFFERED=1 EVOTEAM_CACHE_DIR=/tmp/interop-evoteam-cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc --version | tail -1
bench() {  # $1: the candidate, $2: the name of its outputs
  python3 -m evoteam.bench "$1" --task mla_decode --baseline flashinfer --baseline-option backend=auto \
    --baseline-option plan=cached --json "$out/$2.json" --traces "$out/$2_traces.jsonl" 2>&1 \
    | grep --line-buffered -v '^\[' | tee "$out/$2.log"
}
for part in $parts; do
  case $part in
    tests)
      python3 -m pytest -q -rs -p no:cacheprovider tests/test_languages.py -k cuda 2>&1 | tail -15 ;;
    cuda)
      bench kernels/mla_decode/splitkv_wmma.cu cuda ;;
    triton)
      python3 -m evoteam.sweep --build kernels/mla_decode/champion_h200.json \
        --emit-kernel /tmp/mla_champion_h200.py || exit 1
      bench /tmp/mla_champion_h200.py triton ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
