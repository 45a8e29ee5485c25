#!/usr/bin/env bash
# session 9, call 6 (carry .whl): the committed champion's report again, on another machine start (call 5's
# events times were host-bound for both kernels: 40-90 us against 6-47 us of device time); then a probe of
# host time per call against the flush's device time on this start.
set -u
bash scripts/gpu_kernel_report.sh $OUT/rep mla_graph mla 2>&1 | grep -E "passed;|timing mode"
rm -f $OUT/rep/mla.log $OUT/rep/mla_graph.log
PROBE_WORKLOADS='00cb2bc2 bd2dae14 5bef8d88' PROBE_DEADLINE=50 timeout 60 bash scripts/gpu_kernel_report.sh $OUT/probe probe 2>&1 | grep -E "flush| us " | grep -v "^\[" | tail -8
rm -f $OUT/probe/probe.log
cd $OUT && ls -R
