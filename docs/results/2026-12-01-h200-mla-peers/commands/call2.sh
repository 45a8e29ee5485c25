#!/usr/bin/env bash
# session 8, call 2: why COMBINE "peers" is slow: Nsight Compute (occupancy, stalls) on peers vs pdl,
# and diagnostic variants (no merge / no wait / no "last" fallback; outputs not checked) in the probe
# The variants were copies of kernels/mla_decode/flashdecode_triton.py in diag/ (not kept), each with one change:
#   nomerge.py: the peers merge loop made empty; nospin.py: the wait made `while done < 0`;
#   nolast.py: `if n_pieces <= PEER_MAX:` made `if True:` (no "last" fallback).
set -u
K=kernels/mla_decode/flashdecode_triton.py
KERNEL=$K PROBE_POINTS='[{"COMBINE":"peers"},{"COMBINE":"pdl"}]' PROBE_WORKLOADS='c9ba5e7f a128f96f' \
  timeout 240 bash scripts/gpu_kernel_report.sh $OUT/ncu ncu
. scripts/device_env.sh; use_wheels flashinfer
timeout 200 python3 scripts/mla_probe.py $K diag/nomerge.py diag/nospin.py diag/nolast.py --points '[{"COMBINE":"peers"}]' \
  --workloads c9ba5e7f a128f96f 84221f45 --deadline 190 --json $OUT/diag.json 2>&1 | tee $OUT/diag.log | grep -v "first call"
