#!/usr/bin/env bash
# Is the chained timing of jaxdnn's custom calls padded by XLA command
# buffers (CUDA graphs) re-tracing the FFI handler? Time the target cases
# chained and single, with command buffers on and off.
set -uo pipefail
out=${1:-${OUT:?give an output folder}}
repo=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
( cd "$repo" && python3 -m pip install --no-build-isolation --no-deps . ) > "$out/build.log" 2>&1 || exit 1
cd /tmp
run() {
  echo "== $1 (XLA_FLAGS=$XLA_FLAGS)"
  timeout 150 python3 -m jaxdnn.bench norms --cases 32768x4096,8192x8192,4096x12288 --impls xla \
    --chain "$2" --out "$out/timing_$1.json" 2>&1 | grep -E " fwd | bwd_kernel |ceiling"
}
export XLA_FLAGS=""; run chained_cmdbuf 8
export XLA_FLAGS="--xla_gpu_enable_command_buffer="; run chained_nocmdbuf 8
export XLA_FLAGS=""; run single 1
