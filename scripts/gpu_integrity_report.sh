#!/usr/bin/env bash
# Issue 18's measurements on one NVIDIA GPU (the lent H200); the same parts run before and after the
# harness change, each comparison side by side in one run:
#   gate     does a CUDA graph's launch behind an unwritten release word block the host (scripts/graph_gate_probe.py)
#   probe    the split harness's building blocks (scripts/harness_probe.py): the sandbox, device memory
#            shared across PID namespaces, intervals timed by the judge, escaped work, faults
#   smoke    the champion on two MLA workloads, few rounds: does the harness run here at all
#   mla      the MLA champion vs FlashInfer (plan cached; 0.7.4 slim or 0.5.3, as .whl/ has it) on the 47 workloads: graph replay (the
#            first run compiles), then events, MLA_RUNS times (default 1); the wall time of each evaluation
#            (walls.txt)
#   mla_best the MLA champion vs FlashInfer's fa2 and vs its fa3, per workload the faster one the bar
#            (scripts/best_baseline.py), graph then events
#   kda      the KDA chunk kernel vs fla-core's Triton chunk_kda on 4 workloads (1k-16k tokens, both
#            gates): events, then graph replay; fla's autotuning saved in autotune.tgz (AUTOTUNE_IN
#            restores it, e.g. from a copy carried in the ignored .device-cache/)
#   aa, aa_kda  the A/A control: the MLA champion (the KDA chunk kernel on the kda workloads) as candidate and as
#            baseline (baseline=solution), graph then events: every workload must come out 1.00x within 2%
#   redteam  the red-team suite (tests/redteam) on the GPU at full scale: one table (REDTEAM_ONLY="case ...": those
#            cases alone; REDTEAM_SKIP="case ...": all but those; REDTEAM_FIRST="case ...": those first)
#   mla_before, kda_before   the mla and kda parts with the harness before issue 18 (commit 151394c), from a
#            tree made here first and carried ($BEFORE, default .before, ignored by git):
#              mkdir -p .before && git archive 151394c evoteam kernels hardware conf pyproject.toml | tar -x -C .before
#            run them in the same call as mla / kda, so that before and after share the machine and fla's tuning
# Usage from the repository root: bash scripts/gpu_integrity_report.sh OUT_DIR [probe|mla|kda|redteam ...]
# Needs flashinfer-python and fla-core (pip install -e .[cuda], or the wheels of
# scripts/fetch_wheels.sh in .whl) and bubblewrap (bwrap on PATH, or its Debian packages in
# .devtools/: apt-get download bubblewrap libcap2 libselinux1 libpcre2-8-0).
set -uo pipefail
out=${1:?give an output folder}; shift
parts=${*:-probe mla}
mkdir -p "$out"
. "$(dirname "$0")/device_env.sh"
use_wheels flashinfer fla || exit 1
export PYTHONUNBUFFERED=1
export EVOTEAM_CACHE_DIR=${EVOTEAM_CACHE_DIR:-/tmp/integrity-evoteam-cache}
use_autotune_cache "$out" /tmp/integrity-triton-cache
use_bwrap || exit 1
log=$out/report.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$log"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$log"
echo "git: $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | wc -l) changed files" | tee -a "$log"
champion=/tmp/evoteam-champion-h200.py  # built from the family file and the committed champion file
python3 -m evoteam.sweep --build kernels/mla_decode/champion_h200.json --emit-kernel "$champion" || exit 1
# MLA_CANDIDATE=FILE (.py or .cu, e.g. kernels/mla_decode/pipelined_mma.cu) takes the champion's place in the MLA parts
[ -n "${MLA_CANDIDATE:-}" ] && champion=$MLA_CANDIDATE && echo "MLA candidate: $champion" | tee -a "$log"
kda_kernel=kernels/kda_prefill/chunk_triton.py
kda_workloads="15208288 efbdc890 df87a189 8cfd1d8d"
before=${BEFORE:-.before}
timed() {  # $1: name; the rest: evoteam.bench arguments. Appends "<name> <seconds>" to walls.txt; a name
           # ending in _before runs the harness of $before
  local name=$1 t0 path=$PYTHONPATH
  shift
  case $name in *_before) path=$PWD/$before${PYTHONPATH:+:$PYTHONPATH} ;; esac
  t0=$(date +%s%N)
  # PROFILE_DIR: each evaluation's judge under cProfile, its costliest functions in PROFILE_DIR/<name>.txt
  EVOTEAM_JUDGE_PROFILE=${PROFILE_DIR:+$PROFILE_DIR/$name.txt} PYTHONPATH=$path python3 -m evoteam.bench "$@" 2>&1 | grep --line-buffered -v '^\[' | tee -a "$log"
  echo "wall $name $(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee -a "$out/walls.txt" "$log"
}
for part in $parts; do
  case $part in
    gate)
      timeout 180 python3 scripts/graph_gate_probe.py 2>&1 | tee -a "$log" ;;
    probe)
      timeout 300 python3 scripts/harness_probe.py --bwrap "$(command -v bwrap)" --json "$out/probe.json" 2>&1 \
        | tee -a "$log" ;;
    smoke)
      timeout 240 python3 -m evoteam.bench "$champion" --task mla_decode --baseline flashinfer --label champion \
        --workloads 00cb2bc2 5bef8d88 --warmup 1 --reps 5 2>&1 | tee -a "$log" ;;
    mla|mla_before)  # MLA_RUNS=N (default 1): graph then events, N times (the first graph compiles the champion);
                     # MLA_MODES="graph" (default "graph events") for fewer
      suffix=${part#mla}
      mla=(--task mla_decode --baseline flashinfer --baseline-option backend=auto --baseline-option plan=cached
           --label champion)
      for run in $(seq 1 "${MLA_RUNS:-1}"); do
        for mode in ${MLA_MODES:-graph events}; do
          timed "mla_${mode}${suffix}_$run" "$champion" "${mla[@]}" --timing "$mode" \
            --json "$out/mla_${mode}${suffix}_$run.json"
        done
      done ;;
    mla_best)  # issue 56's bar: the champion against FlashInfer's fa2 and against its fa3 (plan cached), each side by
               # side in its own run, graph then events (MLA_MODES); per workload the faster backend is the bar
               # (scripts/best_baseline.py: the lower of the two speedups); MLA_WORKLOADS="uuid ..." for a subset
      for mode in ${MLA_MODES:-graph events}; do
        for backend in fa2 fa3; do
          timed "mla_best_${mode}_$backend" "$champion" --task mla_decode --baseline flashinfer \
            --baseline-option "backend=$backend" --baseline-option plan=cached --label champion --timing "$mode" \
            ${MLA_WORKLOADS:+--workloads $MLA_WORKLOADS} --json "$out/mla_best_${mode}_$backend.json"
        done
        python3 scripts/best_baseline.py "$out/mla_best_${mode}_fa2.json" "$out/mla_best_${mode}_fa3.json" \
          --json "$out/mla_best_$mode.json" 2>&1 | tee -a "$log"
      done ;;
    aa|aa_kda)  # the A/A control: the same kernel as candidate and as baseline, graph then events (1.00x within 2%)
      if [ "$part" = aa ]; then
        aa=(--task mla_decode --baseline solution --baseline-option "path=$champion" --label champion_aa)
        timed aa_mla_graph "$champion" "${aa[@]}" --timing graph --json "$out/aa_mla_graph.json"
        timed aa_mla_events "$champion" "${aa[@]}" --timing events --json "$out/aa_mla_events.json"
      else
        aa=(--task kda_prefill --baseline solution --baseline-option "path=$kda_kernel" --label chunk_aa
            --workloads $kda_workloads)
        timed aa_kda_graph "$kda_kernel" "${aa[@]}" --timing graph --json "$out/aa_kda_graph.json"
        timed aa_kda_events "$kda_kernel" "${aa[@]}" --timing events --json "$out/aa_kda_events.json"
      fi ;;
    kda|kda_before)
      suffix=${part#kda}
      kda=(--task kda_prefill --baseline fla --warmup 3 --reps 20 --label chunk --workloads $kda_workloads)
      [ -z "${KDA_NO_EVENTS:-}" ] && timed "kda_events$suffix" "$kda_kernel" "${kda[@]}" --timing events --json "$out/kda_events$suffix.json"
      timed "kda_graph$suffix" "$kda_kernel" "${kda[@]}" --timing graph --json "$out/kda_graph$suffix.json" ;;
    redteam)
      only=()
      [ -n "${REDTEAM_ONLY:-}" ] && only=(--only $REDTEAM_ONLY)
      [ -n "${REDTEAM_FIRST:-}" ] && only+=(--first $REDTEAM_FIRST)
      [ -n "${REDTEAM_SKIP:-}" ] && only=(--only $(python3 -c "import sys; sys.path.insert(0, 'tests/redteam')
from cases import cases_for; skip = set(sys.argv[1:]); print(' '.join(c.name for c in cases_for('cuda') if c.name not in skip))" $REDTEAM_SKIP))
      timeout ${REDTEAM_TIMEOUT:-580} python3 tests/redteam/run.py --hardware auto --json "$out/redteam${REDTEAM_TAG:-}.json" "${only[@]}" 2>&1 \
        | tee -a "$log" ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
