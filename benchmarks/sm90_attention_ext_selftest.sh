#!/usr/bin/env bash
# Builds and runs the self-test of the Hopper attention forward's extended path
# (lengths, bottom-right causal, window, softcap, segments); logs go to $1.
# Usage: bash benchmarks/sm90_attention_ext_selftest.sh OUTDIR ["bf16 f16"]
#   Runs: the gate check (with JAXDNN_ATTENTION_SM90_EXT=0 extended cases must
#   be refused), then every case in every kernel variant per dtype, and the
#   packed-document timings. SM90_EXTRA_FLAGS: extra nvcc flags (e.g.
#   -DJAXDNN_SM90_HANG_TRAP turns a deadlock into a launch error; recommended
#   for the first run); SM90_TIMEOUT: seconds per run.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG="${1:-/tmp/sm90_ext_selftest}"
mkdir -p "$LOG"
INC=$(python3 -c "import jax; print(jax.ffi.include_dir())")
BIN="$LOG/sm90_attention_ext_selftest"
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --use_fast_math --expt-relaxed-constexpr \
  -I cpp -I "$INC" -Xptxas -v -diag-suppress 940,2473 ${SM90_EXTRA_FLAGS:-} \
  benchmarks/sm90_attention_ext_selftest.cu cpp/attention/hopper/attention_sm90_forward.cu \
  -o "$BIN" > "$LOG/compile.log" 2>&1
rc=$?
grep -E "warning" "$LOG/compile.log" | grep -v "api.h\|ffi.h" | head -20
echo "ptxas spill lines (count, text):"; grep -E "spill" "$LOG/compile.log" | sort | uniq -c
if [ $rc -ne 0 ]; then echo "compile failed (rc=$rc)"; tail -40 "$LOG/compile.log"; exit $rc; fi
status=0
timeout ${SM90_TIMEOUT:-120} "$BIN" gate 2>&1 | tee "$LOG/gate.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
for dt in ${2:-bf16 f16}; do
  timeout ${SM90_TIMEOUT:-480} "$BIN" "$dt" 2>&1 | tee "$LOG/selftest_${dt}.log"
  rc=${PIPESTATUS[0]}
  echo "exit: $rc" | tee -a "$LOG/selftest_${dt}.log"
  [ "$rc" -eq 0 ] || status=1
done
exit $status
