#!/usr/bin/env bash
# session 9, call 5 (carry .whl): call 4's report lost most on the three batch-1 shapes whose point (from
# call 3's events sweep) is COMBINE "launch", two launches: 0.93-1.06x with events against 1.15-1.37x
# under graph replay (call 1's events sweep had chosen peers there). Rule from here on: one launch
# (peers) at every shape, the points among it chosen on device time. So: graph sweep of 3 peers points
# on batch 1; the champion from call 2's graph sweep (batches 16/64) and this one (--override); its
# report (graph replay, events twice, plan per call twice).
set -u
B1="00cb2bc2 c2e8ef55 deb5f26c 7cd78cb9 951de642 4d9f5e3e 5c200fe9 d232cde2 2cde88e6 53a7dfec f26d4f7f e6bef587 d0da33e2 990b57e3 28210082"
K=kernels/mla_decode/flashdecode_triton.py
P1='[{"COMBINE":"peers"},{"COMBINE":"peers","PROGRAMS_PER_SM":4},{"COMBINE":"peers","MIN_CHUNK_BLOCKS":8}]'
KERNEL=$K SWEEP_TIMING=graph SWEEP_TIMEOUT=30 SWEEP_ARGS="--points $P1 --workloads $B1" \
  timeout 110 bash scripts/gpu_kernel_report.sh $OUT/g1 sweep > /dev/null 2>&1
tail -20 $OUT/g1/sweep.log
python3 scripts/sweep_family.py --task mla_decode --family flashdecode --dispatch-axes batch_size,num_kv_indices \
  --merge kernels/mla_decode/sweep_h200_peers_gen_graph.json $OUT/g1/sweep.json --override \
  --emit-kernel $OUT/flashdecode_champion.py | tail -3
rm -f $OUT/g1/flashdecode_champion.py $OUT/g1/dispatch.json
KERNEL=$OUT/flashdecode_champion.py bash scripts/gpu_kernel_report.sh $OUT/rep mla_graph mla 2>&1 | grep -E "passed;|timing mode"
rm -f $OUT/rep/mla.log $OUT/rep/mla_graph.log
cd $OUT && ls -R
