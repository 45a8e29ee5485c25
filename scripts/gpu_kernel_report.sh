#!/usr/bin/env bash
# Issue 7's measurements of the MLA decode kernel family on one NVIDIA GPU (the lent H200).
#   probe    where the time goes: host cost per call, events vs graph-replay device time, compiled
#            kernels' registers/spills/shared memory; the family default and the champion (if any)
#            next to FlashInfer (scripts/mla_probe.py; about 2 minutes). PROBE_POINTS: JSON list of
#            PARAMS overrides (e.g. '[{"COMBINE":"launch"},{"COMBINE":"ctas"}]'); PROBE_WORKLOADS:
#            uuid prefixes instead of the default six
#   sweep1, sweep2   the flashdecode family's space (families.json), half each: every point on all 47
#            workloads with FlashInfer timed side by side at every point (--time-baseline: on 2026-11-30
#            one FlashInfer timing per workload, reused by all 16 points, made the sweep predict 1.171x
#            where the side-by-side report measured 0.857x; the 16-point sweep took 190 s without it);
#            JSON per half, written after every point (merge them with
#            python -m evoteam.sweep --merge). SWEEP_SHARDS=3 makes sweep1..sweep3 thirds; SWEEP_ARGS adds
#            arguments, e.g. SWEEP_ARGS='--space {"BLOCK_N":[64],"num_warps":[8]}' (JSON without spaces)
#   sweep    all points in one call (190 s on 2026-11-30 with cached baseline times; expect up to 2x with
#            --time-baseline; SWEEP_TIMING=graph: 14 points in 275 s), writing the dispatch and the champion
#   mla      the champion vs FlashInfer fa3/auto, plan() cached (events, kernel only) and plan() per
#            call (wallclock), each timed twice, side by side in the same run (about 2 minutes)
#   mla_graph  the champion vs FlashInfer, plan cached, timed by graph replay (device time only)
#   ncu      Nsight Compute's counters (throughput, memory, warp stalls, occupancy) for one call of the
#            champion (or KERNEL, with PROBE_POINTS) and of FlashInfer per PROBE_WORKLOADS workload, L2
#            flushed before each (ncu --cache-control all); CSV in ncu.csv. Needs a machine whose
#            runtime lets ncu read counters (KINDS.md: Firecracker, not gVisor). NCU_ARGS replaces the
#            cache control and sections, e.g. '--cache-control none --metrics gpu__time_duration.sum' (one
#            replay pass: each kernel's duration with the caches as the previous kernel left them)
# SWEEP_TIMING: the sweep's timing mode, events (default) or graph (device time only: the dispatch is then
# chosen on kernel merit, free of the host noise that made the events sweep's choices vary).
# SWEEP_TIMEOUT: seconds per workload before a sweep's worker is killed (default 60: a hanging point
# must not eat the call; on 2026-11-30 the family's first point gave no result within 200 s).
# The champion is $KERNEL, else the candidate built from kernels/mla_decode/champion_h200.json.
# Usage from the repository root: bash scripts/gpu_kernel_report.sh OUT_DIR [probe|sweep1|sweep2|sweep|mla|mla_graph ...]
# Needs flashinfer-python: pip install -e .[cuda], or the wheels of scripts/fetch_wheels.sh in
# .whl (installed here into /tmp/site). Keep at most 8 files under OUT_DIR (the device tool's limit).
set -uo pipefail
out=${1:?give an output folder}; shift
parts=${*:-mla}
mkdir -p "$out"
. "$(dirname "$0")/device_env.sh"
use_wheels flashinfer || exit 1
use_bwrap || exit 1  # the candidates' sandbox (bubblewrap), from .devtools/ where the host lacks it
# baseline times cached outside OUT_DIR (the device tool returns few files); they last while the machine is warm
export PYTHONUNBUFFERED=1 EVOTEAM_CACHE_DIR=${EVOTEAM_CACHE_DIR:-/tmp/mla-evoteam-cache}
family=kernels/mla_decode/flashdecode_triton.py
champion=${KERNEL:-}
if [ -z "$champion" ]; then
  champion=/tmp/evoteam-champion-h200.py
  python3 -m evoteam.sweep --build kernels/mla_decode/champion_h200.json --emit-kernel "$champion" || exit 1
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
echo "champion: $champion"
probe_points=${PROBE_POINTS:-'[{}]'}
bench() { python3 -m evoteam.bench "$@"; }
sweep() {  # $1: shard, $2: json name, then more evoteam.sweep arguments; $SWEEP_ARGS too (e.g. --space)
  local timing=${SWEEP_TIMING:-events} time_baseline=
  # events times of FlashInfer vary up to 4x between processes (host-bound): time it at every point.
  # Graph replay varies under 2%, so one cached baseline time per workload serves every point.
  [ "$timing" = events ] && time_baseline=--time-baseline
  python3 -m evoteam.sweep --task mla_decode --family flashdecode --shard "$1" --reps 30 --warmup 5 \
    --timeout "${SWEEP_TIMEOUT:-60}" \
    --baseline flashinfer --baseline-option backend=auto --baseline-option plan=cached --timing "$timing" \
    $time_baseline --dispatch-axes batch_size,num_kv_indices --out "$out/$2" "${@:3}" ${SWEEP_ARGS:-}
}
for part in $parts; do
  case $part in
    probe)
      kernels=$family
      [ "$champion" != "$family" ] && kernels="$family $champion"
      python3 scripts/mla_probe.py $kernels --deadline ${PROBE_DEADLINE:-240} --points "$probe_points" \
        ${PROBE_WORKLOADS:+--workloads $PROBE_WORKLOADS} --json "$out/probe.json" 2>&1 | tee "$out/probe.log" ;;
    sweep[1-9])  # shard K of ${SWEEP_SHARDS:-2}
      k=${part#sweep}
      sweep "$k/${SWEEP_SHARDS:-2}" "$part.json" 2>&1 | tee "$out/$part.log" ;;
    sweep)
      sweep 1/1 sweep.json --emit-champion "$out/champion.json" --emit-kernel "$out/flashdecode_champion.py" \
        2>&1 | tee "$out/sweep.log" ;;
    mla)
      for run in 1 2; do
        bench "$champion" --task mla_decode --baseline flashinfer --label champion \
          --baseline-option backend=auto --baseline-option plan=cached --timing events \
          --json "$out/mla_plan_cached_run$run.json"
        bench "$champion" --task mla_decode --baseline flashinfer --label champion \
          --baseline-option backend=auto --baseline-option plan=per_call --reps 30 \
          --json "$out/mla_plan_per_call_run$run.json"
      done 2>&1 | grep --line-buffered -v '^\[' | tee "$out/mla.log" ;;
    ncu)
      uname -r
      ncu --profile-from-start off --clock-control none --csv --page details ${NCU_ARGS:---cache-control all \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
        --section LaunchStats --section SchedulerStats --section SourceCounters} \
        python3 scripts/mla_probe.py $champion --profile --points "$probe_points" \
        --workloads ${PROBE_WORKLOADS:-5bef8d88 84221f45 c9ba5e7f} > "$out/ncu.csv" 2> "$out/ncu.log"
      echo "ncu exit $?"; tail -5 "$out/ncu.log"; grep -c . "$out/ncu.csv" ;;
    mla_graph)
      bench "$champion" --task mla_decode --baseline flashinfer --label champion \
        --baseline-option backend=auto --baseline-option plan=cached --timing graph --reps 30 \
        --json "$out/mla_plan_cached_graph.json" 2>&1 | grep --line-buffered -v '^\[' | tee "$out/mla_graph.log" ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
