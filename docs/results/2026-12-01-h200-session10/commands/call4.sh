#!/usr/bin/env bash
# session 10, call 4 (carry .whl): 1. the committed champion's report again (the same command as call 3's
# report, for the spread); 2. the gather ceiling with clean-L2 differences and a Triton copy, on the 8
# largest; 3. a probe of tile lengths on four small batch-16/64 shapes (DESIGN.md 6.7 items 4 and 5).
set -u
bash scripts/gpu_kernel_report.sh $OUT/rep mla_graph mla 2>&1 | grep -E "passed;|timing mode"
rm -f $OUT/rep/mla.log $OUT/rep/mla_graph.log $OUT/rep/mla_plan_per_call_run2.json
mkdir -p $OUT/gather $OUT/tile
( . scripts/device_env.sh && use_wheels flashinfer && export PYTHONUNBUFFERED=1 &&
  timeout 240 python3 scripts/gather_ceiling.py --deadline 230 --json $OUT/gather/gather.json ) > $OUT/gather/gather.log 2>&1
grep -v '^\[' $OUT/gather/gather.log | grep " us " | tail -120
( . scripts/device_env.sh && use_wheels flashinfer && export PYTHONUNBUFFERED=1 &&
  timeout 120 python3 scripts/mla_probe.py kernels/mla_decode/flashdecode_triton.py --deadline 110 \
    --points '[{"COMBINE":"peers"},{"COMBINE":"peers","BLOCK_N":64,"num_stages":3},{"COMBINE":"peers","BLOCK_N":16},{"COMBINE":"peers","MIN_CHUNK_BLOCKS":4}]' \
    --workloads c9ba5e7f 0c746a7a a128f96f 34026642 --json $OUT/tile/probe.json ) > $OUT/tile/probe.log 2>&1
grep -v '^\[' $OUT/tile/probe.log | grep -E " us |n_regs" | tail -30
cd $OUT && ls -R
