#!/usr/bin/env bash
# One device call for the extended forward's producer preparing the next tile
# (band, query segment range, top-chunk vote) before this tile's terminator,
# with the 48 / 224 register split (NOTES.md attention v32; measured and
# reverted, the script kept for A/Bs of the ext path against build/q1):
#   1. jaxdnn builds in the background while the new ext self-test (build/pf)
#      checks every extended case in bf16 and f16, then it and the previous
#      one (build/q1) time the packed documents, window and dense-via-ext
#      cases, ROUNDS alternating rounds;
#   2. the full GPU test suite;
#   3. the harness at head dim 128, seq 8192: dense and packed documents (the
#      packed ratio against dense causal), GPU-busy.
#   bash benchmarks/gpu_run_v32_ext_prefetch.sh OUTDIR   (carry .whl, build/q1, build/pf)
source "$(dirname "$0")/device_call.sh" 580 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
source "$repo/benchmarks/tokamax_site.sh" > /dev/null 2>&1
build_jaxdnn &
st pf-ext-bf16 90 "$repo/build/pf/sm90_attention_ext_selftest" bf16
st pf-ext-f16 90 "$repo/build/pf/sm90_attention_ext_selftest" f16
for round in $(seq 1 "${ROUNDS:-2}"); do
  for b in q1 pf; do st ab-$b-r$round 90 "$repo/build/$b/sm90_attention_ext_selftest" bf16; done
done
echo "== ext self-test TFLOP/s (default variant; q1: before, pf: next tile prepared early)"
for f in "$out"/ab-*.log; do
  echo "$(basename "$f" .log): $(grep -E 'timing T .*variant -1' "$f" | sed -E 's/ +timing T //; s/ +variant -1: +[0-9.]+ ms +/=/; s/ TFLOP.*//' | tr '\n' ';')"
done
wait; cat "$out/build.rc"
gpu_tests 360 gpu
[ $((budget - SECONDS)) -gt 60 ] && ( cd /tmp && timeout "$(left 150)" python3 -m jaxdnn.bench attention \
  --dims 128 --seqs 8192 --only dense,packed --no-torch --gpu-busy --out "$out/packed.json" \
  > "$out/packed.txt" 2>&1; echo "packed exit $?"; grep -E "packed|b2s8192" "$out/packed.txt" | grep -v WARN )
