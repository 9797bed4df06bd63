#!/usr/bin/env bash
# One device call for two switches (v25), each against the default, alternating processes:
#   the forward's lazy O rescaling (JAXDNN_ATTENTION_SM90_FWD_RESCALE=8 vs always) and
#   the causal d128 backward's 80-query steps (JAXDNN_ATTENTION_SM90_BWD_Q80_CAUSAL=1 vs 0).
#   1. jaxdnn builds in the background while the self-tests (carried in build/sm90):
#      the forward self-test with the lazy rescale (every head dim, bf16; d128 f16) and
#      threshold 0, and the backward's atomiccheck with the causal 80-query switch;
#   2. GPU-busy A/Bs through jax (benchmarks/kernel_timing.py), ROUNDS rounds:
#      forward only over seq 2k-16k (causal and not), and causal fwd+bwd;
#   3. TEST_K (optional): GPU tests with both switches on.
#   bash benchmarks/gpu_run_v25_ab.sh OUTDIR
source "$(dirname "$0")/device_call.sh" 580 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
source "$repo/benchmarks/tokamax_site.sh"
build_jaxdnn &
b=${BIN:-$repo/build/sm90}
if [ "${SELF:-1}" != 0 ]; then
  st self-fwd-lazy8-bf16 100 JAXDNN_ATTENTION_SM90_FWD_RESCALE=8 "$b/sm90_attention_selftest" bf16 -1
  st self-fwd-lazy8-f16-d128 60 JAXDNN_ATTENTION_SM90_FWD_RESCALE=8 "$b/sm90_attention_selftest" f16 -1 128
  st self-fwd-lazy0-bf16-d64 60 JAXDNN_ATTENTION_SM90_FWD_RESCALE=0 "$b/sm90_attention_selftest" bf16 -1 64
  st self-fwd-lazy8-ext-bf16 100 JAXDNN_ATTENTION_SM90_FWD_RESCALE=8 "$b/sm90_attention_ext_selftest" bf16
  st self-bwd-atomiccheck-q80c 120 JAXDNN_ATTENTION_SM90_BWD_Q80_CAUSAL=1 "$b/sm90_attention_bwd_selftest" atomiccheck
  grep -E "FAIL" "$out"/self-*.log | head -20
fi
wait; cat "$out/build.rc"
for round in $(seq 1 "${ROUNDS:-2}"); do
  kt fwd-always-r$round JAXDNN_ATTENTION_SM90_FWD_RESCALE=always --dim 128 --seqs "${SEQS:-2048,4096,8192,16384}" --impls jaxdnn --ops fwd --causal 0,1
  kt fwd-lazy8-r$round JAXDNN_ATTENTION_SM90_FWD_RESCALE=8 --dim 128 --seqs "${SEQS:-2048,4096,8192,16384}" --impls jaxdnn --ops fwd --causal 0,1
  kt bwd-q80c0-r$round JAXDNN_ATTENTION_SM90_BWD_Q80_CAUSAL=0 --dim 128 --seqs "${SEQS:-2048,4096,8192,16384}" --impls jaxdnn --ops fwd+bwd --causal 1
  kt bwd-q80c1-r$round JAXDNN_ATTENTION_SM90_BWD_Q80_CAUSAL=1 --dim 128 --seqs "${SEQS:-2048,4096,8192,16384}" --impls jaxdnn --ops fwd+bwd --causal 1
done
if [ -n "${TEST_K:-}" ]; then
  xdist=""; python3 -c "import xdist" 2> /dev/null && xdist="-n 14"
  ( cd /tmp && JAXDNN_ATTENTION_SM90_FWD_RESCALE=8 JAXDNN_ATTENTION_SM90_BWD_Q80_CAUSAL=1 timeout "$(left 400)" \
      python3 -m pytest "$repo/tests" -q -p no:cacheprovider $xdist -k "$TEST_K" -rfE --timeout 150 ) > "$out/tests-gpu.log" 2>&1
  echo "pytest exit $?"; grep -E "^FAILED|^ERROR" "$out/tests-gpu.log" | head -20; tail -1 "$out/tests-gpu.log"
fi
