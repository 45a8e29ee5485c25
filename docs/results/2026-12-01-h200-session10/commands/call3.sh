#!/usr/bin/env bash
# session 10, call 3 (carry .whl): the peers points again on the kernel with v1.6 and v1.7, under graph
# replay (device time decides among one-launch points), with points not swept for peers before
# (PROGRAMS_PER_SM 1 at 4 and 8 warps: fewer, longer pieces, DESIGN.md 6.6 next step 1); batch 1 with
# the three peers points of session 9 call 5; a champion from both; its report.
set -u
B1="00cb2bc2 c2e8ef55 deb5f26c 7cd78cb9 951de642 4d9f5e3e 5c200fe9 d232cde2 2cde88e6 53a7dfec f26d4f7f e6bef587 d0da33e2 990b57e3 28210082"
B16="5e86857b 34026642 89070a1d 1250b1f6 5bfb8416 57106903 373074ba c4e14a53 f42ce054 220b10b5 787d2d2f e417264f a128f96f bd2dae14 84221f45 7a9dc58c"
B64="fd4b2558 7e083fc8 60b29b12 b018a35e 86a0eb47 80797c3d f4367b30 b15c7099 65082ffb d771f51c 5bef8d88 45be562f 939f995a c9ba5e7f 0c746a7a 1c3743b9"
K=kernels/mla_decode/flashdecode_triton.py
P='[{"COMBINE":"peers"},{"COMBINE":"peers","PROGRAMS_PER_SM":4},{"COMBINE":"peers","MIN_CHUNK_BLOCKS":8},{"COMBINE":"peers","PROGRAMS_PER_SM":1},{"COMBINE":"peers","PROGRAMS_PER_SM":1,"num_warps":8}]'
KERNEL=$K SWEEP_TIMING=graph SWEEP_TIMEOUT=30 SWEEP_ARGS="--points $P --workloads $B16 $B64" \
  timeout 250 bash scripts/gpu_kernel_report.sh $OUT/g64 sweep > /dev/null 2>&1
tail -40 $OUT/g64/sweep.log
P1='[{"COMBINE":"peers"},{"COMBINE":"peers","PROGRAMS_PER_SM":4},{"COMBINE":"peers","MIN_CHUNK_BLOCKS":8}]'
KERNEL=$K SWEEP_TIMING=graph SWEEP_TIMEOUT=30 SWEEP_ARGS="--points $P1 --workloads $B1" \
  timeout 100 bash scripts/gpu_kernel_report.sh $OUT/g1 sweep > /dev/null 2>&1
tail -20 $OUT/g1/sweep.log
python3 scripts/sweep_family.py --task mla_decode --family flashdecode --dispatch-axes batch_size,num_kv_indices \
  --merge $OUT/g64/sweep.json $OUT/g1/sweep.json --emit-kernel $OUT/flashdecode_champion.py | tail -3
rm -f $OUT/g64/flashdecode_champion.py $OUT/g64/dispatch.json $OUT/g1/flashdecode_champion.py $OUT/g1/dispatch.json
KERNEL=$OUT/flashdecode_champion.py bash scripts/gpu_kernel_report.sh $OUT/rep mla_graph mla 2>&1 | grep -E "passed;|timing mode"
rm -f $OUT/rep/mla.log $OUT/rep/mla_graph.log $OUT/rep/mla_plan_per_call_run2.json
cd $OUT && ls -R
