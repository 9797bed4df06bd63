#!/usr/bin/env bash
# One device call for the head dim 64 causal forward on three consumer
# warpgroups (192-row tiles on the dynamic scheduler; variant bit 64 with 25,
# JAXDNN_ATTENTION_SM90_D64_WG3_CAUSAL=1; NOTES.md attention v30; compile-only
# when written):
#   1. jaxdnn builds in the background while the self-test (carried in
#      build/wg3, built by `bash benchmarks/build_sm90_selftests.sh build/wg3`)
#      checks 89 and 73 (bf16, f16) at head dim 64, then times 25 (two
#      warpgroups, the causal default) against 89, ROUNDS rounds;
#   2. the GPU tests with head dim 64 with the switch on;
#   3. through jax (GPU-busy): the d64 causal forward with and without it, and
#      then the d64 grid beside cuDNN with the switch (runbook item 1).
#   bash benchmarks/gpu_run_v30_wg3_causal.sh OUTDIR   (carry .whl and build/wg3)
source "$(dirname "$0")/device_call.sh" 580 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
source "$repo/benchmarks/tokamax_site.sh" > /dev/null 2>&1
build_jaxdnn &
b=${BIN:-$repo/build/wg3}/sm90_attention_selftest
st check-89-f16 40 "$b" f16 89 64
st check-73-bf16 40 "$b" bf16 73 64
st_rounds 40 "$b" bf16 64 25 89
grep -h FAIL "$out"/*.log | head -10
echo "== self-test TFLOP/s, d64 causal (25 = two warpgroups, 89 = three)"
grid_tflops '^\((8,2048|4,4096|2,8192|1,16384|16,1024|32,512),[0-9]+,16,16,64,1\)' "$out"/v*-r*.log
wait; cat "$out/build.rc"
gpu_tests 120 "gpu and 64" JAXDNN_ATTENTION_SM90_D64_WG3_CAUSAL=1
kt_rounds d64c-default A=default d64c-wg3 JAXDNN_ATTENTION_SM90_D64_WG3_CAUSAL=1 \
  --dim 64 --seqs 1024,2048,4096,8192,16384 --impls jaxdnn --ops fwd --causal 1
[ $((budget - SECONDS)) -gt 120 ] && ( cd /tmp && JAXDNN_ATTENTION_SM90_D64_WG3_CAUSAL=1 timeout "$(left 200)" \
  python3 -m jaxdnn.bench attention --dims 64 --no-torch --only dense --gpu-busy --out "$out/grid-d64.json" \
  > "$out/grid-d64.txt" 2>&1; echo "grid exit $?" )
