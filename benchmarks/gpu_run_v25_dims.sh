#!/usr/bin/env bash
# One device call (v25): the head dim 256 and 64 grids with the final defaults
# (dense cases, cuDNN / XLA / tokamax), then the forward self-test's d128 grid
# with the lazy rescale against "always", alternating processes (ROUNDS).
#   bash benchmarks/gpu_run_v25_dims.sh OUTDIR   (carry .whl and build/sm90)
source "$(dirname "$0")/device_call.sh" 580 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
source "$repo/benchmarks/tokamax_site.sh"
( cd "$repo" && python3 -m pip install --no-build-isolation --no-deps . > "$out/build.log" 2>&1 ) || { tail -20 "$out/build.log"; exit 1; }
for d in 256 64; do
  ( cd /tmp && timeout "$(left 200)" python3 -m jaxdnn.bench attention --out "$out/attention-d$d.json" \
      --dims $d --no-torch --only dense --gpu-busy ) > "$out/bench-d$d.txt" 2>&1
  echo "d$d: exit $?"; grep -E "vs cuDNN" "$out/bench-d$d.txt" | cut -c1-400
done
b=${BIN:-$repo/build/sm90}
for round in $(seq 1 "${ROUNDS:-3}"); do
  for th in always 8; do
    [ $((budget - SECONDS)) -lt 30 ] && break
    JAXDNN_ATTENTION_SM90_FWD_RESCALE=$th timeout "$(left 60)" "$b/sm90_attention_selftest" bf16 -1 128 \
      > "$out/self-$th-r$round.log" 2>&1
    echo "-- $th round $round: $(grep -c 'ALL PASSED' "$out/self-$th-r$round.log") ALL PASSED"
    grep -E "^\((8|4|2|1),(2048|4096|8192|16384),(2048|4096|8192|16384),16,16,128,[01]\)" "$out/self-$th-r$round.log" \
      | awk '{print $1, $(NF-2), $(NF-1)}' | paste -sd' '
  done
done
