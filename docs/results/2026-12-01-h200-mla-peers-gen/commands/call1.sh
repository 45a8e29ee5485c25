#!/usr/bin/env bash
# session 9, call 1 (carry .whl and .ab): the peers sync by generation word (a3fc70b).
# 1. probe, side by side in one process: the family file before (3d65754, as .ab/flashdecode_before.py)
#    and after, both at COMBINE "peers", with FlashInfer, on 6 workloads (host, events, graph replay);
# 2. graph sweep on batches 16/64: 3 peers points and 2 pdl points (FlashInfer's graph time cached);
# 3. events sweeps with FlashInfer timed at every point: batch 16 (peers and pdl, 2 points each) and
#    batch 1 (3 peers points and launch).
set -u
B1="00cb2bc2 c2e8ef55 deb5f26c 7cd78cb9 951de642 4d9f5e3e 5c200fe9 d232cde2 2cde88e6 53a7dfec f26d4f7f e6bef587 d0da33e2 990b57e3 28210082"
B16="5e86857b 34026642 89070a1d 1250b1f6 5bfb8416 57106903 373074ba c4e14a53 f42ce054 220b10b5 787d2d2f e417264f a128f96f bd2dae14 84221f45 7a9dc58c"
B64="fd4b2558 7e083fc8 60b29b12 b018a35e 86a0eb47 80797c3d f4367b30 b15c7099 65082ffb d771f51c 5bef8d88 45be562f 939f995a c9ba5e7f 0c746a7a 1c3743b9"
K=kernels/mla_decode/flashdecode_triton.py
KERNEL=.ab/flashdecode_before.py PROBE_POINTS='[{"COMBINE":"peers"}]' PROBE_DEADLINE=110 \
  PROBE_WORKLOADS='c2e8ef55 53a7dfec bd2dae14 84221f45 c9ba5e7f 5bef8d88' \
  timeout 140 bash scripts/gpu_kernel_report.sh $OUT/probe probe > /dev/null 2>&1
grep -v '^\[' $OUT/probe/probe.log | tail -40
P='[{"COMBINE":"peers"},{"COMBINE":"peers","MIN_CHUNK_BLOCKS":8},{"COMBINE":"peers","PROGRAMS_PER_SM":4},{"COMBINE":"pdl"},{"COMBINE":"pdl","PROGRAMS_PER_SM":4}]'
KERNEL=$K SWEEP_TIMING=graph SWEEP_TIMEOUT=30 SWEEP_ARGS="--points $P --workloads $B16 $B64" \
  timeout 190 bash scripts/gpu_kernel_report.sh $OUT/graph sweep > /dev/null 2>&1
tail -36 $OUT/graph/sweep.log
P16='[{"COMBINE":"peers"},{"COMBINE":"peers","PROGRAMS_PER_SM":4},{"COMBINE":"pdl"},{"COMBINE":"pdl","PROGRAMS_PER_SM":4}]'
KERNEL=$K SWEEP_TIMEOUT=30 SWEEP_ARGS="--points $P16 --workloads $B16" \
  timeout 110 bash scripts/gpu_kernel_report.sh $OUT/ev16 sweep > /dev/null 2>&1
tail -20 $OUT/ev16/sweep.log
P1='[{"COMBINE":"peers"},{"COMBINE":"peers","PROGRAMS_PER_SM":4},{"COMBINE":"peers","MIN_CHUNK_BLOCKS":8},{"COMBINE":"launch","PROGRAMS_PER_SM":4}]'
KERNEL=$K SWEEP_TIMEOUT=30 SWEEP_ARGS="--points $P1 --workloads $B1" \
  timeout 100 bash scripts/gpu_kernel_report.sh $OUT/ev1 sweep > /dev/null 2>&1
tail -20 $OUT/ev1/sweep.log
# at most 8 files come back
cd $OUT && rm -f */flashdecode_champion.py */dispatch.json && ls -R
