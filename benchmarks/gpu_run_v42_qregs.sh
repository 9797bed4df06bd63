#!/usr/bin/env bash
# One device call (NOTES.md attention v42): S = Q K^T with Q's fragments in
# registers (-DJAXDNN_SM90_FWD_Q_REGS=2, build/qr2: head dims 128 and 64, two
# consumer warpgroups) against the same code with it off (build/qr0). Checks
# of qr2 (d128 variants 131, 25, 137, 9 and the default; d64 default; the
# default in f16; the extended self-test in bf16), then ROUNDS (default 3)
# alternating rounds of the default variant at head dims 128 and 64 and the
# extended self-test's timed cases.
#   bash benchmarks/gpu_run_v42_qregs.sh OUTDIR   (carry build/qr0, build/qr2)
# Builds: nvcc as build_sm90_selftests.sh does, plus -DJAXDNN_SM90_FWD_Q_REGS=0|2,
# sm90_attention_selftest.cu and sm90_attention_ext_selftest.cu, into build/qr0|2.
source "$(dirname "$0")/device_call.sh" 570 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
bin() { echo "$repo/build/qr$1/sm90_attention_selftest"; }
ext() { echo "$repo/build/qr$1/sm90_attention_ext_selftest"; }
for v in 131 25 137 9 -1; do st "check-$v-128" 60 "$(bin 2)" bf16 $v 128; done
st check-def-64 60 "$(bin 2)" bf16 -1 64
st check-def-f16-128 60 "$(bin 2)" f16 -1 128
st check-ext-bf16 150 "$(ext 2)" bf16
grep -h FAIL "$out"/check-*.log | head
for round in $(seq 1 "${ROUNDS:-3}"); do
  for b in 0 2; do
    st "d128-$b-r$round" 45 "$(bin $b)" bf16 -1 128
    st "d64-$b-r$round" 40 "$(bin $b)" bf16 -1 64
    st "ext-$b-r$round" 40 "$(ext $b)" bf16 time
  done
done
echo "== self-test TFLOP/s, d128 default (0: Q from shared memory, 2: Q in registers)"
grid_tflops '^\((32,512|16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,[01]\)' "$out"/d128-*.log
echo "== self-test TFLOP/s, d64 default"
grid_tflops '^\((32,512|16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,64,[01]\)' "$out"/d64-*.log
echo "== ext timed cases (ms)"
ext_timings "$out"/ext-*.log
