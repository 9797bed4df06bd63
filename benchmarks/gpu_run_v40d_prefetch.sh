#!/usr/bin/env bash
# (The probe code is in commit 7f94702, reverted: it lost 1-12%.)
# One short device call (NOTES.md attention v40): L2 prefetches by the dense
# forward's producer (probe builds, -DJAXDNN_SM90_FWD_L2_PREFETCH=1: the next
# tile's Q and first K/V blocks at each tile's start, static schedules; =3:
# also 4 K/V blocks ahead within a tile) against the default build
# (build/v40a): checks the =3 build (131 and 25), then times 131 (dense
# non-causal, clusters) in a/p1/p3 and 25 (causal, dynamic) in a/p3,
# alternating, ROUNDS rounds (default 3), head dim 128.
#   bash benchmarks/gpu_run_v40d_prefetch.sh OUTDIR   (carry build/v40a, build/v40p1, build/v40p3)
# Build as gpu_run_v40c_qbufs.sh says, with -DJAXDNN_SM90_FWD_L2_PREFETCH=1 or 3.
source "$(dirname "$0")/device_call.sh" 240 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
bin() { echo "$repo/build/v40$1/sm90_attention_selftest"; }
st check-p3-131 40 "$(bin p3)" bf16 131 128
st check-p3-25 40 "$(bin p3)" bf16 25 128
st check-p3-131-f16 40 "$(bin p3)" f16 131 128
grep -h FAIL "$out"/check-*.log | head
for round in $(seq 1 "${ROUNDS:-3}"); do
  for b in a p1 p3; do st "nc-$b-r$round" 30 "$(bin $b)" bf16 131 128; done
  for b in a p3; do st "c-$b-r$round" 30 "$(bin $b)" bf16 25 128; done
done
echo "== self-test TFLOP/s, d128 dense non-causal, 131 (a: default, p1: next tile, p3: + 4 blocks ahead)"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,0\)' "$out"/nc-*.log
echo "== self-test TFLOP/s, d128 causal, 25 (a: default, p3: 4 blocks ahead)"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,1\)' "$out"/c-*.log
