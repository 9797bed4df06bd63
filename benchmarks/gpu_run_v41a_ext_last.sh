#!/usr/bin/env bash
# One device call (NOTES.md attention v41): the extended forward path without
# a terminator slot per tile (the tile's last block flagged in its info word,
# the first chunk voted before the Q load; build/ext1), against the code
# before (build/ext0: commit 48aedd6's kernel with this self-test) and the
# new code with two Q buffers (build/ext2, -DJAXDNN_SM90_FWD_EXT_Q_BUFS=2).
# Checks every extended case in every variant (ext1, bf16 and f16; ext2 the
# timed cases), then ROUNDS (default 3) alternating rounds of the timed cases
# (the harness's packed documents first) in their default variants.
#   bash benchmarks/gpu_run_v41a_ext_last.sh OUTDIR   (carry build/ext0, build/ext1, build/ext2)
# Builds (~70 s each):
#   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --use_fast_math
#     --expt-relaxed-constexpr -I cpp -I $INC -diag-suppress 940,2473 [-D...]
#     benchmarks/sm90_attention_ext_selftest.cu cpp/attention/hopper/attention_sm90_forward.cu
#     -o build/extN/sm90_attention_ext_selftest
source "$(dirname "$0")/device_call.sh" 560 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
bin() { echo "$repo/build/ext$1/sm90_attention_ext_selftest"; }
st check-ext1-bf16 150 "$(bin 1)" bf16
st check-ext1-f16 150 "$(bin 1)" f16
st check-ext2-bf16 60 "$(bin 2)" bf16 time
grep -h FAIL "$out"/check-*.log | head
for round in $(seq 1 "${ROUNDS:-3}"); do
  for b in 0 1 2; do st "t-ext$b-r$round" 60 "$(bin $b)" bf16 time; done
done
echo "== timed cases, default variant (ms; ext0: before, ext1: last-block flag, ext2: + two Q buffers)"
ext_timings "$out"/t-*.log
