#!/usr/bin/env bash
# One short device call (NOTES.md attention v39): the causal pairs again, now
# on the occupancy grid (66 clusters) instead of the balanced one (64), whose
# stride of 64 pairs handed every cluster the same pair lengths: the probe
# build (build/v39, -DJAXDNN_SM90_FWD_CLUSTER_CAUSAL=1) checks 131 at d128,
# then times 3 (no clusters) against 131 (causal pairs, the same static
# schedule), 25 (the dynamic scheduler) and 153 (causal pairs on the dynamic
# scheduler, written after v39 and never run: check 153 first), ROUNDS rounds
# (default 2). JAXDNN_SM90_HANG_TRAP in the build turns a hang into an error.
#   bash benchmarks/gpu_run_v39b_grid.sh OUTDIR   (carry build/v39)
# Build it here first (~1 min):
#   mkdir -p build/v39 && nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --use_fast_math \
#     --expt-relaxed-constexpr -I cpp -I "$(python3 -c 'import jax; print(jax.ffi.include_dir())')" \
#     -diag-suppress 940,2473 -DJAXDNN_SM90_FWD_CLUSTER_CAUSAL=1 benchmarks/sm90_attention_selftest.cu \
#     cpp/attention/hopper/attention_sm90_forward.cu -o build/v39/sm90_attention_selftest
source "$(dirname "$0")/device_call.sh" 200 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
b=$repo/build/v39/sm90_attention_selftest
st check-131-bf16 40 "$b" bf16 131 128
st check-131-f16 40 "$b" f16 131 128
st check-153-bf16 40 "$b" bf16 153 128
st check-153-f16 40 "$b" f16 153 128
grep -h FAIL "$out"/check-*.log | head
ROUNDS=${ROUNDS:-2} st_rounds 30 "$b" bf16 128 3 131 25 153
echo "== self-test TFLOP/s, d128 causal (3 static persistent, 131 causal pairs, 25 dynamic, 153 dynamic pairs)"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,1\)' "$out"/v*-r*.log
