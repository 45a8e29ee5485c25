#!/usr/bin/env bash
# The GPU acceptance check: the gate for every harness change (issue 52). On one NVIDIA H100 or H200, from the
# repository root, with the wheels of scripts/fetch_wheels.sh in .whl/ and bubblewrap's Debian packages in .devtools/:
#   bash scripts/gpu_check.sh OUT [PART ...]          (parts: controls redteam kda aa mla mainjob; default all)
# Each part runs under its own timeout, its output in OUT/<part>.log, its results (JSON) beside it, a line printed as
# it ends. At the end scripts/gpu_check_summary.py writes OUT/summary.md, the table first, and prints it; the exit
# status is 0 only if every row holds. Rows:
#   controls   honest candidates, each PASSED with a number, never flagged, small and large MLA workloads, graph
#              with the events figure beside it: Triton (the seed), plain PyTorch (capturable), PyTorch with a host
#              synchronisation (events: not capturable), a value-returning solution, CUDA C++, a launch per request
#   redteam    the GPU red team's cheats, all caught: compute_whole_batch and hold_gpu_with_a_wait every time, and a
#              rotating part of the rest (REDTEAM_PART=K/N, default the day of the year's part of 4, named in the row)
#   kda        KDA's honest candidates against fla: the chunk kernel (1k and 16k tokens, both gate forms), the seed
#   aa         the A/A control (the same kernel on both sides): MLA on 8 workloads, KDA on 2, geomean within 3%
#   mla        the MLA champion against FlashInfer (plan cached; the one in .whl/: 0.7.4 slim, or 0.5.3: FLASHINFER= of
#              scripts/fetch_wheels.sh) on the 47 workloads, graph and events
#   mainjob    `python -m evoteam hardware=auto` with two evaluations, tracked in MLflow (a SQLite store in OUT)
# Caches: CACHE_IN=FILE.tgz (an earlier call's OUT/cache.tgz, carried e.g. in the ignored .device-cache/) restores
# Triton's kernels and fla's autotuning and the candidates' CUDA builds; OUT/cache.tgz is written at the end.
set -uo pipefail
out=${1:?give an output folder}; shift
parts=${*:-controls redteam kda aa mla mainjob}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# OUT packed beside itself after every part unless PACK names another file (PACK= empty: not packed): a device call
# returns at most eight files (on 2026-12-06 a call's summary and logs stayed behind), and this one file comes first
PACK=${PACK-$out.tgz}
start=$SECONDS
. "$(dirname "$0")/device_env.sh"
use_wheels flashinfer fla mlflow hydra || exit 1
use_bwrap || exit 1
export PYTHONUNBUFFERED=1 EVOTEAM_CACHE_DIR=/tmp/gpu-check-cache TRITON_CACHE_DIR=/tmp/gpu-check-triton
mkdir -p "$EVOTEAM_CACHE_DIR" "$TRITON_CACHE_DIR"
if [ -n "${CACHE_IN:-}" ] && [ -f "$CACHE_IN" ]; then
  tar xzf "$CACHE_IN" -C /tmp && echo "caches restored from $CACHE_IN"
fi
use_autotune_cache "$out" "$TRITON_CACHE_DIR"
trap 'tar czf "$out/cache.tgz" -C /tmp --exclude="*.db" gpu-check-cache gpu-check-triton 2>/dev/null; _save_autotune' EXIT
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  echo "git: $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | wc -l) changed files"
  # the host's GPU-facing settings: the baseline's trusted runner inherits all of them, a candidate's runner only
  # evoteam/harness/sandbox.py's DEVICE_SETTINGS (a lead for the A/A offset on 53a7dfec: the same SASS on both
  # sides, 2026-12-06)
  echo "environment:"; env | grep -E '^(CUDA|PYTORCH|TORCH|TRITON|NCCL|NVIDIA|CUBLAS|LD_)' | sort | sed 's/^/  /'
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
echo "install and setup: $((SECONDS - start)) s"
champion=/tmp/gpu-check-champion.py
python3 -m evoteam.sweep --build kernels/mla_decode/champion_h200.json --emit-kernel "$champion" > "$out/build.log" 2>&1 \
  || { echo "cannot build the MLA champion (see $out/build.log)"; exit 1; }

part() {  # part NAME SECONDS CMD...: one part under its timeout (LIMIT_<NAME> overrides it), its log in OUT/NAME.log,
          # its wall in walls.txt; OUT packed into PACK (default OUT.tgz) after every part (what a cut call still returns)
  local name=$1 limit=$2 t0=$SECONDS rc var="LIMIT_$1"
  limit=${!var:-$limit}
  shift 2
  timeout -k 10 "$limit" "$@" > "$out/$name.log" 2>&1
  rc=$?
  echo "$name $rc $((SECONDS - t0))" >> "$out/walls.txt"
  echo "part $name: exit $rc in $((SECONDS - t0)) s$([ $rc = 124 ] && echo " (cut at its $limit s limit)")"
  [ -n "${PACK:-}" ] && tar czf "$PACK" -C "$(dirname "$out")" --exclude=cache.tgz "$(basename "$out")"
  return 0
}
bench() {  # bench JSON_NAME ARGS...: evoteam.bench, its report in OUT/JSON_NAME.json
  local name=$1
  shift
  python3 -m evoteam.bench "$@" --json "$out/$name.json"
}
mla_aa="00cb2bc2 951de642 53a7dfec a128f96f 1250b1f6 57106903 45be562f 5bef8d88"
kda_pair="15208288 1476db7b"
for p in $parts; do
  case $p in
    controls)
      part controls 300 python3 tests/redteam/run.py --hardware auto --reps 5 --json "$out/controls.json" --only \
        honest_triton honest_torch honest_torch_sync honest_value_returning honest_cuda honest_per_request ;;
    redteam)
      # 360 s: part 0/4 (14 cases) reached 12 in 250 s on an H100 (2026-12-06)
      rp=${REDTEAM_PART:-$(( $(date +%j | sed 's/^0*//') % 4 ))/4}
      echo "$rp" > "$out/redteam_part.txt"
      only=$(python3 -c "import sys; sys.path.insert(0, 'tests/redteam')
from cases import cases_for; print(' '.join(c.name for c in cases_for('cuda') if c.expect != 'pass'))")
      # shellcheck disable=SC2086
      part redteam 360 python3 tests/redteam/run.py --hardware auto --reps 5 --json "$out/redteam.json" \
        --only $only --part "$rp" --first compute_whole_batch hold_gpu_with_a_wait ;;
    kda)
      # shellcheck disable=SC2086
      part kda 300 bash -c "$(declare -f bench); out=$out; \
        bench kda_chunk kernels/kda_prefill/chunk_triton.py --task kda_prefill --baseline fla --reps 8 --workloads $kda_pair; \
        bench kda_seed kernels/kda_prefill/seed_triton.py --task kda_prefill --baseline fla --reps 5 --workloads 15208288" ;;
    aa)
      part aa 240 bash -c "$(declare -f bench); out=$out; \
        bench aa_mla $champion --task mla_decode --baseline solution --baseline-option path=$champion --workloads $mla_aa; \
        bench aa_kda kernels/kda_prefill/chunk_triton.py --task kda_prefill --baseline solution \
          --baseline-option path=kernels/kda_prefill/chunk_triton.py --workloads $kda_pair" ;;
    mla)
      part mla 360 bash -c "$(declare -f bench); out=$out; \
        bench mla_graph $champion --task mla_decode --baseline flashinfer --baseline-option plan=cached --timing graph \
          --no-second-figure; \
        bench mla_events $champion --task mla_decode --baseline flashinfer --baseline-option plan=cached --timing events" ;;
    mainjob)
      rm -rf /tmp/gpu-check-run
      part mainjob 240 python3 -m evoteam hardware=auto task=mla_decode "task.workloads=[00cb2bc2,5bef8d88]" \
        budget.max_evaluations=2 tracking=mlflow "tracking.tracking_uri=sqlite:///$out/mlflow.db" \
        run_dir=/tmp/gpu-check-run ;;
    *) echo "unknown part $p (parts: controls redteam kda aa mla mainjob)" >&2; exit 2 ;;
  esac
done
echo "gpu_check: $((SECONDS - start)) s in all"
# shellcheck disable=SC2086
python3 scripts/gpu_check_summary.py "$out" --parts $parts --seconds $((SECONDS - start))
rc=$?
[ -n "${PACK:-}" ] && tar czf "$PACK" -C "$(dirname "$out")" --exclude=cache.tgz "$(basename "$out")"
exit $rc
