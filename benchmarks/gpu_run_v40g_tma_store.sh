#!/usr/bin/env bash
# One short device call (NOTES.md attention v40): the forward's O written by
# TMA stores (one thread per warpgroup, build/v40g) against 16-byte stores by
# every thread (build/v40a): checks of the new build (default variant at every
# head dim in bf16 and f16; 25, 9, 137, 131 and 1 at head dim 128; 89 at 64),
# then times 131 (non-causal), 25 and 137 (causal) at head dim 128 and the
# default at head dim 64, alternating, ROUNDS rounds (default 2).
#   bash benchmarks/gpu_run_v40g_tma_store.sh OUTDIR   (carry build/v40a, build/v40g)
# Build as gpu_run_v40c_qbufs.sh says (no -D flag) into build/v40g.
source "$(dirname "$0")/device_call.sh" 300 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
bin() { echo "$repo/build/v40$1/sm90_attention_selftest"; }
st check-def-bf16 60 "$(bin g)" bf16 -1 0
st check-def-f16 60 "$(bin g)" f16 -1 0
for v in 25 9 137 131 1; do st "check-$v-128" 40 "$(bin g)" bf16 $v 128; done
st check-89-64 40 "$(bin g)" bf16 89 64
grep -h FAIL "$out"/check-*.log | head
for round in $(seq 1 "${ROUNDS:-2}"); do
  for b in a g; do
    for v in 131 25 137; do st "v$v-$b-r$round" 30 "$(bin $b)" bf16 $v 128; done
    st "d64-$b-r$round" 30 "$(bin $b)" bf16 -1 64
  done
done
echo "== self-test TFLOP/s, d128 non-causal, 131 (a: thread stores, g: TMA stores)"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,0\)' "$out"/v131-*.log
for v in 25 137; do
  echo "== self-test TFLOP/s, d128 causal, $v"
  grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,1\)' "$out"/v$v-*.log
done
echo "== self-test TFLOP/s, d64 default"
grid_tflops '^\((32,512|16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,64,[01]\)' "$out"/d64-*.log
