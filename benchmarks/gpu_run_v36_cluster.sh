#!/usr/bin/env bash
# One device call for the clusters of two (variant bit 128) with remote
# arrivals of .release.cta semantics (NOTES.md attention v36):
#   1. the self-test (build/v36: shared loads; build/v35m1: coupled stages
#      only) checks 131 at d128 and 163 at d256, then times 3 against 131
#      (both builds) at d128 and 35 against 163 at d256, two rounds;
#   2. through jax (GPU-busy): the d128 and d256 non-causal forwards with and
#      without JAXDNN_ATTENTION_SM90_CLUSTER=1, two rounds.
#   bash benchmarks/gpu_run_v36_cluster.sh OUTDIR   (carry build/v36, build/v35m1)
source "$(dirname "$0")/device_call.sh" 585 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
build_jaxdnn &
b=$repo/build/v36/sm90_attention_selftest
st check-131-f16 45 "$b" f16 131 128
st check-163-f16 60 "$b" f16 163 256
for round in 1 2; do
  st v3-r$round 45 "$b" bf16 3 128
  st v131-r$round 45 "$b" bf16 131 128
  st v131-m1-r$round 45 "$repo/build/v35m1/sm90_attention_selftest" bf16 131 128
  st v35-r$round 60 "$b" bf16 35 256
  st v163-r$round 60 "$b" bf16 163 256
done
grep -h FAIL "$out"/*.log | head
echo "== self-test TFLOP/s, non-causal"
grid_tflops '^\((16,1024|8,2048|4,4096|2,8192|1,16384),[0-9]+,16,16,(128|256),0\)' "$out"/v*-r*.log
wait; cat "$out/build.rc"
sw=JAXDNN_ATTENTION_SM90_CLUSTER=1
kt_rounds d128-default A=default d128-cluster $sw --dim 128 --seqs 1024,2048,4096,8192,16384 --impls jaxdnn \
  --ops fwd --causal 0
kt_rounds d256-default A=default d256-cluster $sw --dim 256 --seqs 2048,4096,8192,16384 --impls jaxdnn \
  --ops fwd --causal 0
