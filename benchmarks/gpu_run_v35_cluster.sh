#!/usr/bin/env bash
# One device call for clusters of two CTAs with K/V multicast in the dense
# non-causal forward (variant bit 128, JAXDNN_ATTENTION_SM90_CLUSTER=1; NOTES.md
# attention v35), and the runbook's re-test of the dynamic scheduler on long
# causal tiles (variant 25 against 1):
#   1. jaxdnn builds in the background while the self-test (build/v35) checks
#      131 (d128) and 163 / 131 (d256, 80- and 64-key blocks) in bf16 and f16,
#      then times 3 against 131 at d128 and 35 against 163 at d256, ROUNDS
#      alternating rounds, and 1 against 25 at d128 (causal rows);
#   2. the forward GPU tests with the switch on;
#   3. through jax (GPU-busy): the d128 non-causal forward with and without
#      the switch, two rounds.
#   bash benchmarks/gpu_run_v35_cluster.sh OUTDIR   (carry build/v35)
source "$(dirname "$0")/device_call.sh" 585 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
build_jaxdnn &
b=$repo/build/v35/sm90_attention_selftest
st check-131-bf16 60 "$b" bf16 131 128
st check-131-f16 60 "$b" f16 131 128
st check-163-bf16 60 "$b" bf16 163 256
st check-131-d256-f16 60 "$b" f16 131 256
grep -h FAIL "$out"/check-*.log | head -10
st_rounds 45 "$b" bf16 128 3 131
st_rounds 60 "$b" bf16 256 35 163
echo "== self-test TFLOP/s (3 / 35 = one CTA each, 131 / 163 = clusters; non-causal rows)"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,(128|256),0\)' "$out"/v*-r*.log
st_rounds 45 "$b" bf16 128 1 25
echo "== self-test TFLOP/s (1 = one CTA per tile, 25 = dynamic; causal rows)"
grid_tflops '^\((8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,128,1\)' "$out"/v1-r*.log "$out"/v25-r*.log
wait; cat "$out/build.rc"
sw=JAXDNN_ATTENTION_SM90_CLUSTER=1
gpu_tests 150 "test_gpu_matches_oracle or test_gpu_long_sequence" $sw
kt_rounds d128-default A=default d128-cluster $sw --dim 128 --seqs 1024,2048,4096,8192,16384 --impls jaxdnn \
  --ops fwd --causal 0
kt_rounds d256-default A=default d256-cluster $sw --dim 256 --seqs 2048,4096,8192,16384 --impls jaxdnn \
  --ops fwd --causal 0
