#!/usr/bin/env bash
# One device call (NOTES.md attention v41): where the packed-document
# forward's host-timed gap goes on the v41 code (segment ranges: one more
# kernel per call): builds jaxdnn, then benchmarks/trace_packed_host.py
# (host-timed vs CUPTI span and busy time, GPU records and API calls per call).
#   bash benchmarks/gpu_run_v41c_trace.sh OUTDIR
source "$(dirname "$0")/device_call.sh" 400 "$@"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
build_jaxdnn; cat "$out/build.rc"
( cd /tmp && timeout "$(left 200)" python3 "$repo/benchmarks/trace_packed_host.py" --calls 20 ) > "$out/trace.txt" 2>&1
echo "trace exit $?"; grep -v WARN "$out/trace.txt" | tail -80
