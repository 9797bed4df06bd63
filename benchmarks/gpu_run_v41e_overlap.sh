#!/usr/bin/env bash
# One device call (NOTES.md attention v41e): the epilogue under the next
# tile's first S gemm (-DJAXDNN_SM90_FWD_OVERLAP_EPILOGUE=1, build/ov1: the
# dense dynamic two-consumer kernels) against the code before it (build/ovb,
# the HEAD it was written on). Checks of ov1 (variants 25, 9 and the default
# at head dims 128 and 64, bf16; the default in f16), then ROUNDS (default 3)
# alternating rounds: 25 at head dim 128 (the dynamic causal kernel) and the
# default at head dim 64.
#   bash benchmarks/gpu_run_v41e_overlap.sh OUTDIR   (carry build/ovb, build/ov1)
# Builds: nvcc as gpu_run_v41a_ext_last.sh says, with benchmarks/sm90_attention_selftest.cu;
# the probe's code is commit 97a28f8 (reverted in the commit after it).
source "$(dirname "$0")/device_call.sh" 560 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
bin() { echo "$repo/build/ov$1/sm90_attention_selftest"; }
for v in 25 9 -1; do st "check-$v-128" 60 "$(bin 1)" bf16 $v 128; done
for v in 25 -1; do st "check-$v-64" 60 "$(bin 1)" bf16 $v 64; done
st check-def-f16 90 "$(bin 1)" f16 -1 0
grep -h FAIL "$out"/check-*.log | head
for round in $(seq 1 "${ROUNDS:-3}"); do
  for b in b 1; do
    st "v25-$b-r$round" 40 "$(bin $b)" bf16 25 128
    st "d64-$b-r$round" 40 "$(bin $b)" bf16 -1 64
  done
done
echo "== self-test TFLOP/s, d128 causal, 25 (b: before, 1: overlap)"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,1\)' "$out"/v25-*.log
echo "== self-test TFLOP/s, d64 default"
grid_tflops '^\((32,512|16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,64,[01]\)' "$out"/d64-*.log
