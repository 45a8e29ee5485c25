#!/usr/bin/env bash
# session 9, call 4 (carry .whl): the report of the committed champion (graph replay, then events twice
# and plan per call twice), then Nsight Compute's default sections for it and FlashInfer on the two
# slowest batch-64 shapes under graph replay.
set -u
bash scripts/gpu_kernel_report.sh $OUT/rep mla_graph mla 2>&1 | grep -E "passed;|timing mode"
rm -f $OUT/rep/mla.log $OUT/rep/mla_graph.log
PROBE_WORKLOADS='c9ba5e7f 0c746a7a' timeout 150 bash scripts/gpu_kernel_report.sh $OUT/ncu ncu 2>&1 | tail -3
cd $OUT && ls -R
