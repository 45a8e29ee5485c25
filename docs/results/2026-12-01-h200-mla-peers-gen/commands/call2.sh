#!/usr/bin/env bash
# session 9, call 2 (carry .whl and .ab): call 1 put the peers kernel with the generation word and the
# 32-piece tile (a3fc70b) 1-1.9 us behind the one before on two batch-16 shapes whose longest requests
# have 20-35 pieces, and 0.6-1.1 us ahead elsewhere. 1. probe of three files side by side at COMBINE
# "peers": before (3d65754), generation word + 32-piece tile (a3fc70b, .ab/flashdecode_s32.py), and the
# generation word alone (the working tree); 2. graph sweep of peers points on batches 16/64 and an events
# sweep on batch 16 (FlashInfer timed at every point), both of the working tree's file.
set -u
B16="5e86857b 34026642 89070a1d 1250b1f6 5bfb8416 57106903 373074ba c4e14a53 f42ce054 220b10b5 787d2d2f e417264f a128f96f bd2dae14 84221f45 7a9dc58c"
B64="fd4b2558 7e083fc8 60b29b12 b018a35e 86a0eb47 80797c3d f4367b30 b15c7099 65082ffb d771f51c 5bef8d88 45be562f 939f995a c9ba5e7f 0c746a7a 1c3743b9"
K=kernels/mla_decode/flashdecode_triton.py
mkdir -p $OUT/probe
( . scripts/device_env.sh && use_wheels flashinfer && export PYTHONUNBUFFERED=1 &&
  timeout 150 python3 scripts/mla_probe.py .ab/flashdecode_before.py .ab/flashdecode_s32.py $K \
    --points '[{"COMBINE":"peers"}]' --deadline 140 --workloads bd2dae14 84221f45 e417264f 53a7dfec c9ba5e7f fd4b2558 \
    --json $OUT/probe/probe.json ) > $OUT/probe/probe.log 2>&1
grep -v '^\[' $OUT/probe/probe.log | grep " us " | tail -30
P='[{"COMBINE":"peers"},{"COMBINE":"peers","MIN_CHUNK_BLOCKS":8},{"COMBINE":"peers","PROGRAMS_PER_SM":4}]'
KERNEL=$K SWEEP_TIMING=graph SWEEP_TIMEOUT=30 SWEEP_ARGS="--points $P --workloads $B16 $B64" \
  timeout 170 bash scripts/gpu_kernel_report.sh $OUT/graph sweep > /dev/null 2>&1
tail -36 $OUT/graph/sweep.log
P16='[{"COMBINE":"peers"},{"COMBINE":"peers","PROGRAMS_PER_SM":4}]'
KERNEL=$K SWEEP_TIMEOUT=30 SWEEP_ARGS="--points $P16 --workloads $B16" \
  timeout 90 bash scripts/gpu_kernel_report.sh $OUT/ev16 sweep > /dev/null 2>&1
tail -20 $OUT/ev16/sweep.log
cd $OUT && rm -f */flashdecode_champion.py */dispatch.json && ls -R
