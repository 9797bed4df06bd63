#!/usr/bin/env bash
# (The probe code is in commit c14d98a, reverted: level.)
# One short device call (NOTES.md attention v40): two Q buffers for the
# static cluster kernel at head dim 128 (probe build build/v40q2,
# -DJAXDNN_SM90_FWD_CLUSTER_Q_BUFS=2) against the default build (build/v40a):
# checks 131 in the probe build, then times 131 in both, alternating, ROUNDS
# rounds (default 3), dense non-causal d128.
#   bash benchmarks/gpu_run_v40c_qbufs.sh OUTDIR   (carry build/v40a and build/v40q2)
# Build both here first (~1 min each):
#   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --use_fast_math --expt-relaxed-constexpr \
#     -I cpp -I "$(python3 -c 'import jax; print(jax.ffi.include_dir())')" -diag-suppress 940,2473 \
#     [-DJAXDNN_SM90_FWD_CLUSTER_Q_BUFS=2] benchmarks/sm90_attention_selftest.cu \
#     cpp/attention/hopper/attention_sm90_forward.cu -o build/v40{a,q2}/sm90_attention_selftest
source "$(dirname "$0")/device_call.sh" 200 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
st check-q2-bf16 40 "$repo/build/v40q2/sm90_attention_selftest" bf16 131 128
st check-q2-f16 40 "$repo/build/v40q2/sm90_attention_selftest" f16 131 128
grep -h FAIL "$out"/check-*.log | head
for round in $(seq 1 "${ROUNDS:-3}"); do
  st "a-r$round" 30 "$repo/build/v40a/sm90_attention_selftest" bf16 131 128
  st "q2-r$round" 30 "$repo/build/v40q2/sm90_attention_selftest" bf16 131 128
done
echo "== self-test TFLOP/s, d128 dense non-causal, 131 (a: one Q buffer, q2: two)"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,0\)' "$out"/a-r*.log "$out"/q2-r*.log
