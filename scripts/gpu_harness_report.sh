#!/usr/bin/env bash
# Issue 3's measurements on one NVIDIA GPU (the lent H200), every figure side by side in one run:
#   mla   the MLA seed kernel vs FlashInfer on all 47 workloads, plan() cached and plan() per call
#   mla_graph  the same, plan() cached, timed by graph replay
#   kda   the KDA seed kernel vs fla-core's Triton chunk_kda on the KDA workload set
#   cheat planted cheating candidates, caught on the GPU
# Each bench times the candidate twice in the same run (the noise column).
# Usage from the repository root: bash scripts/gpu_harness_report.sh OUT_DIR [tests|gputests|mla|mla_graph|kda|cheat ...]
# Needs flashinfer-python and fla-core: pip install -e .[cuda], or the wheels of
# scripts/fetch_wheels.sh in .whl (installed here into /tmp/site).
set -uo pipefail
out=${1:?give an output folder}; shift
parts=${*:-tests mla kda cheat}
mkdir -p "$out"
. "$(dirname "$0")/device_env.sh"
use_wheels flashinfer fla || exit 1
use_bwrap || exit 1  # the candidates' sandbox (bubblewrap), from .devtools/ where the host lacks it
export PYTHONUNBUFFERED=1 EVOTEAM_CACHE_DIR=$out/cache TRITON_CACHE_AUTOTUNING=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
bench() { python3 -m evoteam.bench "$@"; }
for part in $parts; do
  case $part in
    tests)
      python3 -m pytest -q -rs -p no:cacheprovider tests/test_check.py tests/test_gpu.py tests/test_value_returning.py 2>&1 | tail -12 ;;
    gputests)
      python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -8 ;;
    mla)
      bench kernels/mla_decode/seed_triton.py --task mla_decode --baseline flashinfer \
        --baseline-option backend=auto --baseline-option plan=cached --timing events \
        --json "$out/mla_plan_cached.json" --traces "$out/mla_traces.jsonl"
      bench kernels/mla_decode/seed_triton.py --task mla_decode --baseline flashinfer \
        --baseline-option backend=auto --baseline-option plan=per_call --reps 30 \
        --json "$out/mla_plan_per_call.json" ;;
    mla_graph)
      bench kernels/mla_decode/seed_triton.py --task mla_decode --baseline flashinfer \
        --baseline-option backend=auto --baseline-option plan=cached --timing graph --reps 30 \
        --json "$out/mla_plan_cached_graph.json" ;;
    kda)
      bench kernels/kda_prefill/seed_triton.py --task kda_prefill --baseline fla --timing events \
        --warmup 2 --reps 15 --json "$out/kda.json" --traces "$out/kda_traces.jsonl" ;;
    cheat)
      one=00cb2bc2
      python3 tests/planted.py "$out/planted" > /dev/null
      for c in imports_flashinfer skips_work_when_timed; do
        bench "$out/planted/$c.py" --task mla_decode --baseline flashinfer --workloads $one --reps 10
      done 2>&1 | tee "$out/cheats.log" ;;
  esac
done
