#!/usr/bin/env bash
# Compiles the standalone sm90 attention self-tests into BINDIR (default
# build/sm90): all of them at once. Run it on the development machine (nvcc
# 13.0 like the GPU machine) and carry BINDIR to the device, so the device
# call spends its time running, not compiling.
#   bash benchmarks/build_sm90_selftests.sh [BINDIR]
# SM90_EXTRA_FLAGS: extra nvcc flags (e.g. -DJAXDNN_SM90_HANG_TRAP).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/sm90}
mkdir -p "$bin"
INC=$(python3 -c "import jax; print(jax.ffi.include_dir())")
build() {  # name, sources...
  local name=$1; shift
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --use_fast_math --expt-relaxed-constexpr \
    -I cpp -I "$INC" -Xptxas -v -diag-suppress 940,2473 ${SM90_EXTRA_FLAGS:-} "$@" \
    -o "$bin/$name" > "$bin/$name.compile.log" 2>&1
  echo "$name: rc=$? spills: $(grep -c 'bytes spill stores' "$bin/$name.compile.log") lines," \
       "nonzero: $(grep -E '[1-9][0-9]* bytes spill' "$bin/$name.compile.log" | wc -l)"
}
fwd=cpp/attention/hopper/attention_sm90_forward.cu
bwd=cpp/attention/hopper/attention_sm90_backward.cu
build sm90_attention_selftest benchmarks/sm90_attention_selftest.cu $fwd &
build sm90_attention_ext_selftest benchmarks/sm90_attention_ext_selftest.cu $fwd &
build sm90_attention_bwd_selftest benchmarks/sm90_attention_bwd_selftest.cu $bwd \
  cpp/attention/hopper/attention_sm90_backward_fused.cu $fwd &
# The split-KV decode forward (cpp/attention/decode), timed next to the Hopper forward.
build decode_split_selftest benchmarks/decode_split_selftest.cu \
  cpp/attention/decode/attention_decode_split.cu $fwd &
wait
