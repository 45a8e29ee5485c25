#!/usr/bin/env bash
# Issue 7's measurements of the KDA prefill kernel family (kernels/kda_prefill/chunk_triton.py) on one
# NVIDIA GPU (the lent H200), next to fla-core's Triton chunk_kda.
#   probe    where the time goes (scripts/kda_probe.py): per-launch device time, events, graph replay,
#            host time, registers/spills of the compiled kernels, errors vs the reference, for a few
#            points of the family on 7 workloads (PROBE_POINTS: JSON list of PARAMS overrides; about
#            3-4 minutes, compilation included)
#   bench1, bench2   the kernel ($KERNEL, default the family's file) vs fla on the first / last 12 of
#            the 24 workloads, events, side by side (checker on every workload; about 4-5 minutes each,
#            fla's autotuning on a cold machine included)
#   bench    all 24 in one call (over 8 minutes on a cold machine: only where the call limit allows)
#   flashkda FlashKDA built (scripts/build_flashkda.sh, from .flashkda/; the build is saved in OUT/flashkda-built.tgz
#            for a later call to carry as .flashkda/built.tgz) and probed next to the kernel on two bounded-gate
#            workloads (one with an initial state): the profiler's kernel names show that FlashKDA's own kernels ran, errors vs the reference
#   ownkernels   every KDA baseline in OWN_BASELINES (default "fla flashkda"; flashinfer_kda on Blackwell, vllm where
#            it imports) probed on one bounded-gate workload: exit 1 unless the profiler lists each one's own kernels
#            (kernel_names in evoteam/harness/baselines.py)
#   fkbench1, fkbench2   the kernel vs FlashKDA on the 11 bounded-gate workloads (the only gate FlashKDA has),
#            graph replay (device time) with CUDA events as the second figure: two runs, one machine start
#   flabig1, flabig2   the kernel vs fla on the 17 workloads of 8k tokens or more, graph replay where fla's call
#            captures (else events, as the verdict records), events as the second figure
#   select   the kernel alone (no baseline, no check) at SELECT_POINTS on all 24 workloads, graph replay; writes
#            OUT/champion.json, whose dispatch runs each shape's fastest point (kda_probe.py --emit-champion;
#            SELECT_STOP seconds, default 330, then the workloads left are not probed); verify it with champ_fk.
#            SELECT_WORKLOADS replaces the 24 (uuid prefixes, or "single": the 12 single sequences, where `segments` acts);
#            SELECT_KEEP_FROM=CHAMPION keeps that champion's entries for the shapes not probed
#   ablate   where the intra pass's time goes: ABLATE_POINTS with stages left out (kda_probe.py --ablate) on two
#            16k x 32 workloads (bounded and softplus gate)
#   champ_fk, champ_fla   OUT/champion.json's kernel (from select, or CHAMPION=FILE, else the committed champion) vs FlashKDA on the 11
#            bounded-gate workloads (graph replay) / vs fla on the 8k+ workloads (graph replay), every workload checked;
#            CHAMP_FK_WORKLOADS, CHAMP_FLA_WORKLOADS replace their workload lists
#   sweep1 .. sweepN   shard K of ${SWEEP_SHARDS:-4} of the family's space (python -m evoteam.sweep;
#            fla's times from the baseline cache that bench1/bench2 filled while the machine stays
#            warm); SWEEP_ARGS adds arguments, e.g. SWEEP_ARGS='--space {"BV":[16,64]}'
# Usage from the repository root: bash scripts/gpu_kda_report.sh OUT_DIR [probe|bench1|bench2|bench|sweepK ...]
# BENCH_TIMEOUT=S stops each bench after S seconds (its log keeps the workloads done).
# AUTOTUNE_IN=FILE.tgz restores fla's autotuning results saved by an earlier call in OUT_DIR/autotune.tgz
# (carry it in an ignored folder, e.g. .device-cache/; on 2026-11-30 a cold bench1 spent 390 s tuning).
# Needs fla-core: pip install -e .[cuda], or the wheels of scripts/fetch_wheels.sh in .whl
# (installed here into /tmp/site). Caches (Triton kernels and fla's autotuning, the harness's baseline
# times) live under /tmp on the device machine: they last while it stays warm.
set -uo pipefail
out=${1:?give an output folder}; shift
parts=${*:-probe}
mkdir -p "$out"
. "$(dirname "$0")/device_env.sh"
use_wheels fla || exit 1
use_bwrap || exit 1  # the candidates' sandbox (bubblewrap), from .devtools/ where the host lacks it
export PYTHONUNBUFFERED=1 EVOTEAM_CACHE_DIR=/tmp/kda-evoteam-cache
use_autotune_cache "$out" /tmp/kda-triton-cache  # fla's autotuning: AUTOTUNE_IN in, OUT/autotune.tgz out
kernel=${KERNEL:-kernels/kda_prefill/chunk_triton.py}
default_points='[{}, {"FUSE_O": false}, {"intra_maxnreg_bounded": null}, {"BV": 16}]'
probe_points=${PROBE_POINTS:-$default_points}
# v1.5, 32-token chunks on 2 warps (the bounded gate uncapped), the same with halves merged into 64-token steps by a
# launch, and that in runs of chunks whose state passes overlap the next run's intra pass (one sequence only). These
# won on the H200, 2026-12-02 (DESIGN.md 6.5, 6.6); key blocks of 32, value blocks of 16, 1 warp and the merge fused
# into the intra pass lost
select_points='[{}, {"BT": 32, "intra_warps": 2, "intra_maxnreg_bounded": null},
 {"BT": 32, "intra_warps": 2, "intra_maxnreg_bounded": null, "merge": "launch"},
 {"BT": 32, "intra_warps": 2, "intra_maxnreg_bounded": null, "merge": "launch", "segments": 4}]'
ablate_points='[{"BT": 32, "intra_warps": 4}]'
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
echo "kernel: $kernel"
first12="15208288 663e61c0 502a9ea8 76e6b061 e018eb06 81ef577b 1bf9de19 efbdc890 25d16f3d df87a189 1476db7b b9321a1b"
last12="d8c3b3c2 352f53c5 daa0a7a7 5237e6bd 2198036f 0663b73b 92e4a537 8cfd1d8d 735d7f72 6c261a07 17ae6ae2 c6398207"
single="15208288 663e61c0 502a9ea8 76e6b061 e018eb06 81ef577b 1bf9de19 efbdc890 25d16f3d df87a189 1476db7b b9321a1b"
bounded="663e61c0 e018eb06 efbdc890 25d16f3d 1476db7b 352f53c5 5237e6bd 0663b73b 8cfd1d8d 6c261a07 c6398207"
long="1bf9de19 efbdc890 25d16f3d df87a189 1476db7b b9321a1b 352f53c5 daa0a7a7 5237e6bd 2198036f 0663b73b 92e4a537
8cfd1d8d 735d7f72 6c261a07 17ae6ae2 c6398207"
bench() {  # $1: part name (OUT/$1.json, OUT/$1.log), $2: baseline, $3: timing mode, then more evoteam.bench arguments
  timeout "${BENCH_TIMEOUT:-0}" python3 -m evoteam.bench "$kernel" --task kda_prefill --baseline "$2" --timing "$3" \
    --warmup 3 --reps 20 --label chunk --json "$out/$1.json" "${@:4}" 2>&1 | tee "$out/$1.log"
}
for part in $parts; do
  case $part in
    probe)
      python3 scripts/kda_probe.py "$kernel" --check --deadline ${PROBE_DEADLINE:-300} \
        --points "$probe_points" \
        --json "$out/probe.json" 2>&1 | grep -v Warning | tee "$out/probe.log" ;;
    bench1) bench bench1 fla events --workloads $first12 ;;
    bench2) bench bench2 fla events --workloads $last12 ;;
    bench) bench bench fla events ;;
    flashkda)
      use_flashkda "$out/flashkda-built.tgz" >"$out/flashkda-build.log" 2>&1; rc=$?
      tail -4 "$out/flashkda-build.log"; [ $rc = 0 ] || exit 1
      python3 scripts/kda_probe.py "$kernel" --check --deadline ${PROBE_DEADLINE:-300} --baseline flashkda \
        --require-own-kernels --workloads efbdc890 25d16f3d --json "$out/flashkda-probe.json" 2>&1 \
        | grep -v Warning | tee "$out/flashkda-probe.log"
      # the adapter's kernel_names (evoteam/harness/baselines.py) in the profile of every workload, else exit 1
      [ "${PIPESTATUS[0]}" = 0 ] || { echo "FlashKDA's own kernels were not all seen (flashkda-probe.log)" >&2; exit 1; } ;;
    ownkernels)
      # every KDA baseline that imports here (OWN_BASELINES, default fla flashkda), one bounded-gate workload: the
      # profiler's kernel names prove each library's own kernels ran (the adapters' kernel_names)
      use_flashkda >/dev/null 2>&1 || true
      bl=""; for b in ${OWN_BASELINES:-fla flashkda}; do bl="$bl --baseline $b"; done
      python3 scripts/kda_probe.py "$kernel" --deadline ${PROBE_DEADLINE:-300} $bl --require-own-kernels \
        --workloads efbdc890 --json "$out/ownkernels.json" 2>&1 | grep -v Warning | tee "$out/ownkernels.log"
      [ "${PIPESTATUS[0]}" = 0 ] || { echo "a baseline's own kernels were not all seen (ownkernels.log)" >&2; exit 1; } ;;
    fkbench[1-9]) use_flashkda || exit 1; bench "$part" flashkda graph --workloads $bounded ;;
    select)
      selected=${SELECT_WORKLOADS:-$first12 $last12}; [ "$selected" = single ] && selected=$single
      python3 scripts/kda_probe.py "$kernel" --deadline 580 --stop-after "${SELECT_STOP:-330}" --reps 10 \
        --points "${SELECT_POINTS:-$select_points}" \
        --workloads $selected ${SELECT_KEEP_FROM:+--keep-from "$SELECT_KEEP_FROM"} \
        --json "$out/select.json" --emit-champion "$out/champion.json" 2>&1 \
        | grep -v Warning | tee "$out/select.log" ;;
    ablate)
      python3 scripts/kda_probe.py "$kernel" --deadline 300 --reps 10 --points "${ABLATE_POINTS:-$ablate_points}" \
        --ablate 1 --ablate 2 --ablate 12 --ablate 16 --workloads 1476db7b df87a189 --json "$out/ablate.json" 2>&1 \
        | grep -v Warning | tee "$out/ablate.log" ;;
    champ_fk|champ_fla)
      champion=${CHAMPION:-$out/champion.json}
      [ -f "$champion" ] || champion=kernels/kda_prefill/champion_h200.json  # select did not write one
      python3 -m evoteam.sweep --build "$champion" --emit-kernel /tmp/kda-champion.py || exit 1
      if [ "$part" = champ_fk ]; then
        use_flashkda || exit 1; base=flashkda; wl=${CHAMP_FK_WORKLOADS:-$bounded}
      else
        base=fla; wl=${CHAMP_FLA_WORKLOADS:-$long}
      fi
      kernel=/tmp/kda-champion.py bench "$part" "$base" graph --workloads $wl ;;  # $kernel set for this call only
    flabig[1-9]) bench "$part" fla graph --workloads $long ;;
    sweep[1-9])
      k=${part#sweep}
      python3 -m evoteam.sweep --task kda_prefill --family chunk --shard "$k/${SWEEP_SHARDS:-4}" \
        --reps 20 --warmup 3 --baseline fla --timing events \
        --dispatch-axes num_v_heads,num_sequences,seq_len --out "$out/$part.json" ${SWEEP_ARGS:-} \
        2>&1 | tee "$out/$part.log" ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
