#!/usr/bin/env bash
# One device call (NOTES.md attention v27):
#   1. jaxdnn builds (the 80-query segment backward now the default);
#   2. short sequences' backward: below 2048 query rows the unordered default
#      is the two-kernel backward; GPU-busy A/B through jax against the fused
#      one (JAXDNN_ATTENTION_SM90_BWD=2) at seq 512 / 1024 (2048 as a check),
#      head dims 128 and 64, causal and not, ROUNDS alternating rounds;
#   3. the packed-document host gap: benchmarks/trace_packed_host.py with and
#      without XLA's command buffers.
#   bash benchmarks/gpu_run_v27_short_bwd.sh OUTDIR   (carry .whl)
source "$(dirname "$0")/device_call.sh" 580 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
source "$repo/benchmarks/tokamax_site.sh" > /dev/null 2>&1
build_jaxdnn
cat "$out/build.rc"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for d in 128 64; do
    impls=jaxdnn; [ "$round" = 1 ] && impls=jaxdnn,cudnn
    kt d$d-default-r$round A=default --seqs "${SEQS:-512,1024,2048}" --dim $d --impls $impls --ops fwd+bwd --causal 0,1
    kt d$d-fused-r$round JAXDNN_ATTENTION_SM90_BWD=2 --seqs "${SEQS:-512,1024,2048}" --dim $d --impls jaxdnn --ops fwd+bwd --causal 0,1
  done
done
for flags in "" "--xla_gpu_enable_command_buffer="; do
  [ $((budget - SECONDS)) -lt 50 ] && { echo "trace '$flags': skipped (time)"; continue; }
  echo "== trace, XLA_FLAGS='$flags'"
  ( cd /tmp && XLA_FLAGS="$flags" timeout "$(left 90)" python3 "$repo/benchmarks/trace_packed_host.py" ) \
    > "$out/trace${flags:+-nocmdbuf}.txt" 2>&1
  grep -E "^==|largest|API .*(Graph|Launch|Synchron|Event)" "$out/trace${flags:+-nocmdbuf}.txt" | cut -c1-150
done
