#!/usr/bin/env bash
# (The probe code is in commit 13ad5e8, reverted: level to -1%.)
# One short device call (NOTES.md attention v40): warpgroup 0's half-width
# gemms on the causal diagonal block (build/v40f) against the build before
# (build/v40a): checks of the new build (default variant at every head dim in
# bf16 and f16; 25, 9, 137, 153 and 1 at head dim 128; 1 and 25 at 64), then
# times 25 and 137 (causal) and 131 (non-causal, unchanged in principle) in
# both builds, alternating, ROUNDS rounds (default 3).
#   bash benchmarks/gpu_run_v40f_halfdiag.sh OUTDIR   (carry build/v40a, build/v40f)
# Build as gpu_run_v40c_qbufs.sh says (no -D flag) into build/v40f.
source "$(dirname "$0")/device_call.sh" 300 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
bin() { echo "$repo/build/v40$1/sm90_attention_selftest"; }
st check-def-bf16 60 "$(bin f)" bf16 -1 0
st check-def-f16 60 "$(bin f)" f16 -1 0
for v in 25 9 137 153 1; do st "check-$v-128" 40 "$(bin f)" bf16 $v 128; done
for v in 1 25; do st "check-$v-64" 40 "$(bin f)" bf16 $v 64; done
grep -h FAIL "$out"/check-*.log | head
for round in $(seq 1 "${ROUNDS:-3}"); do
  for b in a f; do for v in 25 137 131; do st "v$v-$b-r$round" 30 "$(bin $b)" bf16 $v 128; done; done
done
for v in 25 137; do
  echo "== self-test TFLOP/s, d128 causal, $v (a: before, f: half-width diagonal gemms)"
  grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,1\)' "$out"/v$v-*.log
done
echo "== self-test TFLOP/s, d128 non-causal, 131"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,0\)' "$out"/v131-*.log
