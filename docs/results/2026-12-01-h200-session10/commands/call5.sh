#!/usr/bin/env bash
# session 10, call 5 (carry .whl): BLOCK_N 16 "peers" points (new in the space) under graph replay on
# batches 1 and 16 and four small batch-64 shapes; a champion from call 3's two sweeps and this one; its report.
set -u
B1="00cb2bc2 c2e8ef55 deb5f26c 7cd78cb9 951de642 4d9f5e3e 5c200fe9 d232cde2 2cde88e6 53a7dfec f26d4f7f e6bef587 d0da33e2 990b57e3 28210082"
B16="5e86857b 34026642 89070a1d 1250b1f6 5bfb8416 57106903 373074ba c4e14a53 f42ce054 220b10b5 787d2d2f e417264f a128f96f bd2dae14 84221f45 7a9dc58c"
K=kernels/mla_decode/flashdecode_triton.py
P='[{"COMBINE":"peers","BLOCK_N":16,"PROGRAMS_PER_SM":1},{"COMBINE":"peers","BLOCK_N":16},{"COMBINE":"peers","BLOCK_N":16,"PROGRAMS_PER_SM":4}]'
KERNEL=$K SWEEP_TIMING=graph SWEEP_TIMEOUT=30 SWEEP_ARGS="--points $P --workloads $B1 $B16 45be562f c9ba5e7f 0c746a7a fd4b2558" \
  timeout 220 bash scripts/gpu_kernel_report.sh $OUT/g16 sweep > /dev/null 2>&1
tail -42 $OUT/g16/sweep.log
python3 scripts/sweep_family.py --task mla_decode --family flashdecode --dispatch-axes batch_size,num_kv_indices \
  --merge kernels/mla_decode/sweep_h200_peers_v17_graph.json kernels/mla_decode/sweep_h200_batch1_peers_v17_graph.json \
  $OUT/g16/sweep.json --emit-kernel $OUT/flashdecode_champion.py | tail -3
rm -f $OUT/g16/flashdecode_champion.py $OUT/g16/dispatch.json
KERNEL=$OUT/flashdecode_champion.py bash scripts/gpu_kernel_report.sh $OUT/rep mla_graph mla 2>&1 | grep -E "passed;|timing mode"
rm -f $OUT/rep/mla.log $OUT/rep/mla_graph.log $OUT/rep/mla_plan_per_call_run2.json
cd $OUT && ls -R
