#!/bin/sh
# Runs cpp/pooling/sm80/pool.cu's launchers on the host (no GPU), under the
# CUDA emulation of cuda_emu.h, against the CPU kernels on random geometries:
# y, the max pool's index and dx must match bit for bit (the whole-input
# average to a tolerance: its sum's order differs). Semantics only: no
# timing, warps run as independent threads.
#   tests/pooling/emulate/run.sh [cases] [largest spatial size]
# Needs g++ >= 12, the CUDA headers (CUDA_HOME, default /usr/local/cuda) and
# jax (its FFI headers).
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
python=${PYTHON:-python3}
ffi=$("$python" -c "import jax; print(jax.ffi.include_dir())")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/common/sm80"
"$python" "$here/transform.py" "$root/cpp/pooling/sm80/pool.cu" > "$out/pool_emu.inc"
"$python" "$here/transform.py" "$root/cpp/common/sm80/row_walk.cuh" > "$out/common/sm80/row_walk.cuh"
g++ -std=c++20 -O1 -pthread -w -I"$out" -I"$here" -I"$root/cpp" -I"$ffi" -I"$cuda/include" \
  "$here/driver.cc" "$root/cpp/pooling/cpu/pool_kernels.cc" -o "$out/driver"
"$out/driver" "$@"
