#!/usr/bin/env bash
# One device call for the forward's two Q buffers on the dynamic scheduler
# (JAXDNN_SM90_FWD_DYNAMIC_Q_BUFS=2 at compile time; NOTES.md attention v31)
# and the head dim 64 causal default of v30 (three warpgroups from 2048 keys):
#   1. jaxdnn builds in the background while the self-tests built with two Q
#      buffers (build/q2) check every head dim in bf16 and f16 (dynamic
#      variants 25 and 9, and 89 at head dim 64) and every extended case, then
#      the self-tests with one (build/q1) and two time the causal grids and the
#      packed documents, ROUNDS alternating rounds;
#   2. the GPU tests with head dim 64 (the new causal default);
#   3. through jax (GPU-busy): the d64 causal forward with the default and with
#      JAXDNN_ATTENTION_SM90_D64_WG3_CAUSAL=0, two rounds; then the d64 grid.
#   bash benchmarks/gpu_run_v31_qbufs.sh OUTDIR   (carry .whl, build/q1, build/q2;
#   build them here: see NOTES.md v31)
source "$(dirname "$0")/device_call.sh" 580 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
source "$repo/benchmarks/tokamax_site.sh" > /dev/null 2>&1
build_jaxdnn &
q1=$repo/build/q1 q2=$repo/build/q2
st q2-check-25-bf16 60 "$q2/sm90_attention_selftest" bf16 25
st q2-check-25-f16 60 "$q2/sm90_attention_selftest" f16 25
st q2-check-9-bf16 60 "$q2/sm90_attention_selftest" bf16 9
st q2-check-89-f16 40 "$q2/sm90_attention_selftest" f16 89 64
st q2-ext-bf16 90 "$q2/sm90_attention_ext_selftest" bf16
st q2-ext-f16 90 "$q2/sm90_attention_ext_selftest" f16
grep -h FAIL "$out"/q2-*.log | head -10
for round in $(seq 1 "${ROUNDS:-2}"); do
  for b in q1 q2; do
    st ab-$b-25-d128-r$round 40 "$repo/build/$b/sm90_attention_selftest" bf16 25 128
    st ab-$b-25-d64-r$round 40 "$repo/build/$b/sm90_attention_selftest" bf16 25 64
    st ab-$b-89-d64-r$round 40 "$repo/build/$b/sm90_attention_selftest" bf16 89 64
  done
done
echo "== self-test TFLOP/s, causal grid (q1: one Q buffer, q2: two)"
grid_tflops '^\((8,2048|4,4096|1,16384|16,1024|32,512),[0-9]+,16,16,(64|128),1\)' "$out"/ab-*.log
echo "== packed documents and window (default variant -1)"
for b in q1 q2; do
  st ext-$b 90 "$repo/build/$b/sm90_attention_ext_selftest" bf16
  echo "$b: $(grep -E 'timing T (packed docs causal|packed docs |window|D256 packed).*variant -1' "$out/ext-$b.log" | awk '{print $3,$4,$5,$(NF-5)}' | tr '\n' ';')"
done
wait; cat "$out/build.rc"
gpu_tests 120 "gpu and 64"
kt_rounds d64c-default A=default d64c-wg3off JAXDNN_ATTENTION_SM90_D64_WG3_CAUSAL=0 \
  --dim 64 --seqs 1024,2048,4096,8192,16384 --impls jaxdnn --ops fwd --causal 1
[ $((budget - SECONDS)) -gt 120 ] && ( cd /tmp && timeout "$(left 200)" python3 -m jaxdnn.bench attention \
  --dims 64 --no-torch --only dense --gpu-busy --out "$out/grid-d64.json" > "$out/grid-d64.txt" 2>&1
  echo "grid exit $?" )
