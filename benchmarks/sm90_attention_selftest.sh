#!/usr/bin/env bash
# Builds and runs the Hopper attention forward self-test; logs go to $1.
# Usage: bash benchmarks/sm90_attention_selftest.sh LOGDIR ["bf16 f16"] ["0 1"]
#   (dtypes, kernel variants: 0 = intra-warpgroup overlap, 1 = + pingpong;
#   default: bf16, the default variant). SM90_EXTRA_FLAGS: extra nvcc flags,
#   e.g. -DJAXDNN_SM90_HANG_TRAP; SM90_TIMEOUT: seconds per run.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG="${1:-/tmp/sm90_selftest}"
mkdir -p "$LOG"
INC=$(python3 -c "import jax; print(jax.ffi.include_dir())")
BIN="$LOG/sm90_attention_selftest"
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --use_fast_math --expt-relaxed-constexpr \
  -I cpp -I "$INC" -Xptxas -v -diag-suppress 940,2473 ${SM90_EXTRA_FLAGS:-} \
  benchmarks/sm90_attention_selftest.cu cpp/attention/hopper/attention_sm90_forward.cu \
  -o "$BIN" > "$LOG/compile.log" 2>&1
rc=$?
grep -E "Compiling entry|Used|spill|warning" "$LOG/compile.log" | grep -v "api.h\|ffi.h" | head -60
if [ $rc -ne 0 ]; then echo "compile failed (rc=$rc)"; tail -40 "$LOG/compile.log"; exit $rc; fi
for dt in ${2:-bf16}; do
  for var in ${3:-default}; do
    [ "$var" = default ] && varg="" || varg="$var"
    timeout ${SM90_TIMEOUT:-240} "$BIN" "$dt" $varg 2>&1 | tee "$LOG/selftest_${dt}_$var.log"
    echo "exit: ${PIPESTATUS[0]}" | tee -a "$LOG/selftest_${dt}_$var.log"
  done
done
