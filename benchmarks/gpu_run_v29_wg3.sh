#!/usr/bin/env bash
# One device call for the head dim 64 forward with three consumer warpgroups
# (192-row tiles; variant bit 64, JAXDNN_ATTENTION_SM90_D64_WG3=1; NOTES.md
# attention v29):
#   1. jaxdnn builds in the background while the self-test (carried in
#      build/wg3) checks 67 (pingpong) and 66 (no pingpong), bf16 and f16, then
#      times 3 (the default: two warpgroups) against 67 and 66, ROUNDS rounds;
#   2. through jax (kernel_timing.py, GPU-busy): the d64 non-causal forward
#      with and without the switch, alternating.
#   bash benchmarks/gpu_run_v29_wg3.sh OUTDIR   (carry .whl and build/wg3)
source "$(dirname "$0")/device_call.sh" "${BUDGET:-280}" "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
build_jaxdnn &
b=$repo/build/wg3/sm90_attention_selftest
st check-67-f16 40 "$b" f16 67 64
for round in $(seq 1 "${ROUNDS:-2}"); do
  for v in 3 67 66; do st v$v-r$round 40 "$b" bf16 $v 64; done
done
grep -h FAIL "$out"/*.log | head -10
echo "== self-test TFLOP/s, d64 non-causal (variant 3 = two warpgroups, 67 / 66 = three)"
grid_tflops '^\((8,2048|4,4096|2,8192|1,16384|16,1024|32,512),[0-9]+,16,16,64,0\)' "$out"/v*-r*.log
wait; cat "$out/build.rc"
for round in 1 2; do
  for sw in A=default JAXDNN_ATTENTION_SM90_D64_WG3=1; do
    [ $((budget - SECONDS)) -lt 35 ] && { echo "jax $sw: skipped (time)"; continue; }
    ( cd /tmp && env $sw timeout "$(left 60)" python3 "$repo/benchmarks/kernel_timing.py" --attention --dim 64 \
        --seqs 1024,2048,4096,8192,16384 --impls jaxdnn --ops fwd --causal 0 ) 2>&1 | grep -E "^attn" > "$out/kt-$round-${sw%%=*}.txt"
    echo "-- jax $sw"; cut -c1-100 "$out/kt-$round-${sw%%=*}.txt"
  done
done
