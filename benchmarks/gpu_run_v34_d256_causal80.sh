#!/usr/bin/env bash
# One device call for the head dim 256 dense causal forward on 80-key blocks
# (one CTA per tile, the top three blocks of a tile masked; variant bit 32 with
# 1, JAXDNN_ATTENTION_SM90_D256_CAUSAL_BLOCKN=80; NOTES.md attention v34):
#   1. jaxdnn builds in the background while the self-test (build/n80) checks
#      variant 33 at head dim 256 in bf16 and f16 (every d256 case, causal ones
#      on 80-key blocks), then times 1 (64-key) against 33, ROUNDS rounds;
#   2. the head dim 256 GPU tests with the switch;
#   3. through jax (GPU-busy): the d256 causal forward with and without it, two
#      rounds, then the d256 grid with it.
#   bash benchmarks/gpu_run_v34_d256_causal80.sh OUTDIR   (carry .whl and build/n80)
source "$(dirname "$0")/device_call.sh" 580 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
source "$repo/benchmarks/tokamax_site.sh" > /dev/null 2>&1
build_jaxdnn &
b=$repo/build/n80/sm90_attention_selftest
st check-33-bf16 60 "$b" bf16 33 256
st check-33-f16 60 "$b" f16 33 256
st_rounds 60 "$b" bf16 256 1 33
grep -h FAIL "$out"/*.log | head -10
echo "== self-test TFLOP/s, d256 (1 = 64-key blocks, 33 = 80-key; causal = last field 1)"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,256,[01]\)' "$out"/v*-r*.log
wait; cat "$out/build.rc"
sw=JAXDNN_ATTENTION_SM90_D256_CAUSAL_BLOCKN=80
gpu_tests 150 "gpu and 256" $sw
kt_rounds d256c-default A=default d256c-n80 $sw --dim 256 --seqs 1024,2048,4096,8192,16384 --impls jaxdnn \
  --ops fwd --causal 1
[ $((budget - SECONDS)) -gt 120 ] && ( cd /tmp && env $sw timeout "$(left 200)" python3 -m jaxdnn.bench attention \
  --dims 256 --no-torch --only dense --gpu-busy --out "$out/grid-d256.json" > "$out/grid-d256.txt" 2>&1
  echo "grid exit $?" )
