#!/usr/bin/env bash
# One device call (NOTES.md attention v40): causal pairs (clusters of two on
# the dynamic scheduler, default over 8192 keys at head dim 128) through jax:
#   1. the d128 causal forward with the pairs off
#      (JAXDNN_ATTENTION_SM90_CAUSAL_PAIRS=0) against the default at 16384 and
#      32768 (tile order), two rounds;
#   2. the pairs everywhere (=1) against the default at 4096 and 8192
#      (chunked order), two rounds;
#   3. the GPU tests that reach them (long sequences, 128k tokens).
#   bash benchmarks/gpu_run_v40_pairs_jax.sh OUTDIR
source "$(dirname "$0")/device_call.sh" 585 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
build_jaxdnn; cat "$out/build.rc"
kt_rounds long-pairs0 JAXDNN_ATTENTION_SM90_CAUSAL_PAIRS=0 long-default A=default --dim 128 \
  --seqs 16384,32768 --impls jaxdnn --ops fwd --causal 1
kt_rounds mid-default A=default mid-pairs1 JAXDNN_ATTENTION_SM90_CAUSAL_PAIRS=1 --dim 128 \
  --seqs 4096,8192 --impls jaxdnn --ops fwd --causal 1
gpu_tests 240 "gpu and (long_sequence or 128k or deterministic)"
