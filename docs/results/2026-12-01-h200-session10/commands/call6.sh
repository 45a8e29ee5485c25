#!/usr/bin/env bash
# session 10, call 6 (carry .whl): the committed champion's report again (the same command as call 5's
# report, for the spread); then, for the next session, BLOCK_N 16 "peers" on the 12 batch-64 shapes call 5 left out.
set -u
bash scripts/gpu_kernel_report.sh $OUT/rep mla_graph mla 2>&1 | grep -E "passed;|timing mode"
rm -f $OUT/rep/mla.log $OUT/rep/mla_graph.log $OUT/rep/mla_plan_per_call_run2.json
B64="7e083fc8 60b29b12 b018a35e 86a0eb47 80797c3d f4367b30 b15c7099 65082ffb d771f51c 5bef8d88 939f995a 1c3743b9"
KERNEL=kernels/mla_decode/flashdecode_triton.py SWEEP_TIMING=graph SWEEP_TIMEOUT=30 \
  SWEEP_ARGS="--points [{\"COMBINE\":\"peers\",\"BLOCK_N\":16}] --workloads $B64" \
  timeout 80 bash scripts/gpu_kernel_report.sh $OUT/g64 sweep > /dev/null 2>&1
tail -16 $OUT/g64/sweep.log
rm -f $OUT/g64/flashdecode_champion.py $OUT/g64/dispatch.json
cd $OUT && ls -R
