#!/usr/bin/env bash
# One device call after v35b (NOTES.md attention v35): which part of the
# cluster pair costs, from three self-test builds of variant 131 at d128
# (JAXDNN_SM90_FWD_CLUSTER_MODE 0 = shared K/V loads: build/v35; 1 = whole
# loads per CTA, stages coupled: build/v35m1; 2 = the cluster launch alone:
# build/v35m2) against 3, two rounds; then jaxdnn (dynamic scheduler for
# causal up to 8192 keys by default) and the forward GPU tests.
#   bash benchmarks/gpu_run_v35c_modes.sh OUTDIR   (carry build/v35, build/v35m1, build/v35m2)
source "$(dirname "$0")/device_call.sh" 585 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
build_jaxdnn &
for round in 1 2; do
  st v3-r$round 45 "$repo/build/v35/sm90_attention_selftest" bf16 3 128
  for m in 0 1 2; do
    b=$repo/build/v35m$m/sm90_attention_selftest
    [ $m = 0 ] && b=$repo/build/v35/sm90_attention_selftest
    st v131-m$m-r$round 45 "$b" bf16 131 128
  done
done
echo "== self-test TFLOP/s, d128 non-causal"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,0\)' "$out"/v*-r*.log
wait; cat "$out/build.rc"
gpu_tests 300 "test_gpu_matches_oracle or test_gpu_long_sequence"
