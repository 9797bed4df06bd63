#!/usr/bin/env bash
# One short device call (NOTES.md attention v39): clusters on causal pairs
# (probe build build/v39, -DJAXDNN_SM90_FWD_CLUSTER_CAUSAL=1): the self-test
# checks 131 at d128 in bf16 and f16 (causal cases clustered where the query
# tiles per (batch, head) are even), then times 3 (static persistent), 131
# (the same with causal pairs) and 25 (the dynamic scheduler), ROUNDS rounds.
#   bash benchmarks/gpu_run_v39_causal_pairs.sh OUTDIR   (carry build/v39)
source "$(dirname "$0")/device_call.sh" 200 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
b=$repo/build/v39/sm90_attention_selftest
st check-131-bf16 40 "$b" bf16 131 128
st check-131-f16 40 "$b" f16 131 128
grep -h FAIL "$out"/check-*.log | head
ROUNDS=${ROUNDS:-1} st_rounds 30 "$b" bf16 128 3 131 25
echo "== self-test TFLOP/s, d128 causal (3 static persistent, 131 causal pairs, 25 dynamic)"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,1\)' "$out"/v*-r*.log
