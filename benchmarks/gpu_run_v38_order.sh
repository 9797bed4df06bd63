#!/usr/bin/env bash
# One device call (NOTES.md attention v38): the dynamic scheduler's tile order
# (JAXDNN_ATTENTION_SM90_DYNAMIC=1) against the default (chunked longest-first
# for packed documents and causal up to 8192 keys):
#   1. the packed-documents harness (head dim 128, GPU-busy), A, B, A, B;
#   2. the d128 causal forward at 2048-8192 through jax (GPU-busy), two rounds.
#   bash benchmarks/gpu_run_v38_order.sh OUTDIR
source "$(dirname "$0")/device_call.sh" 400 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
build_jaxdnn; cat "$out/build.rc"
packed_ab A=default JAXDNN_ATTENTION_SM90_DYNAMIC=1
kt_rounds c-default A=default c-tile JAXDNN_ATTENTION_SM90_DYNAMIC=1 --dim 128 --seqs 2048,4096,8192 \
  --impls jaxdnn --ops fwd --causal 1
