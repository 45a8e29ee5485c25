#!/usr/bin/env bash
# session 10, call 1 (carry .whl and .ab): DESIGN.md 6.7's three questions. 1. probe of four files side
# by side at COMBINE "peers" (default point): main (.ab/fd_main.py), the step-maximum-first merge
# (.ab/fd_maxfirst.py, branch next/merge-max-first), partials in bf16 and in fp16 (.ab/fd_bf16part.py,
# .ab/fd_fp16part.py, branch next/bf16-partials); 2. the gather ceiling on the 8 largest workloads and
# two small batch-64 ones, next to FlashInfer and the committed champion.
set -u
mkdir -p $OUT/probe $OUT/gather
( . scripts/device_env.sh && use_wheels flashinfer && export PYTHONUNBUFFERED=1 &&
  timeout 240 python3 scripts/mla_probe.py .ab/fd_main.py .ab/fd_maxfirst.py .ab/fd_bf16part.py .ab/fd_fp16part.py \
    --points '[{"COMBINE":"peers"}]' --deadline 230 --workloads bd2dae14 84221f45 c9ba5e7f 0c746a7a 53a7dfec d232cde2 \
    --json $OUT/probe/probe.json ) > $OUT/probe/probe.log 2>&1
grep -v '^\[' $OUT/probe/probe.log | grep " us " | tail -40
( . scripts/device_env.sh && use_wheels flashinfer && export PYTHONUNBUFFERED=1 &&
  timeout 300 python3 scripts/gather_ceiling.py --deadline 290 \
    --workloads 5bef8d88 1c3743b9 939f995a d771f51c 65082ffb b15c7099 f4367b30 80797c3d c9ba5e7f 0c746a7a \
    --json $OUT/gather/gather.json ) > $OUT/gather/gather.log 2>&1
grep -v '^\[' $OUT/gather/gather.log | tail -110
