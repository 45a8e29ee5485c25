#!/usr/bin/env bash
# session 9, call 3 (carry .whl): events sweep of the committed family (generation word, 16-piece tile at
# most) on batch 1; the champion from call 2's graph sweep (batches 16/64), call 2's batch-16 events
# sweep and this batch-1 events sweep (--override: each later file's workloads from it); its report.
set -u
B1="00cb2bc2 c2e8ef55 deb5f26c 7cd78cb9 951de642 4d9f5e3e 5c200fe9 d232cde2 2cde88e6 53a7dfec f26d4f7f e6bef587 d0da33e2 990b57e3 28210082"
K=kernels/mla_decode/flashdecode_triton.py
P1='[{"COMBINE":"peers"},{"COMBINE":"peers","PROGRAMS_PER_SM":4},{"COMBINE":"peers","MIN_CHUNK_BLOCKS":8},{"COMBINE":"launch","PROGRAMS_PER_SM":4}]'
KERNEL=$K SWEEP_TIMEOUT=30 SWEEP_ARGS="--points $P1 --workloads $B1" \
  timeout 110 bash scripts/gpu_kernel_report.sh $OUT/ev1 sweep > /dev/null 2>&1
tail -20 $OUT/ev1/sweep.log
python3 scripts/sweep_family.py --task mla_decode --family flashdecode --dispatch-axes batch_size,num_kv_indices \
  --merge kernels/mla_decode/sweep_h200_peers_gen_graph.json kernels/mla_decode/sweep_h200_batch16_peers_gen_events.json \
  $OUT/ev1/sweep.json --override --emit-kernel $OUT/flashdecode_champion.py | tail -3
rm -f $OUT/ev1/flashdecode_champion.py $OUT/ev1/dispatch.json
KERNEL=$OUT/flashdecode_champion.py bash scripts/gpu_kernel_report.sh $OUT/rep mla_graph mla 2>&1 | grep -E "passed;|timing mode|geomean"
# at most 8 files come back: the logs' summaries are in this call's output
rm -f $OUT/rep/mla.log $OUT/rep/mla_graph.log
cd $OUT && ls -R
