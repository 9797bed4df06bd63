#!/usr/bin/env bash
# One short device call (NOTES.md attention v39): causal pairs with rank 1
# held at its dummy stage until rank 0 released that stage's K (probe build
# build/v39h, -DJAXDNN_SM90_FWD_CLUSTER_CAUSAL=2) against the plain pairs
# (build/v39) and no clusters (3): check, then one timing round each.
#   bash benchmarks/gpu_run_v39b_hold.sh OUTDIR   (carry build/v39, build/v39h)
# Build both here first (~1 min each), VALUE 1 into build/v39, 2 into build/v39h:
#   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --use_fast_math \
#     --expt-relaxed-constexpr -I cpp -I "$(python3 -c 'import jax; print(jax.ffi.include_dir())')" \
#     -diag-suppress 940,2473 -DJAXDNN_SM90_FWD_CLUSTER_CAUSAL=VALUE benchmarks/sm90_attention_selftest.cu \
#     cpp/attention/hopper/attention_sm90_forward.cu -o build/v39h/sm90_attention_selftest
source "$(dirname "$0")/device_call.sh" 200 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
st check-131h-bf16 40 "$repo/build/v39h/sm90_attention_selftest" bf16 131 128
st v3 30 "$repo/build/v39/sm90_attention_selftest" bf16 3 128
st v131 30 "$repo/build/v39/sm90_attention_selftest" bf16 131 128
st v131h 30 "$repo/build/v39h/sm90_attention_selftest" bf16 131 128
echo "== self-test TFLOP/s, d128 causal (3 no clusters, 131 pairs, 131h pairs held)"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,1\)' "$out"/v3.log "$out"/v131.log "$out"/v131h.log
