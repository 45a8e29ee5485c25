#!/usr/bin/env bash
# session 8, call 4: graph sweep of 8 peers + 4 pdl points on batches 16/64, events sweep of 6 points on batch 1
set -u
B1="00cb2bc2 c2e8ef55 deb5f26c 7cd78cb9 951de642 4d9f5e3e 5c200fe9 d232cde2 2cde88e6 53a7dfec f26d4f7f e6bef587 d0da33e2 990b57e3 28210082"
B1664="5e86857b 34026642 89070a1d 1250b1f6 5bfb8416 57106903 373074ba c4e14a53 f42ce054 220b10b5 787d2d2f e417264f a128f96f bd2dae14 84221f45 7a9dc58c fd4b2558 7e083fc8 60b29b12 b018a35e 86a0eb47 80797c3d f4367b30 b15c7099 65082ffb d771f51c 5bef8d88 45be562f 939f995a c9ba5e7f 0c746a7a 1c3743b9"
K=kernels/mla_decode/flashdecode_triton.py
P='[{"COMBINE":"peers"},{"COMBINE":"peers","MIN_CHUNK_BLOCKS":8},{"COMBINE":"peers","PROGRAMS_PER_SM":4},{"COMBINE":"peers","PROGRAMS_PER_SM":1,"num_warps":8,"num_stages":9},{"COMBINE":"peers","PROGRAMS_PER_SM":1,"MIN_CHUNK_BLOCKS":8,"num_warps":8,"num_stages":9},{"COMBINE":"peers","num_warps":8,"num_stages":9},{"COMBINE":"peers","PROGRAMS_PER_SM":1,"num_stages":9},{"COMBINE":"peers","num_warps":8},{"COMBINE":"pdl"},{"COMBINE":"pdl","MIN_CHUNK_BLOCKS":8},{"COMBINE":"pdl","PROGRAMS_PER_SM":4},{"COMBINE":"pdl","PROGRAMS_PER_SM":1,"num_warps":8,"num_stages":9}]'
KERNEL=$K SWEEP_TIMING=graph SWEEP_TIMEOUT=30 SWEEP_ARGS="--points $P --workloads $B1664" \
  timeout 270 bash scripts/gpu_kernel_report.sh $OUT/sweep_graph sweep
P1='[{"COMBINE":"peers"},{"COMBINE":"peers","PROGRAMS_PER_SM":4},{"COMBINE":"peers","MIN_CHUNK_BLOCKS":8},{"COMBINE":"ctas"},{"COMBINE":"ctas","PROGRAMS_PER_SM":4},{"COMBINE":"launch","PROGRAMS_PER_SM":4}]'
KERNEL=$K SWEEP_TIMEOUT=30 SWEEP_ARGS="--points $P1 --workloads $B1" \
  timeout 170 bash scripts/gpu_kernel_report.sh $OUT/sweep_b1 sweep
cd $OUT && rm -f */flashdecode_champion.py && ls -R
