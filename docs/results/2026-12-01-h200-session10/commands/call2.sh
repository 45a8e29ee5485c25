#!/usr/bin/env bash
# session 10, call 2 (carry .whl and .ab): the champion with v1.6 (max first) and v1.7 (bf16 partials),
# same dispatch as before. 1. its report (events twice, graph, per call); 2. the previous champion
# (cd9f419, .ab/champ_prev.py) against it side by side on ten shapes; 3. the gather ceiling on the 8
# largest, now with a copy of 4x the bytes.
set -u
bash scripts/gpu_kernel_report.sh $OUT/rep mla_graph mla 2>&1 | grep -E "passed;|timing mode"
rm -f $OUT/rep/mla.log $OUT/rep/mla_graph.log
mkdir -p $OUT/ab $OUT/gather
( . scripts/device_env.sh && use_wheels flashinfer && export PYTHONUNBUFFERED=1 &&
  timeout 150 python3 scripts/mla_probe.py .ab/champ_prev.py kernels/mla_decode/flashdecode_champion.py --deadline 140 \
    --workloads 00cb2bc2 53a7dfec d232cde2 a128f96f bd2dae14 84221f45 c9ba5e7f 0c746a7a 5bef8d88 80797c3d \
    --json $OUT/ab/probe.json ) > $OUT/ab/probe.log 2>&1
grep -v '^\[' $OUT/ab/probe.log | grep " us " | tail -40
( . scripts/device_env.sh && use_wheels flashinfer && export PYTHONUNBUFFERED=1 &&
  timeout 200 python3 scripts/gather_ceiling.py --deadline 190 --json $OUT/gather/gather.json ) > $OUT/gather/gather.log 2>&1
grep -v '^\[' $OUT/gather/gather.log | grep " us " | tail -80
cd $OUT && ls -R
