#!/usr/bin/env bash
# session 8, call 7: COMBINE "peers" with the merge tile chosen per request from its piece count
# (_merge_share): graph sweep of 4 peers points on batches 16/64, joined with call 4's 4 pdl points
# (pdl_points_of_call4.json: call 4's graph sweep without its old peers points), batch 1 from call 4's
# events sweep (--override); the champion from them, then its report (graph first, then events twice
# and plan per call twice).
set -u
R=docs/results/2026-12-01-h200-mla-peers/commands
B1664="5e86857b 34026642 89070a1d 1250b1f6 5bfb8416 57106903 373074ba c4e14a53 f42ce054 220b10b5 787d2d2f e417264f a128f96f bd2dae14 84221f45 7a9dc58c fd4b2558 7e083fc8 60b29b12 b018a35e 86a0eb47 80797c3d f4367b30 b15c7099 65082ffb d771f51c 5bef8d88 45be562f 939f995a c9ba5e7f 0c746a7a 1c3743b9"
K=kernels/mla_decode/flashdecode_triton.py
P='[{"COMBINE":"peers"},{"COMBINE":"peers","MIN_CHUNK_BLOCKS":8},{"COMBINE":"peers","PROGRAMS_PER_SM":4},{"COMBINE":"peers","PROGRAMS_PER_SM":1,"num_warps":8,"num_stages":9}]'
KERNEL=$K SWEEP_TIMING=graph SWEEP_TIMEOUT=30 SWEEP_ARGS="--points $P --workloads $B1664" \
  timeout 150 bash scripts/gpu_kernel_report.sh $OUT/sweep sweep > /dev/null 2>&1
tail -42 $OUT/sweep/sweep.log
python3 -c "
import json, sys
a = json.load(open('$R/pdl_points_of_call4.json')); b = json.load(open('$OUT/sweep/sweep.json'))
assert a['timing'] == b['timing'] == 'graph'
a['points'] += b['points']
json.dump(a, open('$OUT/sweep_graph_joined.json', 'w'), indent=1)"
python3 scripts/sweep_family.py --task mla_decode --family flashdecode --dispatch-axes batch_size,num_kv_indices \
  --merge $OUT/sweep_graph_joined.json kernels/mla_decode/sweep_h200_batch1_peers_events.json --override \
  --emit-kernel $OUT/flashdecode_champion.py | tail -3
rm -f $OUT/sweep/flashdecode_champion.py $OUT/sweep/dispatch.json
KERNEL=$OUT/flashdecode_champion.py bash scripts/gpu_kernel_report.sh $OUT/rep mla_graph mla 2>&1 | grep -E "passed;|timing mode"
# at most 8 files come back: the logs' summaries are in this call's output
rm -f $OUT/sweep_graph_joined.json $OUT/rep/mla.log $OUT/rep/mla_graph.log
