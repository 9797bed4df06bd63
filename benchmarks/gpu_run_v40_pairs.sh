#!/usr/bin/env bash
# One short device call (NOTES.md attention v40): the causal pairs on the
# dynamic scheduler against the dynamic scheduler alone, both tile orders:
# 25 (chunked) vs 153 (chunked, pairs) and 9 (tile order) vs 137 (tile order,
# pairs), d128 causal, ROUNDS rounds (default 3). Checks 137 first.
#   bash benchmarks/gpu_run_v40_pairs.sh OUTDIR   (carry build/v39, built as in gpu_run_v39b_grid.sh)
source "$(dirname "$0")/device_call.sh" 200 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
b=$repo/build/v39/sm90_attention_selftest
st check-137-bf16 40 "$b" bf16 137 128
grep -h FAIL "$out"/check-*.log | head
ROUNDS=${ROUNDS:-3} st_rounds 30 "$b" bf16 128 25 153 9 137
echo "== self-test TFLOP/s, d128 causal (25 dynamic chunked, 153 + pairs, 9 dynamic tile order, 137 + pairs)"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,1\)' "$out"/v*-r*.log
