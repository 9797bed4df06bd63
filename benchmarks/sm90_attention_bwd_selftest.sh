#!/usr/bin/env bash
# Builds (unless a prebuilt binary runs) and runs the Hopper attention backward
# self-test; logs go to $1.
# Usage: bash benchmarks/sm90_attention_bwd_selftest.sh LOGDIR [all|check|fused|fusedcheck]
#   SM90_BWD_BIN: a prebuilt binary to try first (default build/sm90bwd/selftest);
#   SM90_EXTRA_FLAGS: extra nvcc flags (e.g. -DJAXDNN_SM90_HANG_TRAP);
#   SM90_TIMEOUT: seconds for the run (default 100).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG="${1:-/tmp/sm90_bwd_selftest}"
mkdir -p "$LOG"
BIN="${SM90_BWD_BIN:-build/sm90bwd/selftest}"
if ! { [ -x "$BIN" ] && timeout 30 "$BIN" probe > "$LOG/probe.log" 2>&1; }; then
  echo "building (prebuilt binary missing or not runnable: $(tail -1 "$LOG/probe.log" 2>/dev/null))"
  INC=$(python3 -c "import jax; print(jax.ffi.include_dir())")
  BIN="$LOG/sm90_attention_bwd_selftest"
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --use_fast_math --expt-relaxed-constexpr \
    -I cpp -I "$INC" -Xptxas -v -diag-suppress 940,2473 ${SM90_EXTRA_FLAGS:-} \
    benchmarks/sm90_attention_bwd_selftest.cu cpp/attention/hopper/attention_sm90_backward.cu \
    cpp/attention/hopper/attention_sm90_backward_fused.cu \
    cpp/attention/hopper/attention_sm90_forward.cu -o "$BIN" > "$LOG/compile.log" 2>&1
  rc=$?
  grep -E "spill|warning" "$LOG/compile.log" | grep -v "0 bytes spill\|api.h\|ffi.h" | head -20
  if [ $rc -ne 0 ]; then echo "compile failed (rc=$rc)"; tail -40 "$LOG/compile.log"; exit $rc; fi
fi
cat "$LOG/probe.log" 2>/dev/null
timeout ${SM90_TIMEOUT:-100} "$BIN" "${2:-all}" 2>&1 | tee "$LOG/selftest.log"
echo "exit: ${PIPESTATUS[0]}" | tee -a "$LOG/selftest.log"
